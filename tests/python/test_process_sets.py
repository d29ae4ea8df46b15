"""Process sets from Python: disjoint sets at once, a set of one, a rank outside a set."""

import threading

import pytest
import torch

import kolo.torch as hvd


@pytest.fixture
def halves():
    n = hvd.size()
    low = hvd.add_process_set(list(range(max(1, n // 2))))
    high = hvd.add_process_set(hvd.ProcessSet(range(max(1, n // 2), n)))
    yield low, high
    hvd.remove_process_set(low)
    hvd.remove_process_set(high)


def test_disjoint_sets_run_concurrently(halves):
    low, high = halves
    mine = low if low.included() else high
    assert mine.rank() == mine.ranks.index(hvd.rank())
    for i in range(50):
        out = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum, name='sets.sum', process_set=mine)
        assert out.item() == sum(mine.ranks)
    gathered = hvd.allgather(torch.tensor([hvd.rank()]), name='sets.gather', process_set=mine)
    assert gathered.tolist() == mine.ranks
    root = hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=mine.ranks[-1], name='sets.bcast', process_set=mine)
    assert root.item() == mine.ranks[-1]
    other = high if mine is low else low
    with pytest.raises(ValueError, match='not in process set'):
        hvd.allreduce(torch.ones(1), name='sets.outside', process_set=other)
    # The global set at the same time as a set, from two threads.
    results = {}
    thread = threading.Thread(target=lambda: results.setdefault('global', hvd.allreduce(
        torch.ones(1), op=hvd.Sum, name='sets.global')))
    thread.start()
    results['set'] = hvd.allreduce(torch.ones(1), op=hvd.Sum, name='sets.beside', process_set=mine)
    thread.join()
    assert results['global'].item() == hvd.size() and results['set'].item() == mine.size()
    hvd.barrier(process_set=mine)


def test_a_set_of_one_and_optimizer_in_a_set():
    alone = hvd.add_process_set([hvd.size() - 1])
    try:
        if alone.included():
            assert hvd.allreduce(torch.tensor([3.0]), process_set=alone).item() == 3.0
            model = torch.nn.Linear(2, 1)
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters(), process_set=alone)
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
            assert hvd.broadcast_object({'x': 1}, root_rank=hvd.rank(), process_set=alone) == {'x': 1}
    finally:
        hvd.remove_process_set(alone)


def test_unregistered_and_bad_sets():
    with pytest.raises(ValueError, match='not a registered process set'):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))
    # As Horovod: nothing to remove is a False, not an error.
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert hvd.remove_process_set(hvd.ProcessSet([0])) is False
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    with pytest.raises(ValueError, match='outside'):
        hvd.add_process_set([0, hvd.size()])
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='sets.after.bad').item() == hvd.size()
