#!/usr/bin/python3
"""Training over shaped links with and without gradient compression, one worker
per network-namespace host (bench/netns_hosts.py), in interleaved rounds:

  ceiling    kolo's synthetic benchmark with --lockstep-only: the workers meet
             once a step (8 bytes) and exchange no gradients, what the machine
             allows synchronous training at all
  kolo       the same benchmark, gradients allreduced whole
  powersgd   the same with --powersgd-rank R (kolo::torch::PowerSGD)
  ddp-powersgd
             bench/ddp_synthetic.py, PyTorch DDP over Gloo with its PowerSGD
             communication hook at the same rank (error feedback, warm start)
  ddp        DDP without compression (with --ddp-plain)

For each host count and link rate it prints every configuration's median
total img/s (and range), its ratio to the ceiling and the ratios kolo
PowerSGD / DDP PowerSGD and PowerSGD / kolo, each the median of the rounds'
own ratios, and the gradient bytes host 0 sent per step: nic0's counter over
the run less the ceiling's in the same round (which sends the start's
broadcast of the model too), divided by the steps it ran, warmup included.

    bench/compression_bench.py --hosts 2,3,4 --rates 1gbit --rounds 3 --out docs/benchmark-data/compression

Hosts get CPUs with --cpus spread (host i on CPU i modulo the CPUs): with two
CPUs, 3 and 4 hosts share them. Needs root and a build with examples and torch.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTAL = re.compile(r'Total img/sec on \d+ worker\(s\): ([0-9.]+)')


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--hosts', default='2', help='host counts, comma-separated (default 2)')
    ap.add_argument('--rates', default='1gbit', help='link rates, comma-separated (default 1gbit)')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--rank', type=int, default=4, help='PowerSGD rank (default 4)')
    ap.add_argument('--model', default='resnet50')
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--image-size', type=int, default=48)
    ap.add_argument('--num-warmup-batches', type=int, default=3)
    ap.add_argument('--num-iters', type=int, default=4)
    ap.add_argument('--num-batches-per-iter', type=int, default=3)
    ap.add_argument('--ddp-plain', action='store_true', help='also DDP without compression')
    ap.add_argument('--build-dir', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--timeout', type=int, default=600, help='seconds one run may take')
    ap.add_argument('--out', help='folder for results.json and summary.txt')
    args = ap.parse_args()
    args.host_counts = [int(h) for h in args.hosts.split(',')]
    args.rate_list = args.rates.split(',')
    if any(h < 2 for h in args.host_counts) or args.rounds < 1 or args.rank < 1:
        ap.error('--hosts of 2 or more, --rounds and --rank of 1 or more')
    return args


def benchmark_args(args):
    return ['--model', args.model, '--batch-size', str(args.batch_size), '--image-size', str(args.image_size),
            '--num-warmup-batches', str(args.num_warmup_batches), '--num-iters', str(args.num_iters),
            '--num-batches-per-iter', str(args.num_batches_per_iter), '--threads', '1']


def steps_of(args):
    return args.num_warmup_batches + args.num_iters * args.num_batches_per_iter


def run_kolo(hosts, args, extra):
    argv = hosts.kolorun_argv(os.path.join(args.build_dir, 'tools', 'kolorun', 'kolorun')) + [
        os.path.join(args.build_dir, 'examples', 'synthetic_benchmark', 'synthetic_benchmark')]
    return subprocess.run(argv + benchmark_args(args) + extra, capture_output=True, text=True, timeout=args.timeout,
                          env=dict(os.environ, **hosts.environment(), OPENBLAS_NUM_THREADS='1'))


def run_ddp(hosts, args, extra):
    port = 29500 + int(time.monotonic() * 10) % 1000
    common = ['/usr/bin/python3', os.path.join(ROOT, 'bench', 'ddp_synthetic.py'), '--num-proc', str(hosts.count),
              '--master-addr', hosts.addresses[0], '--master-port', str(port)] + benchmark_args(args) + extra
    env = dict(os.environ, GLOO_SOCKET_IFNAME=hosts.interface, OPENBLAS_NUM_THREADS='1')
    others = [hosts.popen(i, common + ['--rank', str(i)], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) for i in range(1, hosts.count)]
    try:
        result = hosts.run(0, common + ['--rank', '0'], capture_output=True, text=True, timeout=args.timeout, env=env)
    finally:
        for other in others:
            try:
                other.wait(timeout=30)
            except subprocess.TimeoutExpired:
                other.kill()
    return result


CONFIGS = {
    'ceiling': lambda hosts, args: run_kolo(hosts, args, ['--lockstep-only']),
    'kolo': lambda hosts, args: run_kolo(hosts, args, []),
    'powersgd': lambda hosts, args: run_kolo(hosts, args, ['--powersgd-rank', str(args.rank)]),
    'ddp-powersgd': lambda hosts, args: run_ddp(hosts, args, ['--powersgd-rank', str(args.rank)]),
    'ddp': lambda hosts, args: run_ddp(hosts, args, []),
}


def measure(hosts, args, config):
    before = hosts.counters(0)['tx_bytes']
    result = CONFIGS[config](hosts, args)
    sent = hosts.counters(0)['tx_bytes'] - before
    found = TOTAL.search(result.stdout)
    if result.returncode != 0 or not found:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f'compression_bench: {config} failed (exit {result.returncode})')
    return float(found.group(1)), sent / steps_of(args)


def median_ratio(rows, a, b):
    return statistics.median(r[a]['img_s'] / r[b]['img_s'] for r in rows)


def summarize(results, args):
    lines = []
    for (count, rate), rows in results.items():
        configs = list(rows[0])
        lines.append(f'\n{count} hosts x 1 worker, {rate} links, {args.model} batch {args.batch_size} '
                     f'{args.image_size}px, PowerSGD rank {args.rank}, {len(rows)} rounds')
        lines.append(f'{"configuration":<16} {"img/s p50":>10} {"min":>8} {"max":>8} {"/ceiling":>9} '
                     f'{"gradient MB/step":>17}')
        for config in configs:
            values = [r[config]['img_s'] for r in rows]
            sent = statistics.median(r[config]['bytes_per_step'] - r['ceiling']['bytes_per_step'] for r in rows) / 1e6
            lines.append(f'{config:<16} {statistics.median(values):>10.1f} {min(values):>8.1f} {max(values):>8.1f} '
                         f'{median_ratio(rows, config, "ceiling"):>9.3f} {sent:>17.2f}')
        lines.append(f'kolo PowerSGD / DDP PowerSGD: {median_ratio(rows, "powersgd", "ddp-powersgd"):.2f}x; '
                     f'kolo PowerSGD / kolo whole gradients: {median_ratio(rows, "powersgd", "kolo"):.2f}x '
                     '(medians of the rounds\' own ratios)')
    return '\n'.join(lines)


def main():
    args = parse_args()
    reason = netns_hosts.unavailable()
    if reason:
        print(f'compression_bench: {reason}', file=sys.stderr)
        return 77
    configs = ['ceiling', 'kolo', 'powersgd', 'ddp-powersgd'] + (['ddp'] if args.ddp_plain else [])
    started = time.monotonic()
    print(f'# compression_bench {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, '
          f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}', flush=True)
    results = {}
    for count in args.host_counts:
        for rate in args.rate_list:
            rows = []
            with netns_hosts.Hosts(count, rate=rate, cpus='spread') as hosts:
                for round_index in range(args.rounds):
                    # Each round starts one configuration later, so that none always runs first.
                    order = configs[round_index % len(configs):] + configs[:round_index % len(configs)]
                    row = {}
                    for config in order:
                        img_s, per_step = measure(hosts, args, config)
                        row[config] = {'img_s': img_s, 'bytes_per_step': per_step}
                        print(f'{count} hosts {rate} round {round_index + 1} {config:<13} {img_s:7.1f} img/s, '
                              f'{per_step / 1e6:7.2f} MB sent per step by host 0', flush=True)
                    rows.append({c: row[c] for c in configs})
            results[(count, rate)] = rows
    summary = summarize(results, args)
    print(summary)
    print(f'\nthe run took {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.2f}')
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, 'results.json'), 'w') as f:
            json.dump({f'{c} hosts {r}': rows for (c, r), rows in results.items()}, f, indent=1)
        with open(os.path.join(args.out, 'summary.txt'), 'w') as f:
            f.write(summary.lstrip('\n') + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
