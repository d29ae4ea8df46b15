"""Where a kolo.torch training step's time goes: forward, backward, waiting for
the gradients' allreduces (synchronize) and the update, per step, and the CPU
time of each of the process's threads per step (/proc), on rank 0's line.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python \\
        build/tools/kolorun/kolorun -np 2 /usr/bin/python3 bench/step_phases.py --mode kolo

--mode kolo trains with DistributedOptimizer; --mode lockstep trains alone and
meets the other ranks once a step with an 8-byte allreduce (no gradients), the
ceiling of synchronous training. ResNet-50, batch 32, 48x48 images, one thread,
as bench/run_training_bench.sh."""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torchvision import models

import kolo.torch as hvd


def cpu_ms_by_thread():
    """Each thread's user + system CPU time in ms, by thread id."""
    ticks = os.sysconf('SC_CLK_TCK')
    out = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{tid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        out[tid] = (int(fields[11]) + int(fields[12])) * 1000 / ticks
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--mode', choices=['kolo', 'lockstep'], default='kolo')
    parser.add_argument('--steps', type=int, default=30)
    parser.add_argument('--warmup', type=int, default=5)
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(42)
    model = models.resnet50()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.mode == 'kolo':
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    data = torch.randn(32, 3, 48, 48)
    target = torch.randint(1000, (32,))
    token = torch.zeros(2)

    phases = []
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            cpu_before, wall_before = cpu_ms_by_thread(), time.perf_counter()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if args.mode == 'kolo':
            optimizer.synchronize()
            t3 = time.perf_counter()
            with optimizer.skip_synchronize():
                optimizer.step()
        else:
            hvd.allreduce(token, name='lockstep')
            t3 = time.perf_counter()
            optimizer.step()
        t4 = time.perf_counter()
        if i >= args.warmup:
            phases.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0))
    wall = (time.perf_counter() - wall_before) / args.steps * 1000
    cpu_after = cpu_ms_by_thread()
    threads = sorted(((cpu_after[t] - cpu_before.get(t, 0)) / args.steps for t in cpu_after), reverse=True)
    median = [statistics.median(p[k] for p in phases) * 1000 for k in range(5)]
    if hvd.rank() == 0:
        print(f'{args.mode}, {hvd.size()} rank(s): median ms forward {median[0]:.0f} backward {median[1]:.0f} '
              f'synchronize {median[2]:.1f} update {median[3]:.1f} step {median[4]:.0f}; wall per step {wall:.0f} ms; '
              'CPU ms per step by thread: ' + ' '.join(f'{ms:.0f}' for ms in threads if ms >= 0.5), flush=True)


if __name__ == '__main__':
    main()
