"""Horovod's PyTorch synthetic benchmark, on kolo.torch: a model from torchvision
trained on one random batch, reporting img/sec per worker and in total.

    kolorun -np 2 /usr/bin/python3 examples/python/pytorch_synthetic_benchmark.py --model resnet50

The script is Horovod's pytorch_synthetic_benchmark.py in form and output; only
the import differs (`import kolo.torch as hvd`)."""

import argparse
import math
import os
import timeit

import torch
import torch.nn.functional as F
from torchvision import models

import kolo.torch as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--fp16-allreduce', action='store_true', default=False)
    parser.add_argument('--powersgd-rank', type=int, default=0,
                        help='PowerSGD: low-rank gradients of this rank with error feedback (0: off)')
    parser.add_argument('--model', type=str, default='resnet50', help='a torchvision model')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--image-size', type=int, default=224)
    parser.add_argument('--num-classes', type=int, default=1000)
    parser.add_argument('--num-warmup-batches', type=int, default=10)
    parser.add_argument('--num-batches-per-iter', type=int, default=10)
    parser.add_argument('--num-iters', type=int, default=10)
    parser.add_argument('--threads', type=int, default=0, help='intra-op threads per worker (0: cores / local workers)')
    parser.add_argument('--use-adasum', action='store_true', default=False)
    args = parser.parse_args()

    hvd.init()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    if not hasattr(models, args.model):
        parser.error(f'torchvision has no model {args.model!r}')

    torch.manual_seed(42)
    model = getattr(models, args.model)(num_classes=args.num_classes)
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    if args.powersgd_rank:
        compression = hvd.PowerSGD(rank=args.powersgd_rank)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(args.num_classes, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def log(line):
        if hvd.rank() == 0:
            print(line, flush=True)

    log('Model: %s' % args.model)
    log('Parameters: %d' % sum(p.numel() for p in model.parameters()))
    log('Batch size: %d' % args.batch_size)
    log('Image size: %d' % args.image_size)
    log('Number of workers: %d (%d thread(s) each)' % (hvd.size(), threads))
    log('Running warmup...')
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log('Running benchmark...')
    img_secs = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log('Iter #%d: %.1f img/sec per worker' % (i, img_sec))
        img_secs.append(img_sec)
    mean = sum(img_secs) / len(img_secs)
    conf = 1.96 * math.sqrt(sum((x - mean) ** 2 for x in img_secs) / len(img_secs))
    log('Img/sec per worker: %.1f +-%.1f' % (mean, conf))
    log('Total img/sec on %d worker(s): %.1f +-%.1f' % (hvd.size(), hvd.size() * mean, hvd.size() * conf))


if __name__ == '__main__':
    main()
