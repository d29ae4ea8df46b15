"""DistributedOptimizer and the broadcasts of training state: N workers with batch B
train exactly as 1 worker with batch N*B (float64), and every rank starts from
rank 0's state."""

import copy

import pytest
import torch

import kolo.torch as hvd
from kolo.torch import _kolo

BATCH = 4
STEPS = 3


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2)).double()


def global_batch(step, micro=0):
    g = torch.Generator().manual_seed(1000 * step + micro)
    n = BATCH * hvd.size()
    return torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randn(n, 2, generator=g, dtype=torch.float64)


def my_rows(tensor):
    return tensor[hvd.rank() * BATCH:(hvd.rank() + 1) * BATCH]


def loss_of(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def train(make_optimizer, distributed, passes=1, **options):
    model = make_model(seed=0)
    optimizer = make_optimizer(model.parameters())
    if distributed:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             backward_passes_per_step=passes, **options)
    for step in range(STEPS):
        optimizer.zero_grad()
        for micro in range(passes):
            x, y = global_batch(step, micro)
            if distributed:
                x, y = my_rows(x), my_rows(y)
            loss_of(model, x, y).backward()
        optimizer.step()
    return model


OPTIMIZERS = {
    'sgd-momentum': lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    'adam': lambda params: torch.optim.Adam(params, lr=0.01),
}


@pytest.mark.parametrize('passes', [1, 2])
@pytest.mark.parametrize('kind', sorted(OPTIMIZERS))
def test_n_workers_train_as_one_with_n_times_the_batch(kind, passes):
    distributed = train(OPTIMIZERS[kind], True, passes)
    alone = train(OPTIMIZERS[kind], False, passes)
    for (name, a), b in zip(distributed.named_parameters(), alone.parameters()):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), name


@pytest.mark.parametrize('options', [{'groups': 2}, {'groups': 1}, {'compression': hvd.Compression.none},
                                     {'gradient_predivide_factor': 2.0}])
def test_groups_and_options_train_alike(options):
    distributed = train(OPTIMIZERS['sgd-momentum'], True, **options)
    alone = train(OPTIMIZERS['sgd-momentum'], False)
    for a, b in zip(distributed.parameters(), alone.parameters()):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9)


def test_gradients_live_in_one_shareable_bucket_after_the_first_step():
    # Past 1 MiB of gradients, so that shared memory reduces the bucket in place;
    # one step's zero_grad(set_to_none=True) makes backward allocate fresh
    # gradients, which are moved back into their places. The bucket is the
    # memory the optimizer made when it was built (its pages in before step 1).
    def make():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(5, 300), torch.nn.Tanh(), torch.nn.Linear(300, 600),
                                   torch.nn.Tanh(), torch.nn.Linear(600, 2)).double()

    def run(distributed):
        model = make()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        made = set()
        if distributed:
            optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
            if optimizer._buckets is not None:
                made = {t.storage().data_ptr() for t in optimizer._buckets._memory.values()}
        storages = [made]
        for step in range(4):
            optimizer.zero_grad(set_to_none=step == 2)
            x, y = global_batch(step)
            if distributed:
                x, y = my_rows(x), my_rows(y)
            loss_of(model, x, y).backward()
            optimizer.step()
            storages.append({p.grad.storage().data_ptr() for p in model.parameters()})
        return model, storages

    distributed, storages = run(True)
    made, storages = storages[0], storages[1:]
    alone, _ = run(False)
    for (name, a), b in zip(distributed.named_parameters(), alone.parameters()):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), name
    if hvd.size() > 1 and _kolo.backend() == 'shm':
        assert all(len(s) == 1 for s in storages), storages
        assert set.union(*storages) == made, (storages, made)


def test_fp16_compression_trains_close():
    distributed = train(OPTIMIZERS['sgd-momentum'], True, compression=hvd.Compression.fp16)
    alone = train(OPTIMIZERS['sgd-momentum'], False)
    for a, b in zip(distributed.parameters(), alone.parameters()):
        assert torch.allclose(a, b, atol=1e-2)


def after_one_backward():
    """A distributed SGD whose first backward pass has run: its allreduces are in flight."""
    model = make_model(seed=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x, y = global_batch(0)
    loss_of(model, my_rows(x), my_rows(y)).backward()
    return model, optimizer, x, y


def test_synchronize_then_step_in_skip_synchronize_for_clipping():
    model, optimizer, x, y = after_one_backward()
    optimizer.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with optimizer.skip_synchronize():
        optimizer.step()
    reference = make_model(seed=0)
    loss_of(reference, x, y).backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=1e-10)


