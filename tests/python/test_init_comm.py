"""init(comm=...): worlds made of some of the job's ranks, as Horovod's init(comm=[ranks])."""

import os
import subprocess
import sys

import pytest
import torch

import kolo.torch as hvd
from conftest import on_rank_0

JOB_RANK = int(os.environ.get('KOLO_RANK', '0'))
JOB_SIZE = int(os.environ.get('KOLO_SIZE', '1'))
# kolorun places a host's ranks side by side: this host's are these job ranks.
LOCAL_SIZE = int(os.environ.get('KOLO_LOCAL_SIZE', '1'))
HOST_RANKS = range(JOB_RANK - int(os.environ.get('KOLO_LOCAL_RANK', '0')),
                   JOB_RANK - int(os.environ.get('KOLO_LOCAL_RANK', '0')) + LOCAL_SIZE)
CROSS_SIZE = int(os.environ.get('KOLO_CROSS_SIZE', '1'))


@pytest.fixture
def own_session():
    """Each test makes its own worlds; the job's own session comes back after it."""
    hvd.shutdown()
    try:
        yield
    finally:
        hvd.shutdown()
        hvd.init()


def test_a_list_of_ranks_orders_the_world(own_session):
    world = list(reversed(range(JOB_SIZE)))  # world rank i is job rank world[i]
    hvd.init(comm=world)
    me = world.index(JOB_RANK)
    assert (hvd.rank(), hvd.size()) == (me, JOB_SIZE)
    # Local ranks follow the world's order among this host's ranks.
    local_rank = sum(1 for r in world[:me] if r in HOST_RANKS)
    assert (hvd.local_rank(), hvd.local_size(), hvd.cross_size()) == (local_rank, LOCAL_SIZE, CROSS_SIZE)
    total = hvd.allreduce(torch.tensor([JOB_RANK], dtype=torch.int64), op=hvd.Sum, name='order.sum')
    assert total.item() == sum(range(JOB_SIZE))
    rows = hvd.allgather(torch.tensor([JOB_RANK]), name='order.gather')
    assert rows.tolist() == world
    root_value = hvd.broadcast(torch.tensor([JOB_RANK]), root_rank=0, name='order.bcast')
    assert root_value.item() == world[0]


def test_disjoint_worlds_run_side_by_side(own_session):
    world = [r for r in range(JOB_SIZE) if r % 2 == JOB_RANK % 2]  # evens and odds
    hvd.init(comm=world)
    assert (hvd.rank(), hvd.size()) == (world.index(JOB_RANK), len(world))
    for i in range(50):
        total = hvd.allreduce(torch.tensor([JOB_RANK + i], dtype=torch.int64), op=hvd.Sum, name='disjoint')
        assert total.item() == sum(world) + i * len(world), i
    # The same unnamed call site on both worlds: each pairs up within its own.
    assert hvd.allgather(torch.tensor([JOB_RANK])).tolist() == world
    # Process sets live inside the world, numbered by its ranks.
    first = hvd.add_process_set([0])
    if hvd.rank() == 0:
        assert hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=first, name='set').item() == 5.0
    hvd.remove_process_set(first)


def test_an_empty_list_and_dynamic_sets_are_the_plain_job(own_session):
    # As Horovod: comm=[] is every rank, process_sets='dynamic' asks for nothing more.
    hvd.init(comm=[], process_sets='dynamic')
    assert (hvd.rank(), hvd.size()) == (JOB_RANK, JOB_SIZE)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='empty.comm').item() == JOB_SIZE


@pytest.mark.parametrize('comm, error', [
    ([JOB_RANK, JOB_RANK], ValueError),
    ([JOB_RANK, JOB_SIZE], ValueError),
    ([JOB_RANK, -1], ValueError),
    ([r for r in range(JOB_SIZE) if r != JOB_RANK], ValueError),
    ('0', TypeError),
    ([float(JOB_RANK)], TypeError),
    ([True], TypeError),
    (3, TypeError),
])
def test_bad_lists_are_refused_on_the_spot(own_session, comm, error):
    with pytest.raises(error) as raised:
        hvd.init(comm=comm)
    assert 'kolo' in str(raised.value)
    assert not hvd.is_initialized()


def test_a_rank_that_joins_another_world_is_named(own_session, monkeypatch):
    # Job rank 0 expects rank 1 beside it; the others make a world without rank 0.
    monkeypatch.setenv('KOLO_START_TIMEOUT', '2')
    if JOB_RANK == 0:
        with pytest.raises(TimeoutError) as raised:
            hvd.init(comm=[0, 1])
        message = str(raised.value)
        if JOB_SIZE == 2:  # [0, 1] is the whole job
            assert 'rank(s) 1 did not start within 2 s' in message, message
        else:
            assert 'rank(s) 1 of the job did not join the world of ranks [0, 1] within 2 s' in message, message
        assert not hvd.is_initialized()
    else:
        hvd.init(comm=list(range(1, JOB_SIZE)))
        assert hvd.size() == JOB_SIZE - 1
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='without.rank0').item() == JOB_SIZE - 1


def test_the_whole_list_is_the_job(own_session):
    hvd.init(comm=range(JOB_SIZE))  # any iterable of integers
    assert (hvd.rank(), hvd.size()) == (JOB_RANK, JOB_SIZE)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='whole').item() == JOB_SIZE


@pytest.mark.skipif('KOLORUN' not in os.environ, reason='needs KOLORUN, the kolorun binary (set by ctest)')
def test_mpi_communicators_make_worlds():
    # Jobs of their own, from rank 0 alone: mpirun starts them (kolorun --mpi) so
    # that MPI_COMM_WORLD is the job; under plain kolorun an MPI communicator is refused.
    pytest.importorskip('mpi4py')

    def run_jobs():
        script = os.path.join(os.path.dirname(__file__), 'programs', 'mpi_comm_worlds.py')
        kolorun = os.environ['KOLORUN']
        split = subprocess.run([kolorun, '--mpi', '-np', '4', sys.executable, script, 'split'],
                               capture_output=True, text=True, timeout=120)
        assert split.returncode == 0, split.stdout + split.stderr
        assert split.stdout.count('world ok') == 4, split.stdout + split.stderr
        refused = subprocess.run([kolorun, '-np', '2', sys.executable, script, 'refused'],
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 0, refused.stdout + refused.stderr
        assert refused.stdout.count('refused ok') == 2, refused.stdout + refused.stderr
    on_rank_0(run_jobs)
