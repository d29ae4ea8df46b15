#!/usr/bin/python3
"""PowerSGD's own cost per step, without the training around it: one rank per
network-namespace host (bench/netns_hosts.py) on shaped links. Each rank takes
a model's gradients that PowerSGD compresses (random values), and each step
meets the others (an 8-byte allreduce), adds them all (the fold, which the
training does in backward's hooks) and calls finish() (the factors'
allreduces, Qt and the reconstruction). It prints, per run, each rank's median
add() and finish() time over the steps after the first five, and over the
runs the median of the slower rank's finish().

With --libs NAME=DIR,... each run puts DIR first on LD_LIBRARY_PATH (a
libkolo_torch.so.0 built elsewhere), the names interleaved within each round
and their order rotating round by round: a same-run comparison of two builds.

    bench/powersgd_step.py --hosts 2 --rate 1gbit --rounds 6
    bench/powersgd_step.py --libs old=/tmp/oldlib,new=/tmp/newlib --rounds 6

Needs root, a build with the Python module and Debian's python3-torchvision.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_STEPS = 5


def worker(args):
    import torch
    import torchvision
    import kolo.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    compression = hvd.PowerSGD(rank=args.rank)
    compressor = compression._impl
    compressor.bind(average=True, process_set=0, name_prefix='powersgd_step')
    model = getattr(torchvision.models, args.model)()
    grads = [(name, torch.empty_like(p)) for name, p in model.named_parameters() if compressor.takes(p)]
    generator = torch.Generator().manual_seed(hvd.rank())
    adds, finishes = [], []
    for step in range(SKIPPED_STEPS + args.steps):
        for _, grad in grads:
            grad.normal_(generator=generator).mul_(0.01)
        hvd.allreduce(torch.zeros(1), name='powersgd_step.meet')
        start = time.perf_counter()
        for name, grad in grads:
            compressor.add(name, grad)
        added = time.perf_counter()
        compressor.finish()
        done = time.perf_counter()
        if step >= SKIPPED_STEPS:
            adds.append((added - start) * 1e3)
            finishes.append((done - added) * 1e3)
    print(json.dumps({'rank': hvd.rank(), 'add_ms': statistics.median(adds), 'finish_ms': statistics.median(finishes),
                      'allreduces': compression.last_allreduces, 'sent': compression.last_sent_elements}),
          flush=True)


def run(hosts, args, library):
    argv = hosts.kolorun_argv(os.path.join(args.build_dir, 'tools', 'kolorun', 'kolorun')) + [
        '/usr/bin/python3', os.path.abspath(__file__), '--worker', '--steps', str(args.steps), '--rank',
        str(args.rank), '--model', args.model]
    env = dict(os.environ, **hosts.environment(), OPENBLAS_NUM_THREADS='1',
               PYTHONPATH=os.path.join(args.build_dir, 'python'))
    if library:
        env['LD_LIBRARY_PATH'] = library
    result = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, env=env)
    ranks = []
    for line in result.stdout.splitlines():
        text = line.split(':', 1)[-1] if line.startswith('[') else line
        if text.startswith('{'):
            ranks.append(json.loads(text))
    if result.returncode != 0 or len(ranks) != hosts.count:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f'powersgd_step: a run failed (exit {result.returncode})')
    return sorted(ranks, key=lambda r: r['rank'])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--hosts', type=int, default=2)
    ap.add_argument('--rate', default='1gbit')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--steps', type=int, default=20, help='steps timed per run, after 5 more')
    ap.add_argument('--rank', type=int, default=4, help='PowerSGD rank (default 4)')
    ap.add_argument('--model', default='resnet50', help='a torchvision model (default resnet50)')
    ap.add_argument('--libs', default='', help='NAME=DIR,... builds of libkolo_torch to compare')
    ap.add_argument('--build-dir', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--timeout', type=int, default=600, help='seconds one run may take')
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.hosts < 2 or args.rounds < 1 or args.steps < 1 or args.rank < 1:
        ap.error('--hosts of 2 or more, --rounds, --steps and --rank of 1 or more')
    libs = [entry.split('=', 1) for entry in args.libs.split(',') if entry] or [['build', '']]
    if any(len(entry) != 2 or not entry[0] for entry in libs):
        ap.error('--libs takes NAME=DIR,...')
    finishes = {name: [] for name, _ in libs}
    with netns_hosts.Hosts(args.hosts, rate=args.rate, cpus='spread') as hosts:
        for round_index in range(args.rounds):
            shift = round_index % len(libs)
            for name, library in libs[shift:] + libs[:shift]:
                ranks = run(hosts, args, library)
                finishes[name].append(max(r['finish_ms'] for r in ranks))
                print(f'round {round_index + 1} {name}: ' + ', '.join(
                    f"rank {r['rank']} add {r['add_ms']:.1f} ms finish {r['finish_ms']:.1f} ms" for r in ranks) +
                    f" ({ranks[0]['allreduces']} allreduces, {ranks[0]['sent']} elements sent)", flush=True)
    for name, values in finishes.items():
        print(f'{name}: finish (slower rank) median {statistics.median(values):.1f} ms, '
              f'range {min(values):.1f}-{max(values):.1f}')


if __name__ == '__main__':
    main()
