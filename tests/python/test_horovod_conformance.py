"""kolo.torch against horovod.torch 0.28.1: for a call a Horovod script makes, the
result Horovod's implementation gives, worked out from its documented behaviour
and its code (horovod/torch/mpi_ops.py, functions.py, optimizer.py and the core's
ScaleBuffer). Runs with the other suites at 2 and 3 ranks and across 2 hosts x 2,
under the suite's stall shutdown, so that a hang fails it quickly."""

import math

import pytest
import torch

import kolo.torch as hvd
from conftest import rank_values

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def same_everywhere(value, name):
    values = hvd.allgather_object(value, name=name)
    assert all(v == values[0] for v in values), values


def tensors_equal_everywhere(tensors, name):
    gathered = hvd.allgather_object([t.detach().clone() for t in tensors], name=name)
    for other in gathered:
        for mine, theirs in zip(tensors, other):
            assert torch.equal(mine, theirs), (mine, theirs)


def works_after(name):
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=name)
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


@pytest.fixture
def last_two():
    """A set of the last two ranks (every rank at -np 2); removed after the test."""
    n = hvd.size()
    pair = hvd.add_process_set([n - 2, n - 1])
    yield pair
    hvd.remove_process_set(pair)


# ---- 1. 0-dim and zero-size tensors ------------------------------------------------------


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int64, torch.float16, torch.bool])
def test_a_scalar_broadcast_again_under_its_name_keeps_the_engine(dtype):
    # The second call is a cached (eager) one; it used to stop the engine.
    for i in range(3):
        value = torch.tensor(hvd.rank() + i).to(dtype)
        out = hvd.broadcast(value, root_rank=0, name=f'conf.scalar.{dtype}')
        assert out.shape == () and out.dtype == dtype
        assert torch.equal(out, torch.tensor(i).to(dtype))
        hvd.broadcast_(value, root_rank=hvd.size() - 1, name=f'conf.scalar.inplace.{dtype}')
        assert torch.equal(value, torch.tensor(hvd.size() - 1 + i).to(dtype))
    works_after(f'conf.scalar.after.{dtype}')


def test_scalars_and_empty_tensors_in_every_collective_twice():
    n, me = hvd.size(), hvd.rank()
    for i in range(2):
        assert hvd.allreduce(torch.tensor(float(me)), op=hvd.Sum, name='conf.0dim.sum').item() == n * (n - 1) / 2
        empty = hvd.allreduce(torch.zeros(0), name='conf.empty.allreduce')
        assert empty.shape == (0,)
        assert hvd.broadcast(torch.zeros(0, 3), root_rank=0, name='conf.empty.bcast').shape == (0, 3)
        assert hvd.allgather(torch.zeros(0, 3), name='conf.empty.gather').shape == (0, 3)
        out, received = hvd.alltoall(torch.zeros(0, 2), splits=[0] * n, name='conf.empty.alltoall')
        assert out.shape == (0, 2) and received.tolist() == [0] * n
        assert hvd.reducescatter(torch.zeros(0, 2), name='conf.empty.reducescatter').shape == (0, 2)
        grouped = hvd.grouped_allreduce([torch.zeros(0), torch.tensor(2.0)], op=hvd.Sum, name='conf.empty.grouped')
        assert grouped[0].shape == (0,) and grouped[1].item() == 2.0 * n
    works_after('conf.empty.after')


def test_broadcast_optimizer_state_twice():
    # torch keeps Adam's step as a 0-dim tensor: the second call broadcasts it again.
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(4, 3) * (hvd.rank() + 1)).sum().backward()
    opt.step()
    for _ in range(2):
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = opt.state_dict()['state']
    tensors_equal_everywhere([state[k][key] for k in sorted(state) for key in ('step', 'exp_avg', 'exp_avg_sq')],
                             name='conf.optstate.twice.check')
    works_after('conf.optstate.twice.after')


# ---- 2. a parameter without a gradient on one rank --------------------------------------


