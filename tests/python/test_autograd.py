"""Gradients of the differentiable collectives against analytic references: each
rank's loss is sum(w_r * output) with weights that differ by rank, so the gradient
of the sum of all ranks' losses is known in closed form."""

import torch

import kolo.torch as hvd


def weights(shape, rank):
    return torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float64).reshape(shape) * (rank + 1)


def test_allreduce_gradient_is_an_allreduce():
    x = torch.arange(6, dtype=torch.float64).requires_grad_()
    y = hvd.allreduce(x, op=hvd.Average, name='grad.allreduce')
    (y * weights(y.shape, hvd.rank())).sum().backward()
    # d(sum_r w_r . mean(x))/dx = mean of the w_r (the backward averages them).
    expected = sum(weights((6,), r) for r in range(hvd.size())) / hvd.size()
    assert torch.allclose(x.grad, expected)


def test_allreduce_sum_with_scale_factors_gradient():
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name='grad.scaled')
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), float(hvd.size()), dtype=torch.float64))


def test_grouped_allreduce_gradient():
    xs = [torch.ones(2, dtype=torch.float64, requires_grad=True), torch.ones(3, dtype=torch.float64,
                                                                            requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name='grad.grouped')
    (ys[0].sum() * (hvd.rank() + 1) + ys[1].sum()).backward()
    total = sum(r + 1 for r in range(hvd.size()))
    assert torch.allclose(xs[0].grad, torch.full((2,), float(total), dtype=torch.float64))
    assert torch.allclose(xs[1].grad, torch.full((3,), float(hvd.size()), dtype=torch.float64))


def test_allgather_gradient_is_this_ranks_rows_of_an_averaged_allreduce():
    rows = hvd.rank() + 1
    x = torch.ones(rows, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name='grad.allgather')
    (y * weights(y.shape, hvd.rank())).sum().backward()
    everyone = sum(weights(y.shape, r) for r in range(hvd.size())) / hvd.size()
    offset = sum(r + 1 for r in range(hvd.rank()))
    assert torch.allclose(x.grad, everyone[offset:offset + rows])


def test_broadcast_gradient_is_zero_off_the_root():
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root_rank=0, name='grad.broadcast')
    (y * weights(y.shape, hvd.rank())).sum().backward()
    if hvd.rank() == 0:
        expected = sum(weights((4,), r) for r in range(hvd.size())) / hvd.size()
        assert torch.allclose(x.grad, expected)
    else:
        assert torch.equal(x.grad, torch.zeros(4, dtype=torch.float64))


def test_alltoall_gradient_is_the_reverse_alltoall():
    n = hvd.size()
    splits = [j + 1 for j in range(n)]  # rank r sends j+1 rows to rank j
    x = torch.ones(sum(splits), dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=splits, name='grad.alltoall')
    assert received.tolist() == [hvd.rank() + 1] * n
    # Every row this rank received from rank s gets weight (rank + 1) * (s + 1).
    row_weights = torch.cat([torch.full((hvd.rank() + 1,), float((hvd.rank() + 1) * (s + 1))) for s in range(n)])
    (y * row_weights.double()).sum().backward()
    # Rows this rank sent to rank j come back with weight (j + 1) * (rank + 1).
    expected = torch.cat([torch.full((j + 1,), float((j + 1) * (hvd.rank() + 1))) for j in range(n)])
    assert torch.allclose(x.grad, expected.double())


def test_reducescatter_gradient_is_an_allgather():
    n = hvd.size()
    for op, factor in ((hvd.Average, 1), (hvd.Sum, n)):
        x = torch.ones(n, 2, dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, name=f'grad.reducescatter.{op}')
        (y * (hvd.rank() + 1)).sum().backward()
        # Horovod's gradient: row j is rank j's upstream gradient, times the set's
        # size for Sum and as it is for Average.
        expected = torch.stack([torch.full((2,), float(j + 1) * factor) for j in range(n)]).double()
        assert torch.equal(x.grad, expected)


def test_allreduce_gradient_matches_finite_differences():
    torch.manual_seed(7 + hvd.rank())
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64)

    def total_loss(value):
        # Every rank's loss, summed over ranks, as a function of this rank's input.
        local = (hvd.allreduce(value, op=hvd.Average, name='fd.forward') ** 2 * w).sum()
        return hvd.allreduce(local.detach().reshape(1), op=hvd.Sum, name='fd.total').item()

    y = hvd.allreduce(x, op=hvd.Average, name='fd.graph')
    (y ** 2 * w).sum().backward()
    epsilon = 1e-6
    for i in range(5):
        # Ranks perturb their inputs one at a time (rank by rank) to probe each
        # rank's own partial derivative.
        for r in range(hvd.size()):
            step = torch.zeros(5, dtype=torch.float64)
            if r == hvd.rank():
                step[i] = epsilon
            up = total_loss((x + step).detach())
            down = total_loss((x - step).detach())
            if r == hvd.rank():
                numeric = (up - down) / (2 * epsilon)
                assert abs(numeric - x.grad[i].item()) < 1e-5, (i, numeric, x.grad[i].item())
