"""Fashion-MNIST trained data-parallel with kolo.torch, written as a Horovod script:

    kolorun -np 2 /usr/bin/python3 examples/python/fashion_mnist.py --epochs 1

Only the import line differs from Horovod (`import horovod.torch as hvd`). Every
rank reads Debian's dataset-fashion-mnist, trains on its own shard of each epoch
(torch's DistributedSampler), and the DistributedOptimizer averages gradients.
Rank 0 prints progress in MXNet's Speedometer form, then the validation accuracy
over all ranks."""

import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import kolo.torch as hvd

PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy array."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f'{path}: not an IDX file of unsigned bytes')
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(dims)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError(f'{path}: {body.size} bytes of data for shape {shape}')
    return body.reshape(shape)


def load_split(data_dir, name):
    def find(kind):
        for suffix in ('.gz', ''):
            path = os.path.join(data_dir, f'{name}-{kind}{suffix}')
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f'{name}-{kind} not found in {data_dir} (apt-get install dataset-fashion-mnist)')
    images = torch.from_numpy(read_idx(find('images-idx3-ubyte')).copy())
    labels = torch.from_numpy(read_idx(find('labels-idx1-ubyte')).astype(np.int64))
    return images, labels


def normalized(images):
    return images.unsqueeze(1).float().div_(255).sub_(PIXEL_MEAN).div_(PIXEL_STD)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.5, self.training)
        return self.fc2(x)


class Speedometer:
    """Every `interval` batches, rank 0 prints the job's samples/s and the training
    accuracy of those batches over all ranks (a collective: every rank calls it)."""

    def __init__(self, interval):
        self.interval = interval

    def start_epoch(self, epoch):
        self.epoch, self.window_start, self.samples, self.correct = epoch, 0, 0, 0
        self.started = time.monotonic()

    def batch_done(self, batch, correct, count):
        self.samples += count
        self.correct += correct
        if (batch + 1) % self.interval:
            return
        totals = hvd.allreduce(torch.tensor([self.correct, self.samples], dtype=torch.float64), op=hvd.Sum,
                               name='speedometer')
        speed = totals[1].item() / (time.monotonic() - self.started)
        if hvd.rank() == 0:
            print(f'Epoch[{self.epoch}] Batch [{self.window_start}-{batch + 1}]  Speed: {speed:.2f} samples/sec  '
                  f'accuracy={totals[0].item() / totals[1].item():f}', flush=True)
        self.window_start, self.samples, self.correct = batch + 1, 0, 0
        self.started = time.monotonic()


def evaluate(model, images, labels):
    """Accuracy on the whole validation split: rank r scores samples r, r + size, ..."""
    model.eval()
    mine = torch.arange(hvd.rank(), labels.numel(), hvd.size())
    correct = 0
    with torch.no_grad():
        for chunk in mine.split(1000):
            correct += model(normalized(images[chunk])).argmax(1).eq(labels[chunk]).sum().item()
    totals = hvd.allreduce(torch.tensor([correct, mine.numel()], dtype=torch.float64), op=hvd.Sum,
                           name='validation')
    return totals[0].item() / totals[1].item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data-dir', default='/usr/share/datasets/fashion-mnist')
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--lr', type=float, default=0.001, help='per worker: the job uses lr x workers')
    parser.add_argument('--fp16-allreduce', action='store_true')
    parser.add_argument('--powersgd-rank', type=int, default=0,
                        help='PowerSGD: low-rank gradients of this rank with error feedback (0: off)')
    parser.add_argument('--powersgd-start-step', type=int, default=100,
                        help='PowerSGD: steps with whole gradients before compression starts')
    parser.add_argument('--seed', type=int, default=42)
    parser.add_argument('--log-interval', type=int, default=50)
    parser.add_argument('--limit', type=int, default=0, help='train on the first LIMIT samples only (0: all)')
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    train_images, train_labels = load_split(args.data_dir, 'train')
    test_images, test_labels = load_split(args.data_dir, 't10k')
    if args.limit:
        train_images, train_labels = train_images[:args.limit], train_labels[:args.limit]

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    compression_name = 'fp16' if args.fp16_allreduce else 'none'
    if args.powersgd_rank:
        compression = hvd.PowerSGD(rank=args.powersgd_rank, start_step=args.powersgd_start_step)
        compression_name = f'powersgd rank {args.powersgd_rank}'
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    dataset = torch.utils.data.TensorDataset(train_images, train_labels)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(),
                                                              seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    if hvd.rank() == 0:
        print(f'fashion_mnist.py: {hvd.size()} worker(s), {len(dataset)} training samples, batch {args.batch_size} '
              f'per worker, lr {args.lr * hvd.size():g}, compression {compression_name}', flush=True)

    speedometer = Speedometer(args.log_interval)
    for epoch in range(args.epochs):
        started = time.monotonic()
        model.train()
        sampler.set_epoch(epoch)
        speedometer.start_epoch(epoch)
        for batch, (images, labels) in enumerate(loader):
            optimizer.zero_grad()
            logits = model(normalized(images))
            F.cross_entropy(logits, labels).backward()
            optimizer.step()
            speedometer.batch_done(batch, logits.argmax(1).eq(labels).sum().item(), labels.numel())
        seconds = time.monotonic() - started
        accuracy = evaluate(model, test_images, test_labels)
        if hvd.rank() == 0:
            print(f'Epoch[{epoch}] Time cost={seconds:.3f}\nEpoch[{epoch}] Validation-accuracy={accuracy:f}',
                  flush=True)


if __name__ == '__main__':
    main()
