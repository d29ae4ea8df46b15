#!/usr/bin/python3
"""What the Python layer costs: kolo.torch's allreduce timed the way kolo-bench
times the C++ API (median call after a warm-up, every rank in step), printed in
kolo-bench's table form so the two compare line by line. Run under kolorun:

    kolorun -np 2 /usr/bin/python3 bench/python_allreduce.py --sizes 8,64M [--in-place]

Sizes in bytes of float32 (K/M suffixes). The out-of-place form allocates its
output as hvd.allreduce does; --in-place times hvd.allreduce_. --process-set
sends the calls through a process set of every rank, which has a communicator
and engine of its own (across hosts: the network its set communicator takes)."""

import argparse
import statistics
import time

import torch

import kolo.torch as hvd


def parse_size(text):
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', default='8,4K,64K,1M,16M,64M')
    parser.add_argument('--warmup', type=int, default=20)
    parser.add_argument('--iters', type=int, default=200)
    parser.add_argument('--in-place', action='store_true')
    parser.add_argument('--process-set', action='store_true')
    args = parser.parse_args()
    hvd.init()
    pset = hvd.add_process_set(list(range(hvd.size()))) if args.process_set else hvd.global_process_set
    torch.set_num_threads(1)
    n = hvd.size()
    if hvd.rank() == 0:
        print(f'kolo.torch allreduce (sum, float32, {"in place" if args.in_place else "out of place"}), {n} ranks'
              f'{", through a process set of every rank" if args.process_set else ""}')
        print(f'{"bytes":>12} {"median us":>12} {"busbw GB/s":>12}')
    for size in [parse_size(s) for s in args.sizes.split(',')]:
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32)
        iters = max(5, min(args.iters, (1 << 30) // max(size, 1)))
        times = []
        for i in range(args.warmup + iters):
            started = time.perf_counter()
            if args.in_place:
                hvd.allreduce_(tensor, op=hvd.Sum, name='bench', process_set=pset)
            else:
                hvd.allreduce(tensor, op=hvd.Sum, name='bench', process_set=pset)
            if i >= args.warmup:
                times.append(time.perf_counter() - started)
            if args.in_place and i % 16 == 15:
                tensor.fill_(1.0)  # keep the values finite
        # The slowest rank's median, as kolo-bench reports it.
        median = hvd.allreduce(torch.tensor([statistics.median(times)]), op=hvd.Max, name='bench.median').item()
        busbw = tensor.numel() * 4 * 2 * (n - 1) / n / median / 1e9
        if hvd.rank() == 0:
            print(f'{tensor.numel() * 4:>12} {median * 1e6:>12.2f} {busbw:>12.3f}', flush=True)


if __name__ == '__main__':
    main()
