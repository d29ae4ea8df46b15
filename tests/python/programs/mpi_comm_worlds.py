"""init(comm=<mpi4py communicator>), run by test_init_comm.py.

split (under kolorun --mpi -np 4): MPI_COMM_WORLD split into {0, 1} and {2, 3},
each numbered backwards, as Horovod's own example; then the whole world.
refused (under plain kolorun): MPI_COMM_WORLD is not the job, so an MPI
communicator is refused with a message that says how to start the job."""

import atexit
import os
import shutil
import sys
import tempfile

if sys.argv[1] != 'split':
    # Each rank here initializes MPI as a singleton, and Open MPI's singletons
    # that start at once race to create the same session directory under /tmp
    # ("mkdir ... File exists"): each gets a directory of its own, removed at
    # exit after MPI is finalized (atexit runs handlers in reverse order).
    session_base = tempfile.mkdtemp(prefix='kolo-ompi-')
    atexit.register(shutil.rmtree, session_base, True)
    os.environ['OMPI_MCA_orte_tmpdir_base'] = session_base

from mpi4py import MPI
import torch

import kolo.torch as hvd

world = MPI.COMM_WORLD
if sys.argv[1] == 'split':
    half = world.Split(color=0 if world.rank < 2 else 1, key=-world.rank)
    hvd.init(comm=half)
    assert (hvd.rank(), hvd.size()) == (half.rank, 2), (hvd.rank(), half.rank)
    total = hvd.allreduce(torch.tensor([float(world.rank)]), op=hvd.Sum, name='half').item()
    assert total == (1.0 if world.rank < 2 else 5.0), total
    hvd.shutdown()
    hvd.init(comm=world)
    assert (hvd.rank(), hvd.size()) == (world.rank, world.size)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='whole').item() == world.size
    hvd.shutdown()
    print('world ok', flush=True)
else:
    try:
        hvd.init(comm=world)
    except ValueError as e:
        assert 'start the job with kolorun --mpi or mpirun' in str(e), e
        print('refused ok', flush=True)
