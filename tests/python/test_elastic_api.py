"""kolo.torch.elastic, Horovod's elastic API: the sampler's epoch across changes
of membership, commit, restore and sync of the states bitwise, and run()'s
retries, resets and callbacks. A reset here is the one a job without elastic
membership gets: shutdown() then init() on every rank."""

import collections
import json
import math
import os
import subprocess
import sys
import threading

import pytest
import torch

import kolo.torch as hvd
from conftest import on_rank_0
from kolo.torch import _kolo, elastic
from kolo.torch.elastic import ElasticSampler, HostsUpdatedInterrupt, ObjectState, State, TorchState


def bits(value):
    """A value with every tensor replaced by its dtype, shape and bytes: equal
    only when bitwise equal (NaN payloads and -0.0 included)."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().contiguous().reshape(-1)
        return (str(value.dtype), tuple(value.shape), flat.view(torch.uint8).numpy().tobytes())
    if isinstance(value, dict):
        return {k: bits(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(bits(v) for v in value)
    if isinstance(value, float):
        return ('float', value.hex())
    return value


def torch_bits(state):
    """What a TorchState with model, optimizer and epoch holds, as bits()."""
    return bits({'model': state.model.state_dict(), 'optimizer': state.optimizer.state_dict(),
                 'epoch': state.epoch})


def same_on_every_rank(value, name):
    gathered = hvd.allgather_object(value, name=name)
    return all(g == gathered[0] for g in gathered)


def make_model(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    with torch.no_grad():
        # Values that only a bitwise comparison tells apart.
        model[1].running_mean.copy_(torch.tensor([-0.0, float('nan'), 1.0]))
    return model


def train_steps(model, optimizer, steps, seed):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        optimizer.zero_grad()
        x = torch.randn(8, 4, generator=generator)
        model(x).square().mean().backward()
        optimizer.step()


# ---- ElasticSampler ---------------------------------------------------------------


def simulate(dataset_size, memberships, batches_per_change, batch_size, shuffle):
    """Runs one epoch over a list of memberships (numbers of ranks) with the
    sampler's own split for each rank, committing after each rank's batches, as
    TorchState does: returns how often each index was processed and how many
    padding places the splits had."""
    processed = collections.Counter()
    committed = {'epoch': 0, 'processed_indices': set()}
    padding = 0
    for change, ranks in enumerate(memberships):
        last = change == len(memberships) - 1
        samplers = []
        for r in range(ranks):
            s = ElasticSampler(list(range(dataset_size)), shuffle=shuffle, seed=7)
            s.load_state_dict(committed)
            s._split(ranks, r)
            samplers.append(s)
        assert len({len(s) for s in samplers}) == 1, 'every rank runs as many batches'
        padding += samplers[0].total_size - len(samplers[0].remaining_indices)
        batches = math.ceil(len(samplers[0]) / batch_size) if last else batches_per_change
        for s in samplers:
            for batch_idx in range(batches):
                processed.update(s.get_indices(batch_idx, batch_size))
                s.record_batch(batch_idx, batch_size)
        committed = {'epoch': 0, 'processed_indices': set().union(*(s.processed_indices for s in samplers))}
    return processed, padding


@pytest.mark.parametrize('shuffle', [True, False])
def test_sampler_gives_every_index_once_across_membership_changes(shuffle):
    # Sizes whose splits need no padding: exactly once.
    processed, padding = simulate(48, [2, 4, 1, 2, 3], batches_per_change=1, batch_size=2, shuffle=shuffle)
    assert padding == 0
    assert processed == collections.Counter(range(48))
    # Any sizes: every index, and repeats only where a split was padded.
    for size in (1, 7, 37, 100):
        processed, padding = simulate(size, [3, 2, 5, 1, 4], batches_per_change=2, batch_size=3, shuffle=shuffle)
        assert set(processed) == set(range(size))
        assert sum(processed.values()) - size <= padding


def test_sampler_order_is_the_epochs_whatever_the_resets():
    dataset = list(range(30))
    whole = ElasticSampler(dataset, seed=3)
    whole._split(1, 0)
    order = list(whole)
    assert sorted(order) == dataset and order != dataset
    resumed = ElasticSampler(dataset, seed=3)
    resumed.record_indices(order[:10])
    resumed._split(1, 0)
    assert list(resumed) == order[10:]
    # Another epoch, another order; the same seed and epoch, the same one.
    whole.set_epoch(1)
    whole._split(1, 0)
    assert list(whole) != order and sorted(whole) == dataset
    again = ElasticSampler(dataset, seed=3)
    again.set_epoch(1)
    again._split(1, 0)
    assert list(again) == list(whole)


def test_sampler_splits_over_the_jobs_ranks_and_commits_what_every_rank_processed():
    size, rank = hvd.size(), hvd.rank()
    dataset = list(range(37))
    sampler = ElasticSampler(dataset, seed=11)
    assert (sampler.num_replicas, sampler.rank) == (size, rank)
    assert len(sampler) == math.ceil(37 / size) == len(list(sampler))
    assert same_on_every_rank(sampler.remaining_indices, 'elastic_test.sampler.remaining')
    state = TorchState(sampler=sampler)
    mine = []
    for batch_idx in range(2):
        mine += sampler.get_indices(batch_idx, 3)
        sampler.record_batch(batch_idx, 3)
    assert sampler.processed_indices == set(mine)
    state.commit()
    everyone = set().union(*hvd.allgather_object(mine, name='elastic_test.sampler.mine'))
    assert len(everyone) == 6 * size
    assert sampler.processed_indices == everyone
    # A rank joins: the size+1 ranks split the rest, once each.
    rest = collections.Counter()
    for r in range(size + 1):
        joined = ElasticSampler(dataset, seed=11)
        joined.load_state_dict(sampler.state_dict())
        joined._split(size + 1, r)
        rest.update(joined)
        padding = joined.total_size - len(joined.remaining_indices)
    assert set(rest).isdisjoint(everyone)
    assert set(rest) | everyone == set(dataset)
    assert sum(rest.values()) - len(set(rest)) <= padding


def test_sampler_restores_the_commit_and_syncs_to_rank_0s():
    sampler = ElasticSampler(list(range(40)), seed=5)
    state = TorchState(sampler=sampler)
    sampler.record_batch(0, 2)
    state.commit()
    committed = sampler.state_dict()
    sampler.record_batch(1, 2)  # not committed: processed again after a failure
    sampler.set_epoch(1)
    state.restore()
    assert sampler.state_dict() == committed
    assert len(sampler) == math.ceil((40 - len(committed['processed_indices'])) / hvd.size())
    # Ranks that differ get rank 0's epoch and processed indices.
    sampler.record_indices([30 + hvd.rank()])
    expected = hvd.broadcast_object(sampler.state_dict(), root_rank=0, name='elastic_test.sampler.rank0')
    state.sync()
    assert sampler.state_dict() == expected
    assert same_on_every_rank((sampler.remaining_indices, len(sampler)), 'elastic_test.sampler.synced')


def test_sampler_state_dict_is_a_copy():
    sampler = ElasticSampler(list(range(10)), shuffle=False)
    sampler.record_indices([1, 2])
    saved = sampler.state_dict()
    sampler.record_indices([3])
    assert saved == {'epoch': 0, 'processed_indices': {1, 2}}
    sampler.load_state_dict(saved)
    saved['processed_indices'].add(9)
    assert sampler.processed_indices == {1, 2}
    assert 1 not in sampler.remaining_indices and 3 in sampler.remaining_indices


# ---- ObjectState and TorchState ---------------------------------------------------


def test_object_state_commit_and_restore_give_back_the_commit_bitwise():
    state = ObjectState(epoch=0, values=[1.5, -0.0, float('nan')], tensor=torch.tensor([-0.0, float('nan')]))
    state.epoch = 3
    state.values.append(2.0)
    state.commit()
    committed = bits({'epoch': state.epoch, 'values': state.values, 'tensor': state.tensor})
    state.epoch = 4
    state.values.append(9.0)  # in place: the commit keeps its own copy
    state.tensor.add_(1)
    state.restore()
    assert bits({'epoch': state.epoch, 'values': state.values, 'tensor': state.tensor}) == committed
    state.values.clear()
    state.restore()
    assert bits(state.values) == committed['values']


def test_object_state_sync_gives_every_rank_rank_0s_commit():
    rank = hvd.rank()
    state = ObjectState(epoch=rank, name=f'rank {rank}', tensor=torch.full((3,), float(rank)))
    state.epoch = 100 + rank  # not committed: sync sends rank 0's commit
    state.sync()
    assert (state.epoch, state.name) == (0, 'rank 0')
    assert bits(state.tensor) == bits(torch.zeros(3))


def test_object_state_with_a_users_broadcast():
    sent = []

    def bcast(obj):
        sent.append(obj)
        return hvd.broadcast_object(obj, root_rank=0, name='elastic_test.user_bcast')
    state = ObjectState(bcast_object=bcast, get_rank=hvd.rank, step=hvd.rank())
    state.sync()
    assert state.step == 0 and sent == [{'step': hvd.rank()}]


def test_torch_state_commit_and_restore_give_back_the_commit_bitwise():
    model = make_model(seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    state = TorchState(model, optimizer, scheduler=scheduler, epoch=0)
    train_steps(model, optimizer, 2, seed=hvd.rank())
    scheduler.step()
    state.epoch = 1
    state.commit()
    committed = torch_bits(state)
    committed_scheduler = scheduler.state_dict()
    train_steps(model, optimizer, 3, seed=10)
    scheduler.step()
    state.epoch = 2
    assert torch_bits(state) != committed
    state.restore()
    assert torch_bits(state) == committed
    assert scheduler.state_dict() == committed_scheduler
    # Training after a restore leaves the commit alone: a second restore gives it again.
    train_steps(model, optimizer, 1, seed=20)
    state.restore()
    assert torch_bits(state) == committed


def test_torch_state_sync_gives_every_rank_rank_0s_state():
    rank = hvd.rank()
    model = make_model(seed=100 + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_steps(model, optimizer, 1 + rank, seed=rank)
    for _ in range(rank):
        scheduler.step()
    state = TorchState(model, optimizer, scheduler=scheduler, epoch=rank)
    before = torch_bits(state)
    state.sync()
    after = torch_bits(state)
    assert same_on_every_rank(after, 'elastic_test.torch_sync')
    assert same_on_every_rank(scheduler.state_dict(), 'elastic_test.torch_sync.scheduler')
    if rank == 0:
        assert after == before


@pytest.mark.parametrize('make', [
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.5),
    lambda params: torch.optim.Adam(params, lr=0.1, weight_decay=0.5),  # a tensor 'step' in its state
], ids=['sgd', 'adam'])
def test_torch_state_sync_with_optimizers_without_state(make):
    rank = hvd.rank()
    # Rank 0 and all but the last rank trained; the last one is as a joiner is.
    joiner = rank == hvd.size() - 1
    model = make_model(seed=200 + rank)
    optimizer = make(model.parameters())
    if not joiner:
        train_steps(model, optimizer, 2, seed=rank)
    state = TorchState(model, optimizer, epoch=0)
    before = torch_bits(state)
    own = {id(v) for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)}
    made_ahead = set()
    if joiner:
        # What run() does on a worker that joins, before it is taken in.
        state.prepare_to_join()
        pool = state._handlers['optimizer']._receive_pool
        made_ahead = {id(t) for free in pool._free.values() for t in free}
        assert len(made_ahead) == len(list(model.parameters())) * (1 if isinstance(optimizer, torch.optim.SGD) else 2)
    state.sync()
    # The joiner's optimizer got rank 0's state and its model rank 0's.
    assert same_on_every_rank(torch_bits(state), 'elastic_test.joiner_sync')
    if rank == 0:
        assert torch_bits(state) == before
    if joiner and rank != 0:
        # Received as it is, without the step a fresh optimizer takes in
        # broadcast_optimizer_state (its zero gradients would be left behind),
        # into the tensors prepare_to_join made.
        assert all(p.grad is None for p in model.parameters())
        received = [v for s in optimizer.state.values() for v in s.values()
                    if isinstance(v, torch.Tensor) and v.dim() > 0]
        assert received and {id(v) for v in received} <= made_ahead
    elif rank != 0:
        # A rank with state receives into its own tensors.
        now = {id(v) for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)}
        assert now == own
    # Rank 0 without state: every rank ends without state, as rank 0.
    model = make_model(seed=300 + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.5)
    if rank != 0:
        train_steps(model, optimizer, 1, seed=rank)
    state = TorchState(model, optimizer, epoch=0)
    before = torch_bits(state)
    state.sync()
    assert len(optimizer.state_dict()['state']) == 0
    assert same_on_every_rank(torch_bits(state), 'elastic_test.empty_sync')
    if rank == 0:
        assert torch_bits(state) == before


def test_a_joiners_optimizer_state_is_made_ahead_by_a_twin_of_its_optimizer():
    from kolo.torch.elastic.state import _state_tensors_per_parameter
    params = list(make_model(seed=5).parameters())
    assert _state_tensors_per_parameter(torch.optim.SGD(params, lr=0.1, momentum=0.9)) == 1
    assert _state_tensors_per_parameter(torch.optim.SGD(params, lr=0.1)) == 0
    assert _state_tensors_per_parameter(torch.optim.Adam(params, lr=0.1)) == 2
    assert _state_tensors_per_parameter(torch.optim.Adam(params, lr=0.1, amsgrad=True)) == 3
    wrapped = hvd.DistributedOptimizer(torch.optim.Adam(params, lr=0.1))
    assert _state_tensors_per_parameter(wrapped) == 2
    scheduled = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    torch.optim.lr_scheduler.StepLR(scheduled, step_size=1)  # adds initial_lr to the groups
    assert _state_tensors_per_parameter(scheduled) == 1

    class Odd(torch.optim.SGD):  # a constructor the twin cannot be made with
        def __init__(self, params, extra):
            super().__init__(params, lr=0.1, momentum=0.9)
    assert _state_tensors_per_parameter(Odd(params, 1)) == 0


def test_torch_state_sync_sends_only_what_differs(monkeypatch):
    """Survivors that restored one commit send none of it; a tensor that differs
    on any rank is sent, and only it."""
    from kolo.torch.elastic import state as state_module
    sent, optimizer_syncs = [], []

    def recording_parameters(params, root_rank, **kwargs):
        sent.append(sorted(params))
        return hvd.broadcast_parameters(params, root_rank, **kwargs)

    def recording_optimizer(optimizer, root_rank, **kwargs):
        optimizer_syncs.append(root_rank)
        return broadcast_state_from(optimizer, root_rank, **kwargs)
    broadcast_state_from = state_module._broadcast_state_from
    monkeypatch.setattr(state_module, 'broadcast_parameters', recording_parameters)
    monkeypatch.setattr(state_module, '_broadcast_state_from', recording_optimizer)

    model = make_model(seed=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_steps(model, optimizer, 2, seed=1)  # the same on every rank
    state = TorchState(model, optimizer, epoch=0)
    state.sync()
    assert sent == [[]] and optimizer_syncs == []

    if hvd.rank() == hvd.size() - 1:
        with torch.no_grad():
            model[2].bias.add_(1.0)
    if hvd.rank() == 1:
        optimizer.param_groups[0]['lr'] = 0.5
    state.sync()
    apart = hvd.size() > 1
    assert sent[-1] == (['2.bias'] if apart else [])
    assert len(optimizer_syncs) == (1 if apart else 0)
    assert optimizer.param_groups[0]['lr'] == 0.1
    assert same_on_every_rank(torch_bits(state), 'elastic_test.sync_differs')


def test_torch_state_takes_a_distributed_optimizer():
    model = make_model(seed=4)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = TorchState(model, optimizer, epoch=0)
    # The same batches everywhere, so that BatchNorm's running statistics agree too.
    train_steps(model, optimizer, 1, seed=0)
    state.commit()
    committed = torch_bits(state)
    train_steps(model, optimizer, 1, seed=1)
    state.restore()
    assert torch_bits(state) == committed
    train_steps(model, optimizer, 1, seed=2)  # trains on after the restore
    assert same_on_every_rank(bits(model.state_dict()), 'elastic_test.distributed_optimizer')


def test_torch_state_attribute_assigned_anew_is_saved():
    state = TorchState(make_model(seed=5), epoch=0)
    replacement = make_model(seed=6)
    state.model = replacement
    saved = bits(replacement.state_dict())
    with torch.no_grad():
        replacement[0].weight.add_(1)
    state.restore()
    assert state.model is replacement and bits(replacement.state_dict()) == saved
    with pytest.raises(TypeError, match='model'):
        state.model = 'not a model'


# ---- run() ------------------------------------------------------------------------


def test_run_retries_after_an_internal_error_from_the_last_commit():
    model = make_model(seed=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = TorchState(model, optimizer, epoch=0)
    seen_at_start, after_reset = [], []
    state.register_reset_callbacks([lambda: after_reset.append(('first', hvd.is_initialized(), hvd.size())),
                                    lambda: after_reset.append(('second', len(seen_at_start)))])
    committed = {}

    @elastic.run
    def train(state, steps, scale=1):
        seen_at_start.append(torch_bits(state))
        if len(seen_at_start) == 1:
            # Survivors commit the same state, as a DistributedOptimizer keeps them.
            train_steps(state.model, state.optimizer, steps * scale, seed=0)
            state.epoch = 1
            state.commit()
            committed['bits'] = torch_bits(state)
            train_steps(state.model, state.optimizer, 1, seed=99 + hvd.rank())
            state.epoch = 2
            raise hvd.PeerFailureError('a peer failed')  # as every survivor gets it
        return state.epoch

    assert train(state, 2, scale=2) == 1
    assert train.__name__ == 'train'
    assert train.reset_count == 1
    assert len(seen_at_start) == 2
    assert seen_at_start[1] == committed['bits']
    assert after_reset == [('first', True, hvd.size()), ('second', 1)]
    # The new session works.
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name='elastic_test.after_reset').tolist() == [hvd.size()] * 2


def test_run_resets_without_restore_on_hosts_updated():
    rank = hvd.rank()
    model = make_model(seed=8)
    state = TorchState(model, epoch=0)
    syncs = []
    live = {}

    @elastic.run
    def train(state, skip_sync):
        syncs.append(len(syncs))
        if len(syncs) == 1:
            state.commit()
            with torch.no_grad():
                state.model[0].weight.fill_(float(rank + 1))  # not committed
            live['rank 0'] = hvd.broadcast_object(bits(model.state_dict()), root_rank=0,
                                                  name='elastic_test.hosts_updated.live')
            live['own'] = bits(model.state_dict())
            raise HostsUpdatedInterrupt(skip_sync)
        return bits(state.model.state_dict())

    # Not restored: the ranks go on from rank 0's model as it was, uncommitted.
    assert train(state, False) == live['rank 0']
    assert train.reset_count == 1
    # skip_sync: nor synchronized; each rank keeps its own.
    syncs.clear()
    assert train(state, True) == live['own']
    assert train.reset_count == 2


def test_check_host_updates_without_a_change_does_nothing():
    state = ObjectState(epoch=0)
    state.epoch = 1
    assert state.check_host_updates() is None
    state.commit()
    state.epoch = 2
    state.restore()
    assert state.epoch == 1


def test_run_does_not_retry_errors_of_the_program():
    state = ObjectState(epoch=0)
    calls = []

    @elastic.run
    def train(state):
        calls.append(1)
        raise hvd.InvalidArgumentError('a bad argument')

    with pytest.raises(hvd.InvalidArgumentError):
        train(state)
    assert calls == [1] and train.reset_count == 0

    @elastic.run
    def fails(state):
        raise KeyError('not an error of kolo')

    with pytest.raises(KeyError):
        fails(state)


# ---- Real elastic jobs -----------------------------------------------------------

# Trains 2 epochs of 90 samples, committing after every batch, and reports each
# batch's indices, the state's digest at every (re)entry, and the end.
ELASTIC_PROGRAM = r'''
import hashlib, json, os, sys, time
import torch
import kolo.torch as hvd
from kolo.torch import _kolo

mode, marker = sys.argv[1], sys.argv[2]
hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     named_parameters=model.named_parameters())
data = torch.randn(90, 4, generator=torch.Generator().manual_seed(1))
sampler = hvd.elastic.ElasticSampler(range(90), seed=3)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, steps=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])
BATCH = 3
# A worker that joins: run() has the state make its receive tensors before it
# is taken in (prepare_to_join); the first sync receives into them.
prepared = {}
_prepare_to_join = state.prepare_to_join


def prepare_to_join():
    prepared['awaited_admission'] = _kolo._elastic_awaits_admission()
    _prepare_to_join()
    pool = state._handlers['optimizer']._receive_pool
    prepared['made'] = [id(t) for free in pool._free.values() for t in free]


state.prepare_to_join = prepare_to_join


def report(kind, **fields):
    print(kind, json.dumps(dict(fields, rank=hvd.rank(), size=hvd.size())), flush=True)


def digest():
    tensors = list(model.state_dict().values()) + [
        s['momentum_buffer'] for s in optimizer.state_dict()['state'].values()]
    kept = repr((state.epoch, state.steps, sampler.epoch, sorted(sampler.processed_indices))).encode()
    return hashlib.sha256(b''.join(t.numpy().tobytes() for t in tensors) + kept).hexdigest()


@hvd.elastic.run
def train(state):
    if 'made' in prepared and 'received_into_them' not in prepared:
        received = [s['momentum_buffer'] for s in optimizer.state.values()]
        prepared['received_into_them'] = bool(received) and {id(t) for t in received} <= set(prepared['made'])
    report('ENTRY', digests=hvd.allgather_object(digest(), name='program.entry'))
    while state.epoch < 2:
        for batch in range((len(state.sampler) + BATCH - 1) // BATCH):
            indices = state.sampler.get_indices(batch, BATCH)
            optimizer.zero_grad()
            model(data[indices]).sum().backward()
            optimizer.step()
            state.sampler.record_batch(batch, BATCH)
            state.steps += 1
            report('BATCH', epoch=state.epoch, steps=state.steps, idx=indices)
            if mode == 'fail' and state.steps == 5 and hvd.size() == 3 and hvd.rank() == 2:
                os._exit(3)  # before the commit: every rank's 5th batch runs again
            if mode == 'join' and state.steps == 3:
                open(marker, 'w').close()  # the discovery script lists a third slot
                for _ in range(600):  # as many commits on every rank until the worker joins
                    if hvd.size() == 3:
                        break
                    time.sleep(0.2)
                    state.commit()
            state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
report('DONE', resets=resets, digest=digest(),
       prepared={k: v for k, v in prepared.items() if k != 'made'})
'''


def run_elastic_job(tmp_path, mode, kolorun_args):
    program = tmp_path / 'elastic_program.py'
    program.write_text(ELASTIC_PROGRAM)
    # Flight records of its own: this job's, left by its failed worker, would
    # otherwise tell a later job in the suite's directory which rank failed first.
    env = dict(os.environ, KOLO_FLIGHT_RECORDER_DIR=str(tmp_path / 'flight'))
    result = subprocess.run([os.environ['KOLORUN'], *kolorun_args, sys.executable, str(program), mode,
                             str(tmp_path / 'grown')], env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    reports = collections.defaultdict(list)
    for line in result.stdout.splitlines():
        for kind in ('ENTRY', 'BATCH', 'DONE'):
            if f':{kind} ' in line:
                reports[kind].append(json.loads(line.split(f':{kind} ', 1)[1]))
    # At every (re)entry every rank, a joined one too, holds rank 0's state bitwise.
    for entry in reports['ENTRY']:
        assert len(set(entry['digests'])) == 1, output
    epochs = [collections.Counter(), collections.Counter()]
    for batch in reports['BATCH']:
        epochs[batch['epoch']].update(batch['idx'])
    done = reports['DONE']
    assert len({d['digest'] for d in done}) == 1, output
    return reports, epochs, done, output


needs_elastic_kolorun = pytest.mark.skipif(
    'KOLORUN' not in os.environ or not hasattr(_kolo, '_elastic_reset'),
    reason='needs KOLORUN, the kolorun binary (set by ctest), and kolo\'s elastic engine')


@needs_elastic_kolorun
def test_a_worker_that_joins_gets_the_state_and_the_rest_of_the_epoch(tmp_path):
    def run_job():
        discover = tmp_path / 'discover.sh'
        discover.write_text(f'#!/bin/sh\nif [ -f {tmp_path}/grown ]; then echo localhost:3; '
                            'else echo localhost:2; fi\n')
        discover.chmod(0o755)
        reports, epochs, done, output = run_elastic_job(
            tmp_path, 'join', ['-np', '2', '--min-np', '2', '--max-np', '3', '--host-discovery-script',
                               str(discover)])
        assert epochs[0] == collections.Counter(range(90)), output  # once each, across the join
        assert epochs[1] == collections.Counter(range(90)), output
        assert sorted((d['rank'], d['size'], d['resets']) for d in done) == \
            [(0, 3, [3]), (1, 3, [3]), (2, 3, [])], output
        # Only the joiner prepared, before it was taken in, and received into what it made.
        assert sorted((d['rank'], d['prepared']) for d in done) == \
            [(0, {}), (1, {}), (2, {'awaited_admission': True, 'received_into_them': True})], output
    on_rank_0(run_job)


@needs_elastic_kolorun
def test_a_failed_worker_rolls_the_others_back_to_the_last_commit(tmp_path):
    def run_job():
        reports, epochs, done, output = run_elastic_job(tmp_path, 'fail', ['-np', '3', '--min-np', '2'])
        # The batch each of the 3 ranks ran after its last commit runs again.
        uncommitted = collections.Counter()
        for batch in reports['BATCH']:
            if batch['size'] == 3 and batch['steps'] == 5:
                uncommitted.update(batch['idx'])
        assert len(uncommitted) == 9, output
        assert epochs[0] == collections.Counter(range(90)) + uncommitted, output
        assert epochs[1] == collections.Counter(range(90)), output
        assert sorted((d['rank'], d['size'], d['resets']) for d in done) == [(0, 2, [2]), (1, 2, [2])], output
    on_rank_0(run_job)


# ---- Bad arguments ------------------------------------------------------------------


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match='decorates a function'):
        elastic.run(3)
    with pytest.raises(TypeError, match='State first'):
        elastic.run(lambda state: None)(object())
    for name in ('_saved_state', 'commit', 'sync'):
        with pytest.raises(ValueError, match=repr(name)):
            ObjectState(**{name: 1})
    with pytest.raises(ValueError, match="'save'"):
        TorchState(save=1)
    with pytest.raises(TypeError, match="'lock'"):
        ObjectState(lock=threading.Lock())
    with pytest.raises(TypeError, match='bcast_object'):
        ObjectState(bcast_object=3)
    state = ObjectState(epoch=0)
    for callbacks in (print, 5, [print, 'not a function']):
        with pytest.raises(TypeError, match='function'):
            state.register_reset_callbacks(callbacks)
    with pytest.raises(NotImplementedError, match='save'):
        State().commit()
    with pytest.raises(TypeError, match='len'):
        ElasticSampler(iter(range(3)))
    with pytest.raises(TypeError, match='seed'):
        ElasticSampler(range(3), seed='a')
    sampler = ElasticSampler(range(10))
    with pytest.raises(ValueError, match='epoch'):
        sampler.set_epoch(-1)
    with pytest.raises(TypeError, match='epoch'):
        sampler.set_epoch(1.5)
    with pytest.raises(ValueError, match='batch_size'):
        sampler.record_batch(0, 0)
    with pytest.raises(TypeError, match='batch_idx'):
        sampler.record_batch('0', 2)
    with pytest.raises(ValueError, match='processed_indices'):
        sampler.load_state_dict({'epoch': 0})
    with pytest.raises(ValueError, match='rank 2 of 2'):
        sampler._split(2, 2)
    assert not HostsUpdatedInterrupt().skip_sync and HostsUpdatedInterrupt(True).skip_sync
    assert isinstance(HostsUpdatedInterrupt(), RuntimeError)