@pytest.mark.parametrize('groups', [None, 1])
def test_a_parameter_only_one_rank_used_is_averaged_with_zeros(groups):
    torch.manual_seed(5)
    model = torch.nn.ModuleDict({'used': torch.nn.Linear(3, 1), 'branch': torch.nn.Linear(3, 1)})
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), groups=groups)
    x = torch.ones(1, 3) * (hvd.rank() + 1)
    loss = model['used'](x).sum()
    if hvd.rank() == 0:  # a branch only rank 0 takes
        loss = loss + model['branch'](x).sum()
    opt.zero_grad()
    loss.backward()
    opt.synchronize()
    n = hvd.size()
    # Horovod gives the other ranks a zero gradient: rank 0's, averaged over n.
    assert torch.allclose(model['branch'].weight.grad, torch.ones(1, 3) / n)
    assert torch.allclose(model['branch'].bias.grad, torch.ones(1) / n)
    assert torch.allclose(model['used'].weight.grad, torch.ones(1, 3) * (n + 1) / 2)
    with opt.skip_synchronize():
        opt.step()
    tensors_equal_everywhere(list(model.parameters()), name=f'conf.unused.{groups}.check')


# ---- 3. grouped_reducescatter in a process set ------------------------------------------


def test_grouped_reducescatter_reduces_over_its_set_only(last_two):
    if last_two.included():
        me = last_two.rank()
        x = torch.arange(4, dtype=torch.float64).reshape(2, 2) + hvd.rank()
        outs = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum, name='conf.rs.grouped.set', process_set=last_two)
        members = last_two.ranks
        total = sum(torch.arange(4, dtype=torch.float64).reshape(2, 2) + r for r in members)
        assert torch.equal(outs[0], total[me:me + 1])
        assert torch.equal(outs[1], total[me:me + 1] * 2)
        outs = hvd.synchronize(hvd.grouped_reducescatter_async([x], op=hvd.Average, name='conf.rs.grouped.set.async',
                                                               process_set=last_two))
        assert torch.equal(outs[0], total[me:me + 1] / 2)
    hvd.barrier()


# ---- 4. a broadcast's root is a global rank, also in a set ------------------------------


def test_broadcasts_in_a_set_take_a_global_root(last_two):
    if last_two.included():
        root = last_two.ranks[-1]  # the set's member 1, global rank n - 1
        mine = torch.tensor([float(hvd.rank())] * 3)
        assert hvd.broadcast(mine, root, name='conf.set.bcast', process_set=last_two).tolist() == [root] * 3
        out = hvd.synchronize(hvd.broadcast_async(mine, root, name='conf.set.bcast.async', process_set=last_two))
        assert out.tolist() == [root] * 3
        copy = mine.clone()
        hvd.broadcast_(copy, root, name='conf.set.bcast.inplace', process_set=last_two)
        assert copy.tolist() == [root] * 3
        copy = mine.clone()
        hvd.synchronize(hvd.broadcast_async_(copy, root, name='conf.set.bcast.inplace.async', process_set=last_two))
        assert copy.tolist() == [root] * 3
        obj = hvd.broadcast_object({'from': hvd.rank()}, root_rank=root, name='conf.set.obj', process_set=last_two)
        assert obj == {'from': root}
        model = torch.nn.Linear(2, 2)
        torch.nn.init.constant_(model.weight, float(hvd.rank()))
        hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=last_two)
        assert torch.equal(model.weight, torch.full((2, 2), float(root)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9)
        hvd.broadcast_optimizer_state(opt, root, process_set=last_two)
        assert opt.param_groups[0]['lr'] == pytest.approx(0.1 * (root + 1))
        # The broadcast's gradient reaches the global root only.
        x = torch.ones(2, dtype=torch.float64, requires_grad=True)
        hvd.broadcast(x, root, name='conf.set.bcast.grad', process_set=last_two).sum().backward()
        assert torch.equal(x.grad, torch.ones(2, dtype=torch.float64) * (1.0 if hvd.rank() == root else 0.0))
        # A root outside the set is refused on every member alike.
        outside = 0 if hvd.size() > 2 else hvd.size()
        with pytest.raises(hvd.InvalidArgumentError, match=f'Invalid root rank {outside}') as refused:
            hvd.broadcast(mine, outside, name='conf.set.bcast.outside', process_set=last_two)
        assert isinstance(refused.value, RuntimeError)
        same_message = hvd.allgather_object(str(refused.value), name='conf.set.outside.msg', process_set=last_two)
        assert len(set(same_message)) == 1, same_message
    hvd.barrier()


# ---- 5. broadcast_optimizer_state on a fresh optimizer ----------------------------------


@pytest.mark.parametrize('make', [
    lambda params: torch.optim.Adam(params, lr=0.01),
    lambda params: torch.optim.SGD(params, lr=0.01),  # its state holds None without momentum
    lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    lambda params: torch.optim.RMSprop(params, lr=0.01),
], ids=['adam', 'sgd', 'momentum', 'rmsprop'])
def test_broadcast_optimizer_state_of_a_fresh_optimizer(make):
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = [p.detach().clone() for p in model.parameters()]
    opt = make(model.parameters())
    # Horovod's signature: the model third, positionally.
    hvd.broadcast_optimizer_state(opt, 0, model)
    state = opt.state_dict()['state']
    assert len(state) == 2  # Horovod steps a fresh optimizer once so that its state exists
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.grad, torch.zeros_like(p))  # the zero gradients it stepped with
        assert torch.equal(p.detach(), b)  # zero gradients move no weight of these optimizers
    values = [v for k in sorted(state) for v in state[k].values() if isinstance(v, torch.Tensor)]
    tensors_equal_everywhere(values, name='conf.optstate.fresh.check')


