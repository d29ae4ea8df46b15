"""Fashion-MNIST trained by an elastic job: workers may be lost and new ones may
join while it trains, and training goes on from the last commit.

    kolorun -np 3 --min-np 2 /usr/bin/python3 examples/python/fashion_mnist_elastic.py --epochs 1

The model, data and evaluation are fashion_mnist.py's. The training loop runs
under kolo.torch.elastic.run with a TorchState holding the model, the optimizer,
the elastic sampler and the epoch; it commits every --commit-every batches. When
a worker is lost, the others restore the last commit, re-form (ranks renumbered,
the oldest first) and go on with the indices of the epoch nobody has trained on
yet; a worker that joins takes rank 0's state. --kill-worker W --kill-at-batch B
makes worker W (its KOLO_ELASTIC_WORKER) SIGKILL itself at batch B of the first
epoch, to watch it happen."""

import argparse
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd
from kolo.torch import elastic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import Net, evaluate, load_split, normalized  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data-dir', default='/usr/share/datasets/fashion-mnist')
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--lr', type=float, default=0.001, help='per worker: the job uses lr x workers')
    parser.add_argument('--seed', type=int, default=42)
    parser.add_argument('--commit-every', type=int, default=20, help='batches between commits')
    parser.add_argument('--log-interval', type=int, default=100)
    parser.add_argument('--limit', type=int, default=0, help='train on the first LIMIT samples only (0: all)')
    parser.add_argument('--kill-worker', type=int, default=-1)
    parser.add_argument('--kill-at-batch', type=int, default=-1)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_images, train_labels = load_split(args.data_dir, 'train')
    test_images, test_labels = load_split(args.data_dir, 't10k')
    if args.limit:
        train_images, train_labels = train_images[:args.limit], train_labels[:args.limit]
    dataset = torch.utils.data.TensorDataset(train_images, train_labels)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
    state = elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0)
    me = int(os.environ.get('KOLO_ELASTIC_WORKER', '-1'))

    def on_reset():
        # The job's learning rate follows its size, as at the start.
        for group in optimizer.param_groups:
            group['lr'] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f'fashion_mnist_elastic.py: re-formed with {hvd.size()} worker(s), epoch {state.epoch}, '
                  f'{len(sampler) * hvd.size()} samples left in it', flush=True)

    state.register_reset_callbacks([on_reset])

    @elastic.run
    def train(state):
        while state.epoch < args.epochs:
            started = time.monotonic()
            model.train()
            loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=state.sampler)
            for batch, (images, labels) in enumerate(loader):
                if me == args.kill_worker and batch == args.kill_at_batch and state.epoch == 0:
                    print(f'worker {me}: killing myself at batch {batch}', flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.zero_grad()
                F.cross_entropy(model(normalized(images)), labels).backward()
                optimizer.step()
                state.sampler.record_batch(batch, args.batch_size)
                if (batch + 1) % args.commit_every == 0:
                    state.commit()
                if hvd.rank() == 0 and (batch + 1) % args.log_interval == 0:
                    print(f'Epoch[{state.epoch}] Batch [{batch + 1}] on {hvd.size()} worker(s)', flush=True)
            accuracy = evaluate(model, test_images, test_labels)
            if hvd.rank() == 0:
                print(f'Epoch[{state.epoch}] Time cost={time.monotonic() - started:.3f}\n'
                      f'Epoch[{state.epoch}] Validation-accuracy={accuracy:f}', flush=True)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    if hvd.rank() == 0:
        print(f'fashion_mnist_elastic.py: {hvd.size()} worker(s), {len(dataset)} training samples, batch '
              f'{args.batch_size} per worker', flush=True)
    train(state)


if __name__ == '__main__':
    main()
