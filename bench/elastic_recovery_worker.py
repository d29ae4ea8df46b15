#!/usr/bin/python3
"""One worker of bench/elastic_recovery.py: trains a stack of nn.Linear layers
on a fixed random batch, one step after another, and appends what it did to
DIR/steps-<pid>.txt (one line per event, times from time.monotonic(), which is
CLOCK_MONOTONIC and so one clock for every process of the host):

    start    T PID                      the process started (before importing torch)
    init     T RANK SIZE GEN            kolo: hvd.init() returned (a joiner: it is a member)
    broadcast T SECONDS                 kolo, --time-broadcast: after training, the state's tensors
                                        broadcast from rank 0 (median of 3)
    memcpy   T SECONDS                  kolo: after step 1, one copy of the state's tensors into others
                                        (median of 5), what a commit is compared with; with
                                        --copy-every-step one copy after every commit instead
    ready    T RANK SIZE GEN            model, optimizer (and checkpoint) ready
    trained  T STEP RANK SIZE GEN       step STEP's update applied, before its commit
    step     T STEP RANK SIZE GEN       step STEP (1-based) completed and committed / saved
    restore  T RANK SIZE GEN            kolo: the failure reached Python (run() restores)
    restored T RANK SIZE GEN            kolo: the last commit is back (run() resets)
    reset    T RANK SIZE GEN            kolo: the job re-formed (the reset callbacks run)
    entered  T RANK SIZE GEN            kolo: run() entered the training (after sync)

GEN is kolo's reset count (kolo.torch.elastic.run's reset_count) or torchrun's
restart count (TORCHELASTIC_RESTART_COUNT). The worker stops after --steps
steps (counted in the committed state, so a step redone after a failure
counts once), and with --full-size N not before it trained
--steps-at-full-size steps at N workers.

    kolorun -np 4 --min-np 3 /usr/bin/python3 bench/elastic_recovery_worker.py kolo --dir DIR
    torchrun --nnodes 1 --nproc_per_node 4 --max_restarts 3 ... bench/elastic_recovery_worker.py torchrun --dir DIR

kolo: kolo.torch.elastic.run with a TorchState(model, optimizer) committed
after every step (in memory), gradients averaged by DistributedOptimizer.
torchrun: PyTorch DistributedDataParallel over Gloo; rank 0 saves model and
optimizer with torch.save after every step (to a temporary file, then renamed
over DIR/checkpoint.pt), and every worker of a restarted group loads it."""

import time

T_START = time.monotonic()

import argparse  # noqa: E402 - the start time first
import os  # noqa: E402
import sys  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('mode', choices=['kolo', 'torchrun'])
    parser.add_argument('--dir', required=True, help='where the step files (and the checkpoint) go')
    parser.add_argument('--layers', type=int, default=6, help='nn.Linear layers (default 6)')
    parser.add_argument('--width', type=int, default=2048, help='features of each layer (default 2048: 25.2 M parameters)')
    parser.add_argument('--batch', type=int, default=16, help='samples per worker and step')
    parser.add_argument('--steps', type=int, default=16, help='steps to train, in all')
    parser.add_argument('--full-size', type=int, default=0,
                        help='kolo: also train until --steps-at-full-size steps ran at this many workers '
                             '(a job that waits for a worker to join)')
    parser.add_argument('--steps-at-full-size', type=int, default=0)
    parser.add_argument('--threads', type=int, default=1, help='torch threads per worker')
    parser.add_argument('--time-broadcast', action='store_true',
                        help='kolo: after training, time a broadcast of the state from rank 0 (a broadcast line)')
    parser.add_argument('--copy-every-step', action='store_true',
                        help='kolo: after every commit, also time one copy of the state into tensors of its own '
                             '(a memcpy line a step)')
    return parser.parse_args()


class Log:
    def __init__(self, directory):
        self.fd = os.open(os.path.join(directory, f'steps-{os.getpid()}.txt'),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, *fields):
        # One write per line, unbuffered: the driver reads it while we run, and
        # a SIGKILL loses nothing written.
        os.write(self.fd, (' '.join(str(f) for f in fields) + '\n').encode())


def build_model(torch, layers, width):
    parts = []
    for _ in range(layers):
        parts += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*parts[:-1])