def test_broadcast_optimizer_state_of_a_fresh_distributed_optimizer():
    # The root has state, the others none: their start must be the wrapped
    # optimizer's own step, not one that allreduces (the root would not join it).
    model = torch.nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    if hvd.rank() == 0:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        torch.optim.Adam.step(opt)
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    state = opt.state_dict()['state']
    assert len(state) == 2
    tensors_equal_everywhere([state[k]['exp_avg'] for k in sorted(state)], name='conf.optstate.dist.check')


# ---- 6, 7. sparse gradients -------------------------------------------------------------


def test_sparse_allreduce_handle_is_callable():
    n, me = hvd.size(), hvd.rank()
    dense = torch.zeros(4, 3)
    dense[me % 4, 0] = me + 1.0
    dense[3, 2] = 1.0
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name='conf.sparse', op=hvd.Average)
    result = handle()
    assert result.is_sparse
    assert handle() is result and hvd.synchronize(handle) is result
    expected = torch.zeros(4, 3)
    for r in range(n):
        expected[r % 4, 0] += (r + 1.0) / n  # Horovod divides the values before they are summed
    expected[3, 2] = 1.0
    assert torch.allclose(result.to_dense(), expected)


@pytest.mark.parametrize('sparse_as_dense', [True, False])
def test_sparse_gradients_stay_sparse_for_sparse_adam(sparse_as_dense):
    torch.manual_seed(11)
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(embedding.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(embedding.parameters()), lr=0.1),
                                   named_parameters=embedding.named_parameters(), sparse_as_dense=sparse_as_dense)
    for step in range(2):
        opt.zero_grad()
        embedding(torch.tensor([hvd.rank() % 10, 9, step])).sum().backward()
        opt.step()
        assert embedding.weight.grad.is_sparse
    # Rows every rank looked up are averaged: row 9 had gradient 1 on every rank.
    assert torch.allclose(embedding.weight.grad.to_dense()[9], torch.ones(3))
    tensors_equal_everywhere([embedding.weight], name=f'conf.sparseadam.{sparse_as_dense}.check')


# ---- 8. integers with scale factors -----------------------------------------------------


def horovod_scaled(values, factor):
    """Horovod's ScaleBuffer on integers: factor * x in double, truncated to the type."""
    return [math.trunc(factor * v) for v in values]


