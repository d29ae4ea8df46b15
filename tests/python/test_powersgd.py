"""kolo.torch.PowerSGD in DistributedOptimizer: exact where the rank covers the
gradients, bitwise equal replicas where it does not, whole gradients below the
thresholds, its memory in elastic commits, and clear errors for bad settings
and for ranks that disagree."""

import os
import subprocess

import pytest
import torch

import kolo.torch as hvd
from conftest import on_rank_0
from kolo.torch.elastic import TorchState

ROWS = 2  # samples per rank and step


def make_model(seed=0):
    torch.manual_seed(seed)
    # Weights of 64 x 32 and 16 x 64 (compressed at ranks below 10); biases travel whole.
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16)).double()


def global_batch(step, rows):
    g = torch.Generator().manual_seed(700 + step)
    return torch.randn(rows, 32, generator=g, dtype=torch.float64), torch.randn(rows, 16, generator=g,
                                                                                dtype=torch.float64)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_everywhere(tensor, name):
    gathered = hvd.allgather_object(tensor.numpy().tobytes(), name=name)
    return all(g == gathered[0] for g in gathered)


def train(compression, steps=4, passes=1, clip=1.0, rows=ROWS, check_name='powersgd'):
    """(distributed model, one worker's model with the whole batch); asserts bitwise
    equal replicas after every step."""
    size, rank = hvd.size(), hvd.rank()
    model, reference = make_model(), make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                         named_parameters=model.named_parameters(), compression=compression,
                                         backward_passes_per_step=passes)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = global_batch(step, passes * size * rows)
        optimizer.zero_grad()
        for micro in range(passes):
            start = (micro * size + rank) * rows
            (torch.nn.functional.mse_loss(model(x[start:start + rows]), y[start:start + rows]) / passes).backward()
        if clip != 1.0:
            optimizer.synchronize()
            for p in model.parameters():
                p.grad.mul_(clip)
            with optimizer.skip_synchronize():
                optimizer.step()
        else:
            optimizer.step()
        assert same_everywhere(flat(model), f'{check_name}.{step}')
        reference_optimizer.zero_grad()
        (torch.nn.functional.mse_loss(reference(x), y) * clip).backward()
        reference_optimizer.step()
    return model, reference


def relative_error(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize('passes,clip', [(1, 1.0), (2, 1.0), (1, 0.5)], ids=['plain', 'passes', 'clipped'])
def test_a_rank_at_least_the_gradients_is_exact(passes, clip):
    # A batch of B rows gives a Linear weight a gradient of rank at most B: one
    # power iteration of that rank recovers the average.
    compression = hvd.PowerSGD(rank=passes * hvd.size() * ROWS, min_size=0)
    model, reference = train(compression, passes=passes, clip=clip, check_name=f'powersgd.exact.{passes}.{clip}')
    assert relative_error(flat(model), flat(reference)) < 1e-9
    if hvd.size() > 1:
        # A weight is compressed while its factors are smaller than itself.
        taken = [(n, m) for n, m in ((64, 32), (16, 64)) if min(compression.rank, n, m) * (n + m) < n * m]
        assert taken  # at 4 ranks and 2 passes (rank 16) the 16 x 64 weight travels whole
        assert compression.last_compressed_elements == sum(n * m for n, m in taken)
        assert compression.last_sent_elements == sum(min(compression.rank, n, m) * (n + m) for n, m in taken)
        assert compression.steps == 4


def test_rank_one_keeps_replicas_bitwise_equal_and_sends_less():
    compression = hvd.Compression.powersgd(rank=1, min_size=0)
    model, reference = train(compression, rows=4, steps=6, check_name='powersgd.rank1')
    if hvd.size() > 1:
        assert compression.last_sent_elements == 64 + 32 + 16 + 64
        assert compression.last_allreduces == 2  # factors this small travel in one chunk
        assert relative_error(flat(model), flat(reference)) > 1e-6  # an approximation, not the average


def test_small_gradients_and_early_steps_travel_whole():
    compression = hvd.PowerSGD(rank=2, min_size=2000)  # only the 64 x 32 weight is large enough
    model, reference = train(compression, steps=2, rows=1, check_name='powersgd.small')
    if hvd.size() > 1:
        assert compression.last_compressed_elements == 64 * 32
    late = hvd.PowerSGD(rank=2, min_size=0, start_step=3)
    model, reference = train(late, steps=3, check_name='powersgd.late')
    assert relative_error(flat(model), flat(reference)) < 1e-9  # no step compressed yet
    assert late.last_compressed_elements == 0


def test_memory_is_committed_and_restored_with_the_optimizer():
    model = make_model()
    compression = hvd.PowerSGD(rank=1, min_size=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters(), compression=compression)
    state = TorchState(model, optimizer, epoch=0)

    def one_step(step):
        x, y = global_batch(step, hvd.size() * ROWS)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x[hvd.rank() * ROWS:][:ROWS]), y[hvd.rank() * ROWS:][:ROWS]).backward()
        optimizer.step()

    for step in range(2):
        one_step(step)
    state.commit()
    committed = {k: v.clone() for k, v in compression.memory().items()}
    one_step(2)
    if hvd.size() > 1:
        assert any(not torch.equal(committed[k], v) for k, v in compression.memory().items())
    state.restore()
    memory = compression.memory()
    assert sorted(memory) == sorted(committed)
    assert all(torch.equal(memory[k], committed[k]) for k in committed)
    # Errors stay each rank's own; a sync gives every rank rank 0's step count and factors.
    state.sync()
    shared = {k: v for k, v in compression.memory().items() if not k.startswith('local.')}
    for name in sorted(shared):
        assert same_everywhere(shared[name], f'powersgd.memory.{name}')