def state_tensors(torch, model, optimizer):
    """The tensors commit() copies: the model's and the optimizer's state."""
    tensors = list(model.state_dict().values())
    for entry in optimizer.state_dict()['state'].values():
        tensors += [v for v in entry.values() if isinstance(v, torch.Tensor)]
    return tensors


def copy_seconds(tensors, targets):
    t0 = time.monotonic()
    for target, tensor in zip(targets, tensors):
        target.copy_(tensor)
    return time.monotonic() - t0


def memcpy_seconds(torch, model, optimizer):
    """What commit() is measured against: copying the tensors it copies into
    tensors already there (median of 5, back to back)."""
    tensors = state_tensors(torch, model, optimizer)
    targets = [torch.empty_like(t) for t in tensors]
    return sorted(copy_seconds(tensors, targets) for _ in range(5))[2]


def run_kolo(args, log):
    import torch
    import kolo.torch as hvd

    torch.set_num_threads(args.threads)
    hvd.init()
    log.write('init', time.monotonic(), hvd.rank(), hvd.size(), 0)
    torch.manual_seed(0)
    model = build_model(torch, args.layers, args.width)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9),
                                         named_parameters=model.named_parameters())
    x = torch.randn(args.batch, args.width)
    y = torch.randn(args.batch, args.width)
    train = None
    copies = {}  # --copy-every-step: the tensors it copies into, made once

    def where():
        return hvd.rank(), hvd.size(), train.reset_count if train is not None else 0

    class TimedState(hvd.elastic.TorchState):
        def restore(self):
            log.write('restore', time.monotonic(), *where())
            super().restore()
            log.write('restored', time.monotonic(), *where())

    state = TimedState(model, optimizer, step=0, full_steps=0)
    state.register_reset_callbacks([lambda: log.write('reset', time.monotonic(), *where())])

    @hvd.elastic.run
    def train(state):  # noqa: F811 - where() reads the decorated function's reset_count
        log.write('entered', time.monotonic(), *where())
        while state.step < args.steps or (args.full_size and state.full_steps < args.steps_at_full_size):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            state.step += 1
            state.full_steps += hvd.size() >= args.full_size > 0
            log.write('trained', time.monotonic(), state.step, *where())
            state.commit()
            log.write('step', time.monotonic(), state.step, *where())
            if args.copy_every_step:
                tensors = state_tensors(torch, model, optimizer)
                targets = copies.setdefault('targets', [torch.empty_like(t) for t in tensors])
                log.write('memcpy', time.monotonic(), copy_seconds(tensors, targets))
            elif state.step == 1:  # the optimizer has its state now; the steady step leaves this one out
                log.write('memcpy', time.monotonic(), memcpy_seconds(torch, model, optimizer))

    log.write('ready', time.monotonic(), *where())
    train(state)
    if args.time_broadcast:
        tensors = state_tensors(torch, model, optimizer)
        seconds = []
        for round_ in range(3):
            t0 = time.monotonic()
            for i, tensor in enumerate(tensors):
                hvd.broadcast_(tensor, 0, name=f'bench.broadcast.{round_}.{i}')
            seconds.append(time.monotonic() - t0)
        log.write('broadcast', time.monotonic(), sorted(seconds)[1])


def run_torchrun(args, log):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(args.threads)
    dist.init_process_group('gloo')
    rank, size = dist.get_rank(), dist.get_world_size()
    gen = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'))
    torch.manual_seed(0)
    model = build_model(torch, args.layers, args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    checkpoint = os.path.join(args.dir, 'checkpoint.pt')
    step = 0
    if os.path.exists(checkpoint):
        saved = torch.load(checkpoint, map_location='cpu')
        model.load_state_dict(saved['model'])
        optimizer.load_state_dict(saved['optimizer'])
        step = saved['step']
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    x = torch.randn(args.batch, args.width)
    y = torch.randn(args.batch, args.width)
    log.write('ready', time.monotonic(), rank, size, gen)
    while step < args.steps:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        step += 1
        if rank == 0:
            partial = checkpoint + '.partial'
            torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'step': step}, partial)
            os.replace(partial, checkpoint)
        log.write('step', time.monotonic(), step, rank, size, gen)
    dist.destroy_process_group()


def main():
    args = parse_args()
    log = Log(args.dir)
    log.write('start', T_START, os.getpid())
    (run_kolo if args.mode == 'kolo' else run_torchrun)(args, log)
    return 0


if __name__ == '__main__':
    sys.exit(main())