@pytest.mark.parametrize('dtype', INTEGER_DTYPES)
@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_integer_allreduce_with_scale_factors(dtype, op):
    n, me = hvd.size(), hvd.rank()
    pre, post = 1.5, 0.75
    inputs = [rank_values((6,), dtype, r).tolist() for r in range(n)]
    summed = [sum(col) for col in zip(*[horovod_scaled(x, pre) for x in inputs])]
    # Horovod averages through the postscale: postscale / n, in double.
    expected = horovod_scaled(summed, post / n if op == hvd.Average else post)
    mine = torch.tensor(inputs[me], dtype=torch.int64).to(dtype)
    out = hvd.allreduce(mine, op=op, prescale_factor=pre, postscale_factor=post, name=f'conf.int.{dtype}.{op}')
    assert out.dtype == dtype and out.tolist() == [int(torch.tensor(e).to(dtype)) for e in expected]
    copy = mine.clone()
    hvd.allreduce_(copy, op=op, prescale_factor=pre, postscale_factor=post, name=f'conf.int.inplace.{dtype}.{op}')
    assert copy.tolist() == out.tolist()
    # The same rule for an integer average without factors.
    plain = hvd.allreduce(mine, op=op, name=f'conf.int.plain.{dtype}.{op}')
    summed = [sum(col) for col in zip(*inputs)]
    assert plain.tolist() == [int(torch.tensor(e).to(dtype))
                              for e in (horovod_scaled(summed, 1.0 / n) if op == hvd.Average else summed)]


@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.float64])
def test_reducescatter_scale_factors_follow_allreduces_rule(dtype):
    n, me = hvd.size(), hvd.rank()
    pre, post = 2.5, 0.5
    inputs = [rank_values((n, 2), dtype, r) for r in range(n)]
    out = hvd.reducescatter(inputs[me], op=hvd.Average, prescale_factor=pre, postscale_factor=post,
                            name=f'conf.rs.scaled.{dtype}')
    assert out.dtype == dtype  # never float32 for integers
    if dtype.is_floating_point:
        expected = sum(x[me] * pre for x in inputs) * (post / n)
        assert torch.allclose(out[0], expected)
    else:
        scaled = [horovod_scaled(x[me].tolist(), pre) for x in inputs]
        summed = [sum(col) for col in zip(*scaled)]
        assert out[0].tolist() == horovod_scaled(summed, post / n)
    handle = hvd.reducescatter_async(inputs[me], op=hvd.Average, prescale_factor=pre, postscale_factor=post,
                                     name=f'conf.rs.scaled.async.{dtype}')
    assert torch.equal(hvd.synchronize(handle), out)
    with pytest.raises(hvd.InvalidArgumentError, match='finite'):
        hvd.reducescatter(inputs[me], postscale_factor=float('nan'), name=f'conf.rs.nan.{dtype}')
    works_after(f'conf.rs.scaled.after.{dtype}')


def test_bool_takes_no_scale_factors():
    with pytest.raises(hvd.InvalidArgumentError, match='bool'):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, prescale_factor=2.0, name='conf.bool.scaled')
    works_after('conf.bool.after')


# ---- 9. the reducescatter gradient ------------------------------------------------------


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_reducescatter_gradient_is_horovods_in_a_set(op, last_two):
    if last_two.included():
        x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, name=f'conf.rs.grad.{op}', process_set=last_two)
        (y * (hvd.rank() + 1)).sum().backward()
        factor = 2.0 if op == hvd.Sum else 1.0  # the set's size for Sum
        expected = torch.stack([torch.full((3,), (r + 1) * factor, dtype=torch.float64) for r in last_two.ranks])
        assert torch.equal(x.grad, expected)
        # The scale factors scale the gradient too.
        x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, prescale_factor=2.0, postscale_factor=0.25,
                              name=f'conf.rs.grad.scaled.{op}', process_set=last_two)
        (y * (hvd.rank() + 1)).sum().backward()
        assert torch.equal(x.grad, expected * 0.5)
    hvd.barrier()


# ---- 10. errors Horovod raises as RuntimeError ------------------------------------------


