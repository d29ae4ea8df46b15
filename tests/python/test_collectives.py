"""Every collective of kolo.torch against references computed locally, for every dtype,
in and out of place, blocking and asynchronous."""

import pytest
import torch

import kolo.torch as hvd
from conftest import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, rank_values


def all_ranks(shape, dtype, salt=0):
    return [rank_values(shape, dtype, r, salt) for r in range(hvd.size())]


def reference(op, inputs):
    if inputs[0].dtype == torch.bool:
        stacked = torch.stack(inputs)
        return stacked.all(0) if op in (hvd.Min, hvd.Product) else stacked.any(0)
    wide = torch.stack([t.to(torch.float64) for t in inputs])
    if op == hvd.Sum:
        out = wide.sum(0)
    elif op == hvd.Average:
        out = wide.sum(0) / len(inputs)
    elif op == hvd.Min:
        out = wide.min(0).values
    elif op == hvd.Max:
        out = wide.max(0).values
    else:
        out = wide.prod(0)
    if not inputs[0].dtype.is_floating_point:
        out = out.trunc()
    return out


def assert_reduced(result, op, inputs):
    expected = reference(op, inputs)
    assert result.dtype == inputs[0].dtype
    assert result.shape == inputs[0].shape
    if result.dtype == torch.bool:
        assert torch.equal(result, expected)
    elif result.dtype.is_floating_point:
        tolerance = 1e-2 if result.dtype in (torch.float16, torch.bfloat16) else 1e-6
        assert torch.allclose(result.to(torch.float64), expected, rtol=tolerance, atol=tolerance)
    else:
        # Integer results wrap in their own type, as the reduction does.
        assert torch.equal(result, expected.to(torch.int64).to(result.dtype))


OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


@pytest.mark.parametrize('dtype', ALL_DTYPES)
@pytest.mark.parametrize('op', OPS)
def test_allreduce_every_dtype_and_op(dtype, op):
    if dtype == torch.bool and op == hvd.Average:
        pytest.skip('average of bool is refused (tested in test_errors)')
    inputs = all_ranks((3, 5), dtype)
    mine = inputs[hvd.rank()].clone()
    result = hvd.allreduce(mine, op=op, name=f'allreduce.{dtype}.{op}')
    assert torch.equal(mine, inputs[hvd.rank()]), 'the out-of-place form leaves its input alone'
    assert_reduced(result, op, inputs)

    in_place = inputs[hvd.rank()].clone()
    returned = hvd.allreduce_(in_place, op=op, name=f'allreduce_.{dtype}.{op}')
    assert returned is in_place
    assert_reduced(in_place, op, inputs)


@pytest.mark.parametrize('dtype', NUMERIC_DTYPES)
def test_allreduce_async_forms(dtype):
    inputs = all_ranks((17,), dtype, salt=1)
    h1 = hvd.allreduce_async(inputs[hvd.rank()], op=hvd.Sum, name=f'async.{dtype}')
    in_place = inputs[hvd.rank()].clone()
    h2 = hvd.allreduce_async_(in_place, op=hvd.Max, name=f'async_.{dtype}')
    assert_reduced(hvd.synchronize(h1), hvd.Sum, inputs)
    assert hvd.synchronize(h2) is in_place
    assert hvd.poll(h2)
    assert_reduced(in_place, hvd.Max, inputs)


def test_allreduce_average_argument_and_scale_factors():
    inputs = all_ranks((8,), torch.float64)
    mine = inputs[hvd.rank()]
    assert torch.allclose(hvd.allreduce(mine, average=False, name='avg.false'), reference(hvd.Sum, inputs))
    assert torch.allclose(hvd.allreduce(mine, average=True, name='avg.true'), reference(hvd.Average, inputs))
    scaled = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, name='scaled')
    assert torch.allclose(scaled, reference(hvd.Sum, inputs) * 0.5)


def test_allreduce_is_bitwise_identical_on_every_rank():
    torch.manual_seed(hvd.rank())
    result = hvd.allreduce(torch.randn(1000, dtype=torch.float32), name='bitwise')
    everyone = hvd.allgather(result.view(1, -1), name='bitwise.check')
    for row in everyone:
        assert torch.equal(row, result)


def test_non_contiguous_tensors_in_and_out_of_place():
    inputs = [rank_values((4, 6), torch.float32, r).t() for r in range(hvd.size())]
    mine = inputs[hvd.rank()].clone().t().contiguous().t()  # the same non-contiguous layout
    assert not mine.is_contiguous()
    assert_reduced(hvd.allreduce(mine, op=hvd.Sum, name='noncontig'), hvd.Sum, inputs)
    hvd.allreduce_(mine, op=hvd.Sum, name='noncontig_')
    assert_reduced(mine, hvd.Sum, inputs)
    handle = hvd.allreduce_async_(inputs[hvd.rank()].clone().t().contiguous().t(), op=hvd.Max,
                                  name='noncontig.async_')
    assert_reduced(hvd.synchronize(handle), hvd.Max, inputs)


