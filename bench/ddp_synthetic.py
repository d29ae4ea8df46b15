#!/usr/bin/python3
"""PyTorch DistributedDataParallel counterpart of kolo's synthetic benchmark.

Same models (ResNet-18/50 laid out like torchvision, written here because Debian
has no torchvision), same random data, same SGD step and the same output lines as
examples/synthetic_benchmark, so bench/run_training_bench.sh can compare them:

    /usr/bin/python3 bench/ddp_synthetic.py --num-proc 2 --model resnet50

Workers are started with torch.multiprocessing, meet through a file in a
temporary directory and talk through the gloo backend. Across hosts, start one worker per host yourself, each with its
rank and host 0's address (gloo binds the interface GLOO_SOCKET_IFNAME names, or
the address the host name resolves to; rank 0 prints the results):

    GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 bench/ddp_synthetic.py --num-proc 2 --rank R \
        --master-addr HOST0_ADDRESS --master-port 29500
"""

import argparse
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def conv(cin, cout, kernel, stride):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


def downsample(cin, cout, stride):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv(planes, planes, 3, 1), nn.BatchNorm2d(planes)
        self.downsample = downsample(cin, planes, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, planes, 1, 1), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv(planes, planes * 4, 1, 1), nn.BatchNorm2d(planes * 4)
        self.downsample = downsample(cin, planes * 4, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, block, blocks, num_classes):
        super().__init__()
        self.conv1, self.bn1 = conv(3, 64, 7, 2), nn.BatchNorm2d(64)
        self.cin = 64
        self.layer1 = self._stage(block, 64, blocks[0], 1)
        self.layer2 = self._stage(block, 128, blocks[1], 2)
        self.layer3 = self._stage(block, 256, blocks[2], 2)
        self.layer4 = self._stage(block, 512, blocks[3], 2)
        self.fc = nn.Linear(self.cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, block, planes, count, stride):
        layers = []
        for i in range(count):
            layers.append(block(self.cin, planes, stride if i == 0 else 1))
            self.cin = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(name, num_classes):
    if name == "resnet18":
        return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


def worker(rank, args, rendezvous):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=args.num_proc)
    size = dist.get_world_size()

    def log(line):
        if rank == 0:
            print(line, flush=True)

    torch.manual_seed(42)
    # With its PowerSGD hook over Gloo, DDP runs one bucket: with several, the
    # hook's chained allreduces (P, then Q in P's callback) of different buckets
    # reach Gloo in different orders on different ranks, which aborts the job
    # ("op.preamble.length <= op.nbytes", torch 1.13).
    bucket_cap_mb = 1024 if args.powersgd_rank else 25
    model = nn.parallel.DistributedDataParallel(make_model(args.model, args.num_classes), bucket_cap_mb=bucket_cap_mb)
    if args.powersgd_rank:
        # DDP's PowerSGD communication hook; it needs a start past step 1 with
        # error feedback or warm start, and the warmup batches cover it.
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(args.num_classes, (args.batch_size,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def timed(batches):
        start = time.perf_counter()
        for _ in range(batches):
            step()
        return time.perf_counter() - start

    log("Model: %s" % args.model)
    log("Parameters: %d" % sum(p.numel() for p in model.parameters()))
    log("Batch size: %d" % args.batch_size)
    log("Image size: %d" % args.image_size)
    log("Number of workers: %d (%d thread(s) each)" % (size, args.threads))
    log("Compression: %s" % ("powersgd rank %d" % args.powersgd_rank if args.powersgd_rank else "none"))
    log("Running warmup...")
    timed(args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        img_sec = args.batch_size * args.num_batches_per_iter / timed(args.num_batches_per_iter)
        log("Iter #%d: %.1f img/sec per worker" % (i, img_sec))
        img_secs.append(img_sec)
    mean = sum(img_secs) / len(img_secs)
    conf = 1.96 * math.sqrt(sum((x - mean) ** 2 for x in img_secs) / len(img_secs))
    log("Img/sec per worker: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d worker(s): %.1f +-%.1f" % (size, size * mean, size * conf))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-proc", type=int, default=1, help="worker processes")
    parser.add_argument("--model", choices=["resnet18", "resnet50"], default="resnet50")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=48)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads per worker (0: cores / workers)")
    parser.add_argument("--powersgd-rank", type=int, default=0,
                        help="DDP's PowerSGD hook with this rank, error feedback and warm start (0: off)")
    parser.add_argument("--rank", type=int, default=-1,
                        help="run only this worker, of --num-proc, in this process (one per host); -1: start them all here")
    parser.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address (127.0.0.1)")
    parser.add_argument("--master-port", type=int, default=0, help="rank 0's port; needed with --rank")
    args = parser.parse_args()
    if args.num_proc < 1:
        parser.error("--num-proc must be at least 1")
    if args.powersgd_rank < 0:
        parser.error("--powersgd-rank must be 0 (off) or more")
    if args.rank >= args.num_proc:
        parser.error("--rank must be below --num-proc")
    if args.rank >= 0 and not 0 < args.master_port < 65536:
        parser.error("--rank needs --master-port (and --master-addr, rank 0's address)")
    if args.threads <= 0:
        per_host = 1 if args.rank >= 0 else args.num_proc
        args.threads = max(1, (os.cpu_count() or 1) // per_host)
    if args.rank >= 0 or args.master_port:
        rendezvous = "tcp://%s:%d" % (args.master_addr, args.master_port)
        if args.rank >= 0:
            return worker(args.rank, args, rendezvous)
        return mp.spawn(worker, args=(args, rendezvous), nprocs=args.num_proc, join=True)
    # Workers of this host meet through a file: a port picked free and then
    # bound by rank 0 could be taken in between by any other program.
    with tempfile.TemporaryDirectory(prefix="ddp-synthetic-") as directory:
        rendezvous = "file://" + os.path.join(directory, "store")
        mp.spawn(worker, args=(args, rendezvous), nprocs=args.num_proc, join=True)


if __name__ == "__main__":
    sys.exit(main())