def test_bad_settings_are_named():
    for bad in (dict(rank=0), dict(start_step=-1), dict(min_size=-2)):
        with pytest.raises(ValueError, match='PowerSGD'):
            hvd.PowerSGD(**bad)
    with pytest.raises(TypeError, match='rank must be an int'):
        hvd.PowerSGD(rank=2.5)
    model = make_model()

    def wrap(**options):
        return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=model.named_parameters(), **options)
    with pytest.raises(ValueError, match='op=Average or op=Sum'):
        wrap(compression=hvd.PowerSGD(), op=hvd.Max)
    with pytest.raises(ValueError, match='gradient_predivide_factor'):
        wrap(compression=hvd.PowerSGD(), gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match='groups'):
        wrap(compression=hvd.PowerSGD(), groups=2)
    shared = hvd.PowerSGD()
    wrap(compression=shared)
    with pytest.raises(ValueError, match='one DistributedOptimizer'):
        wrap(compression=shared)


def test_ranks_with_different_settings_fail_on_every_rank():
    if hvd.size() == 1:
        pytest.skip('needs two ranks')
    model = make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.PowerSGD(rank=2 + (hvd.rank() == 1), min_size=0))
    x, y = global_batch(0, ROWS)
    torch.nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(ValueError, match="rank 0 has 'powersgd rank=2.*rank 1 has 'powersgd rank=3"):
        optimizer.step()


@pytest.mark.skipif('KOLORUN' not in os.environ or 'POWERSGD_BITS_PROGRAM' not in os.environ,
                    reason='needs KOLORUN and POWERSGD_BITS_PROGRAM, the C++ program (set by ctest)')
def test_the_cpp_optimizer_gives_the_same_bits(tmp_path):
    """tests/torch/powersgd_bits.cc trains this model on this data in C++; the
    weights and data are formulas both compute with the same operations."""
    rows, steps = 4, 5
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16)).double()
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            k = torch.arange(p.numel(), dtype=torch.float64)
            p.copy_((torch.sin(k * 0.37 + i) / 5).reshape(p.shape))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.PowerSGD(rank=2, min_size=0))
    rank = hvd.rank()
    for step in range(steps):
        x = torch.cos(torch.arange(rows * 32, dtype=torch.float64) * 0.13 + (step * 7 + rank)).reshape(rows, 32)
        y = torch.sin(torch.arange(rows * 16, dtype=torch.float64) * 0.29 + (step + rank * 3)).reshape(rows, 16)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    mine = b''.join(p.detach().contiguous().numpy().tobytes() for p in model.parameters())
    out = tmp_path / 'cpp-parameters'

    def run_cpp():
        subprocess.run([os.environ['KOLORUN'], '-np', str(hvd.size()), os.environ['POWERSGD_BITS_PROGRAM'], str(out)],
                       check=True, timeout=120, capture_output=True)
    on_rank_0(run_cpp)
    if rank == 0:
        assert out.read_bytes() == mine


def test_a_process_set_compresses_among_its_members():
    """Two disjoint sets train apart, each with its own PowerSGD: a set's
    factors travel among its members only, and each set's replicas agree."""
    n = hvd.size()
    if n < 2:
        pytest.skip('needs two ranks')
    low = hvd.add_process_set(list(range(n // 2)) or [0])
    high = hvd.add_process_set(list(range(n // 2, n)))
    try:
        mine = low if low.included() else high
        model = make_model(seed=len(mine.ranks))
        compression = hvd.PowerSGD(rank=1, min_size=0)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                             named_parameters=model.named_parameters(), compression=compression,
                                             process_set=mine)
        for step in range(3):
            x, y = global_batch(step + 10 * hvd.rank(), ROWS)  # every rank its own data
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        bits = flat(model).numpy().tobytes()
        gathered = hvd.allgather_object(bits, name='powersgd.sets.check', process_set=mine)
        assert all(g == gathered[0] for g in gathered)
        if mine.size() > 1:
            assert compression.last_compressed_elements == 64 * 32 + 16 * 64
        else:
            assert compression.steps == 0  # a set of one reduces nothing
    finally:
        hvd.remove_process_set(low)
        hvd.remove_process_set(high)