def test_large_allreduce():
    inputs = all_ranks((1 << 20,), torch.float32, salt=5)
    assert_reduced(hvd.allreduce(inputs[hvd.rank()], op=hvd.Sum, name='large'), hvd.Sum, inputs)


def test_unnamed_operations_agree_across_ranks():
    for i in range(3):
        t = torch.full((4,), float(hvd.rank() + i))
        expected = sum(r + i for r in range(hvd.size())) / hvd.size()
        assert torch.allclose(hvd.allreduce(t), torch.full((4,), expected))
        assert torch.allclose(hvd.synchronize(hvd.allreduce_async(t)), torch.full((4,), expected))


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_grouped_allreduce_forms(op):
    inputs = [all_ranks((3,), torch.float32, salt=s) for s in range(3)]
    mine = [group[hvd.rank()].clone() for group in inputs]
    out = hvd.grouped_allreduce(mine, op=op, name=f'grouped.{op}')
    for result, group in zip(out, inputs):
        assert_reduced(result, op, group)
    for t, group in zip(mine, inputs):
        assert torch.equal(t, group[hvd.rank()])
    out = hvd.synchronize(hvd.grouped_allreduce_async(mine, op=op, name=f'grouped.async.{op}'))
    for result, group in zip(out, inputs):
        assert_reduced(result, op, group)
    returned = hvd.grouped_allreduce_(mine, op=op, name=f'grouped_.{op}')
    for t, result, group in zip(mine, returned, inputs):
        assert result is t
        assert_reduced(t, op, group)
    again = [group[hvd.rank()].clone() for group in inputs]
    hvd.synchronize(hvd.grouped_allreduce_async_(again, op=op, name=f'grouped.async_.{op}'))
    for t, group in zip(again, inputs):
        assert_reduced(t, op, group)


@pytest.mark.parametrize('dtype', ALL_DTYPES)
def test_allgather_with_first_dimensions_that_differ(dtype):
    inputs = [rank_values((r + 1, 2, 3), dtype, r) for r in range(hvd.size())]
    expected = torch.cat(inputs)
    assert torch.equal(hvd.allgather(inputs[hvd.rank()], name=f'allgather.{dtype}'), expected)
    assert torch.equal(hvd.synchronize(hvd.allgather_async(inputs[hvd.rank()], name=f'allgather.async.{dtype}')),
                       expected)


def test_grouped_allgather():
    a = [rank_values((r + 1,), torch.int32, r) for r in range(hvd.size())]
    b = [rank_values((2, 2), torch.float64, r, salt=3) for r in range(hvd.size())]
    out = hvd.grouped_allgather([a[hvd.rank()], b[hvd.rank()]], name='grouped.allgather')
    assert torch.equal(out[0], torch.cat(a))
    assert torch.equal(out[1], torch.cat(b))
    out = hvd.synchronize(hvd.grouped_allgather_async([a[hvd.rank()], b[hvd.rank()]]))
    assert torch.equal(out[1], torch.cat(b))


@pytest.mark.parametrize('dtype', ALL_DTYPES)
def test_broadcast_forms(dtype):
    root = hvd.size() - 1
    mine = rank_values((5, 2), dtype, hvd.rank())
    expected = rank_values((5, 2), dtype, root)
    before = mine.clone()
    assert torch.equal(hvd.broadcast(mine, root, name=f'broadcast.{dtype}'), expected)
    assert torch.equal(mine, before)
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(mine, root, name=f'broadcast.async.{dtype}')),
                       expected)
    assert hvd.broadcast_(mine, root, name=f'broadcast_.{dtype}') is mine
    assert torch.equal(mine, expected)
    other = rank_values((5, 2), dtype, hvd.rank(), salt=2)
    hvd.synchronize(hvd.broadcast_async_(other, 0, name=f'broadcast.async_.{dtype}'))
    assert torch.equal(other, rank_values((5, 2), dtype, 0, salt=2))