def test_zero_grad_between_backward_and_step_is_refused():
    _, optimizer, _, _ = after_one_backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match='zero_grad'):
            optimizer.zero_grad()
    optimizer.step()


def test_bad_named_parameters_are_refused():
    model = make_model(seed=0)
    with pytest.raises(ValueError, match='unique'):
        named = list(model.named_parameters())
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named + named[:1])
    with pytest.raises(ValueError, match='not named'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=list(model.named_parameters())[:1])


def test_broadcast_parameters_from_root():
    model = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    root = make_model(seed=0)
    for a, b in zip(model.parameters(), root.parameters()):
        assert torch.equal(a, b)
    other = make_model(seed=hvd.rank() + 10)
    hvd.broadcast_parameters(other.named_parameters(), root_rank=hvd.size() - 1)
    last = make_model(seed=hvd.size() - 1 + 10)
    for a, b in zip(other.parameters(), last.parameters()):
        assert torch.equal(a, b)


def test_broadcast_optimizer_state_including_ranks_that_never_stepped():
    model = make_model(seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    if hvd.rank() == 0:
        x, y = global_batch(0)
        loss_of(model, x, y).backward()
        optimizer.step()
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    state = optimizer.state_dict()
    assert state['param_groups'][0]['lr'] == pytest.approx(0.01)
    root_state = hvd.broadcast_object(copy.deepcopy(state), root_rank=0, name='optimizer.state.check')
    for key, per_param in root_state['state'].items():
        for name, value in per_param.items():
            assert torch.equal(state['state'][key][name], value), name


def test_broadcast_optimizer_state_receives_into_the_ranks_own_tensors():
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * (hvd.rank() + 1), momentum=0.9)
    x, y = global_batch(hvd.rank())
    loss_of(model, x, y).backward()
    optimizer.step()
    own = [s['momentum_buffer'] for s in optimizer.state.values()]
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    now = [s['momentum_buffer'] for s in optimizer.state.values()]
    assert all(a is b for a, b in zip(own, now)) and len(now) == len(own) > 0
    assert optimizer.param_groups[0]['lr'] == pytest.approx(0.01)
    root = hvd.broadcast_object([t.clone() for t in now], root_rank=0, name='optimizer.own.check')
    assert all(torch.equal(a, b) for a, b in zip(now, root))
    # Training goes on with the received state: the buffer is the optimizer's own.
    loss_of(model, x, y).backward()
    optimizer.step()
    assert all(s['momentum_buffer'] is t for s, t in zip(optimizer.state.values(), now))


def test_broadcast_object_and_allgather_object():
    obj = {'rank': hvd.rank(), 'payload': list(range(hvd.rank() + 2))}
    assert hvd.broadcast_object(obj, root_rank=0) == {'rank': 0, 'payload': [0, 1]}
    gathered = hvd.allgather_object(obj)
    assert [o['rank'] for o in gathered] == list(range(hvd.size()))


def test_sync_batch_norm_matches_batch_norm_of_the_global_batch():
    torch.manual_seed(3)
    x = torch.randn(BATCH * hvd.size(), 3, 4, dtype=torch.float64)
    weight_grad_check = torch.randn(BATCH * hvd.size(), 3, 4, dtype=torch.float64)
    sync = hvd.SyncBatchNorm(3).double()
    plain = torch.nn.BatchNorm1d(3).double()
    mine = my_rows(x).clone().requires_grad_()
    out = sync(mine)
    (out * my_rows(weight_grad_check)).sum().backward()
    everything = x.clone().requires_grad_()
    expected = plain(everything)
    (expected * weight_grad_check).sum().backward()
    assert torch.allclose(out, my_rows(expected), atol=1e-10)
    assert torch.allclose(mine.grad, my_rows(everything.grad), atol=1e-10)
    # Parameter gradients are per rank; their sum over ranks is the global one.
    weight_grad = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name='syncbn.weight.grad')
    assert torch.allclose(weight_grad, plain.weight.grad, atol=1e-10)
    assert torch.allclose(sync.running_mean, plain.running_mean, atol=1e-10)
    assert torch.allclose(sync.running_var, plain.running_var, atol=1e-10)


def test_distributed_sampler_with_horovods_arguments():
    dataset = list(range(10 * hvd.size()))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(),
                                                              shuffle=True, seed=5)
    mine = list(sampler)
    everyone = hvd.allgather_object(mine, name='sampler.indices')
    assert sorted(i for part in everyone for i in part) == dataset
