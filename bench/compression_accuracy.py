#!/usr/bin/python3
"""Accuracy with and without gradient compression: the Fashion-MNIST demo
(examples/fashion_mnist, C++) on 2 workers under kolorun, uncompressed and
with PowerSGD (from each --start-steps value), for each seed, interleaved; each run gives the validation
accuracy after every epoch and the gradient bytes a worker hands the
allreduces per step. Also one epoch of the Python demo
(examples/python/fashion_mnist.py) each way, for the first seed.

    bench/compression_accuracy.py --epochs 5 --seeds 42,1,2 --rank 4 \\
        --start-steps 0,100 --out docs/benchmark-data/compression-accuracy --plot docs/plots/compression/accuracy.png

Prints, per configuration, the accuracy after the first and the last epoch
(median over seeds, and the range) and the bytes per step; writes
results.json and summary.txt to --out and draws the per-epoch curves (median
over seeds) with gnuplot to --plot.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCURACY = re.compile(r'Epoch\[(\d+)\] Validation-accuracy=([0-9.]+)')
BYTES = re.compile(r'Gradient bytes per step: (\d+) of (\d+)')


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=5)
    ap.add_argument('--seeds', default='42,1,2')
    ap.add_argument('--rank', type=int, default=4, help='PowerSGD rank (default 4)')
    ap.add_argument('--start-steps', default='0',
                    help="PowerSGD's start_step, one configuration each, comma-separated (default 0)")
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--build-dir', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--out')
    ap.add_argument('--plot')
    args = ap.parse_args()
    args.seed_list = [int(s) for s in args.seeds.split(',')]
    args.start_step_list = [int(s) for s in args.start_steps.split(',')]
    return args


def kolorun(args):
    return [os.path.join(args.build_dir, 'tools', 'kolorun', 'kolorun'), '-np', str(args.workers)]


def run_cpp(args, seed, start_step):
    """start_step None: uncompressed."""
    argv = kolorun(args) + [os.path.join(args.build_dir, 'examples', 'fashion_mnist', 'fashion_mnist'),
                            '--epochs', str(args.epochs), '--seed', str(seed)]
    if start_step is not None:
        argv += ['--powersgd-rank', str(args.rank), '--powersgd-start-step', str(start_step)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    accuracies = [float(a) for _, a in sorted((int(e), a) for e, a in ACCURACY.findall(out))]
    sent, whole = (int(v) for v in BYTES.search(out).groups())
    return {'accuracy': accuracies, 'bytes_per_step': sent, 'uncompressed_bytes_per_step': whole}


def run_python(args, seed, start_step):
    argv = kolorun(args) + ['/usr/bin/python3', os.path.join(ROOT, 'examples', 'python', 'fashion_mnist.py'),
                            '--epochs', '1', '--seed', str(seed)]
    if start_step is not None:
        argv += ['--powersgd-rank', str(args.rank), '--powersgd-start-step', str(start_step)]
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build_dir, 'python'))
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    return [float(a) for _, a in sorted((int(e), a) for e, a in ACCURACY.findall(out))]


def main():
    args = parse_args()
    started = time.monotonic()
    configs = {'uncompressed': None}
    for start in args.start_step_list:
        configs[f'powersgd rank {args.rank}' + (f' from step {start}' if start else '')] = start
    runs = {name: [] for name in configs}
    for i, seed in enumerate(args.seed_list):
        order = list(configs)[i % len(configs):] + list(configs)[:i % len(configs)]
        for name in order:
            result = run_cpp(args, seed, configs[name])
            result['seed'] = seed
            runs[name].append(result)
            print(f'seed {seed} {name:<18} accuracy by epoch {" ".join(f"{a:.4f}" for a in result["accuracy"])}, '
                  f'{result["bytes_per_step"]} bytes per step', flush=True)
    python = {name: run_python(args, args.seed_list[0], start)[0] for name, start in configs.items()}

    lines = [f'Fashion-MNIST, {args.workers} workers, {args.epochs} epochs, seeds {args.seeds} '
             f'(PowerSGD rank {args.rank})',
             f'{"configuration":<20} {"epoch 1 p50":>11} {"range":>15} {f"epoch {args.epochs} p50":>11} '
             f'{"range":>15} {"bytes/step":>11}']
    for name, rows in runs.items():
        first = [r['accuracy'][0] for r in rows]
        last = [r['accuracy'][-1] for r in rows]
        lines.append(f'{name:<30} {statistics.median(first):>11.4f} {min(first):>7.4f}-{max(first):<7.4f} '
                     f'{statistics.median(last):>11.4f} {min(last):>7.4f}-{max(last):<7.4f} '
                     f'{rows[0]["bytes_per_step"]:>11}')
    for name in list(runs)[1:]:
        gaps = [a['accuracy'][-1] - b['accuracy'][-1] for a, b in zip(runs['uncompressed'], runs[name])]
        lines.append(f'last epoch, uncompressed minus {name}, seed by seed: {" ".join(f"{g:+.4f}" for g in gaps)}')
    lines.append('Python demo, one epoch, seed ' + str(args.seed_list[0]) + ': ' +
                 ', '.join(f'{name} {acc:.4f}' for name, acc in python.items()))
    summary = '\n'.join(lines)
    print(summary)
    print(f'the run took {time.monotonic() - started:.0f} s')
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, 'results.json'), 'w') as f:
            json.dump({'cpp': runs, 'python_one_epoch': python}, f, indent=1)
        with open(os.path.join(args.out, 'summary.txt'), 'w') as f:
            f.write(summary + '\n')
    if args.plot:
        plot(runs, args)
    return 0


def plot(runs, args):
    if shutil.which('gnuplot') is None:
        print('compression_accuracy: gnuplot is not installed; no plot', file=sys.stderr)
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='compression-accuracy-') as tmp:
        files = []
        for i, (name, rows) in enumerate(runs.items()):
            path = os.path.join(tmp, f'{i}.dat')
            with open(path, 'w') as f:
                for epoch in range(args.epochs):
                    values = [r['accuracy'][epoch] for r in rows]
                    f.write(f'{epoch + 1} {statistics.median(values)} {min(values)} {max(values)}\n')
            files.append((path, name))
        curves = ', '.join(f"'{path}' using 1:2:3:4 with yerrorlines title '{name}'" for path, name in files)
        script = f"""set terminal pngcairo size 800,480 font ',10'
set output '{args.plot}'
set title 'Fashion-MNIST, {args.workers} workers: validation accuracy after each epoch (median and range of {len(args.seed_list)} seeds)'
set xlabel 'epoch'
set ylabel 'validation accuracy'
set key bottom right
set grid
set xtics 1
plot {curves}
"""
        subprocess.run(['gnuplot'], input=script, text=True, check=True)


if __name__ == '__main__':
    sys.exit(main())