@pytest.mark.parametrize('dtype', [torch.float32, torch.int16, torch.bool])
def test_alltoall_even_and_with_splits(dtype):
    n, me = hvd.size(), hvd.rank()
    # Even: rank r sends rows [2j, 2j+2) of its input to rank j.
    inputs = [rank_values((2 * n, 3), dtype, r) for r in range(n)]
    expected = torch.cat([inputs[r][2 * me:2 * me + 2] for r in range(n)])
    assert torch.equal(hvd.alltoall(inputs[me], name=f'alltoall.{dtype}'), expected)
    # Splits: rank r sends r + j + 1 rows to rank j.
    splits = [[r + j + 1 for j in range(n)] for r in range(n)]
    inputs = [rank_values((sum(splits[r]), 2), dtype, r) for r in range(n)]
    pieces = []
    for r in range(n):
        start = sum(splits[r][:me])
        pieces.append(inputs[r][start:start + splits[r][me]])
    output, received = hvd.alltoall(inputs[me], splits=splits[me], name=f'alltoall.splits.{dtype}')
    assert torch.equal(output, torch.cat(pieces))
    assert received.tolist() == [splits[r][me] for r in range(n)]
    output, received = hvd.synchronize(hvd.alltoall_async(inputs[me], splits=torch.tensor(splits[me]),
                                                          name=f'alltoall.async.{dtype}'))
    assert torch.equal(output, torch.cat(pieces))


@pytest.mark.parametrize('dtype', FLOAT_DTYPES + [torch.int32])
@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_reducescatter(dtype, op):
    n, me = hvd.size(), hvd.rank()
    rows = 2 * n + 1  # the first rank gets one row more
    inputs = all_ranks((rows, 2), dtype)
    reduced = reference(op, inputs)
    counts = [rows // n + (1 if r < rows % n else 0) for r in range(n)]
    start = sum(counts[:me])
    expected = reduced[start:start + counts[me]]
    out = hvd.reducescatter(inputs[me], op=op, name=f'reducescatter.{dtype}.{op}')
    tolerance = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    assert out.shape == (counts[me], 2)
    assert torch.allclose(out.to(torch.float64), expected, atol=tolerance, rtol=tolerance)
    out = hvd.synchronize(hvd.reducescatter_async(inputs[me], op=op, name=f'reducescatter.async.{dtype}.{op}'))
    assert torch.allclose(out.to(torch.float64), expected, atol=tolerance, rtol=tolerance)


def test_reducescatter_scale_factors_and_grouped():
    n, me = hvd.size(), hvd.rank()
    inputs = all_ranks((n, 3), torch.float64)
    expected = reference(hvd.Sum, inputs)[me:me + 1] * 6.0
    out = hvd.reducescatter(inputs[me], op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0, name='rs.scaled')
    assert torch.allclose(out, expected)
    out = hvd.synchronize(hvd.reducescatter_async(inputs[me], op=hvd.Sum, prescale_factor=2.0,
                                                  postscale_factor=3.0, name='rs.scaled.async'))
    assert torch.allclose(out, expected)
    outs = hvd.grouped_reducescatter([inputs[me], inputs[me] * 2], op=hvd.Sum, name='rs.grouped')
    assert torch.allclose(outs[1], reference(hvd.Sum, inputs)[me:me + 1] * 2)
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([inputs[me]], op=hvd.Sum, name='rs.grouped.async'))
    assert torch.allclose(outs[0], reference(hvd.Sum, inputs)[me:me + 1])


def test_sparse_allreduce():
    me = hvd.rank()
    dense = torch.zeros(4, 3)
    dense[me % 4, 0] = me + 1.0
    dense[3, 2] = 1.0
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name='sparse', op=hvd.Sum)
    result = hvd.synchronize(handle).to_dense()
    expected = torch.zeros(4, 3)
    for r in range(hvd.size()):
        expected[r % 4, 0] += r + 1.0
    expected[3, 2] = hvd.size()
    assert torch.allclose(result, expected)


def test_barrier_and_join():
    hvd.barrier()
    # Every rank but the last joins at once; the last one's allreduce sums zeros
    # for the joined ranks.
    if hvd.rank() == hvd.size() - 1:
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name='joined.sum')
        assert torch.equal(out, torch.ones(3))
    assert hvd.join() == hvd.size() - 1
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name='after.join'), torch.full((2,), float(hvd.size())))


def test_compression_fp16_and_bf16():
    inputs = all_ranks((6,), torch.float32)
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16, hvd.Compression.none):
        out = hvd.allreduce(inputs[hvd.rank()], op=hvd.Sum, compression=compression, name=f'compressed.{compression}')
        assert out.dtype == torch.float32
        assert torch.allclose(out.double(), reference(hvd.Sum, inputs), atol=1e-2)


def test_float16_average_holds_where_the_sum_would_overflow():
    # kolo divides before it sums (as NCCL's average does); Horovod's sum overflows to inf.
    big = torch.full((5,), 60000.0, dtype=torch.float16)
    assert torch.equal(hvd.allreduce(big, name='half.average.big'), big)
    grads = [torch.full((3,), 60000.0, dtype=torch.float16), torch.full((7,), -60000.0, dtype=torch.float16)]
    assert all(torch.equal(out, g) for out, g in zip(hvd.grouped_allreduce(grads, name='half.average.group'), grads))