def test_errors_horovod_raises_as_runtime_errors():
    n = hvd.size()
    with pytest.raises(RuntimeError, match='reducescatter supports'):
        hvd.reducescatter(torch.ones(n, 1), op=hvd.Adasum, name='conf.rs.adasum')
    # While the other ranks have joined, the last one's allgather and broadcast fail.
    if hvd.rank() == n - 1:
        for call in (lambda: hvd.allgather(torch.ones(1), name='conf.joined.gather'),
                     lambda: hvd.broadcast(torch.ones(1), 0, name='conf.joined.bcast')):
            with pytest.raises(RuntimeError, match='joined') as failed:
                call()
            assert isinstance(failed.value, hvd.InvalidArgumentError)
    assert hvd.join() == n - 1
    works_after('conf.joined.after')


# ---- 11. the rest of the surface --------------------------------------------------------


def test_mpi_ops_exports_the_session_functions():
    from kolo.torch import mpi_ops
    for name in ('init', 'shutdown', 'is_initialized', 'size', 'rank', 'local_size', 'local_rank', 'cross_size',
                 'cross_rank', 'is_homogeneous', 'add_process_set', 'remove_process_set', 'allreduce',
                 'broadcast_', 'synchronize', 'poll', 'join', 'barrier'):
        assert callable(getattr(mpi_ops, name)), name
    assert mpi_ops.size() == hvd.size()


def test_is_homogeneous_is_a_local_query():
    # Only rank 0 asks: a collective here would hang the suite.
    if hvd.rank() == 0:
        assert hvd.is_homogeneous() in (True, False)
    works_after('conf.homogeneous.after')


def test_broadcast_object_takes_what_cloudpickle_takes():
    offset = 5 + hvd.rank()
    fn = hvd.broadcast_object(lambda x: x + offset, root_rank=0, name='conf.obj.lambda')
    assert fn(1) == 6
    gathered = hvd.allgather_object(lambda: hvd.rank(), name='conf.obj.gather')
    assert len(gathered) == hvd.size()


def test_distributed_optimizer_attributes_and_ops():
    model = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), op=hvd.Max,
                                   named_parameters=model.named_parameters())
    assert opt.op == hvd.Max and opt.process_set is hvd.global_process_set
    assert opt.gradient_predivide_factor == 1.0 and opt.sparse_as_dense is False
    model(torch.ones(1, 2) * (hvd.rank() + 1)).sum().backward()
    opt.synchronize()
    assert torch.equal(model.weight.grad, torch.full((1, 2), float(hvd.size())))  # the largest rank's
    with opt.skip_synchronize():
        opt.step()
    # A loaded state starts a fresh step, as Horovod's load_state_dict.
    opt.load_state_dict(opt.state_dict())
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    tensors_equal_everywhere(list(model.parameters()), name='conf.opt.attrs.check')


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_sync_batch_norm_of_half_types_counts_in_float32(dtype):
    # 40000 rows of 1 + rank: every rank's sum but rank 0's overflows float16.
    n = hvd.size()
    layer = hvd.SyncBatchNorm(2, affine=False).to(dtype)
    x = torch.full((40000, 2), 1.0 + hvd.rank()).to(dtype)
    out = layer(x)
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    mean = sum(1.0 + r for r in range(n)) / n
    var = sum((1.0 + r - mean) ** 2 for r in range(n)) / n
    expected = (1.0 + hvd.rank() - mean) / math.sqrt(var + layer.eps)
    assert torch.allclose(out.float(), torch.full((40000, 2), expected), atol=2e-2)


def test_sync_batch_norm_without_running_stats_syncs_in_eval():
    layer = hvd.SyncBatchNorm(1, affine=False, track_running_stats=False).double().eval()
    out = layer(torch.full((4, 1), float(hvd.rank()), dtype=torch.float64))
    n = hvd.size()
    mean = (n - 1) / 2
    var = sum((r - mean) ** 2 for r in range(n)) / n
    expected = (hvd.rank() - mean) / math.sqrt(var + layer.eps)
    assert torch.allclose(out, torch.full((4, 1), expected, dtype=torch.float64))
