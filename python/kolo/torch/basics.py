"""Session control and what was built, as horovod.common.basics."""


import operator
import os

from kolo.torch import _kolo
from kolo.torch.process_sets import add_process_set


def init(comm=None, process_sets=None):
    """Joins the job kolorun (or mpirun, or Slurm) started; a job of one without them.

    comm, as in Horovod, makes the world of some of the job's ranks instead: a
    list of ranks (rank i of the world is job rank comm[i]), or an mpi4py
    communicator in a job mpirun (or kolorun --mpi) started, whose ranks are the
    world's. Every member passes the same ranks; other ranks may form their own
    worlds at the same time.

    A second init() is harmless; init() after shutdown() starts a new session.
    process_sets='dynamic' is accepted as in Horovod: kolo adds and removes sets
    at any time anyway."""
    if isinstance(process_sets, str):
        if process_sets.lower() != 'dynamic':
            raise ValueError(f"kolo.torch.init: process_sets={process_sets!r}; pass a list of ProcessSets "
                             "or 'dynamic'")
        process_sets = None
    fresh = not _kolo.is_initialized()
    # An empty list is the whole job, as in Horovod.
    _kolo.init(None if comm is None or _is_empty_list(comm) else _world_ranks(comm))
    if fresh:
        _session['homogeneous'] = _all_hosts_alike()
    for process_set in process_sets or []:
        if getattr(process_set, 'process_set_id', None) is None:
            add_process_set(process_set)


def _elastic_reset():
    """Leaves this session and joins the elastic job's newest membership (in an
    elastic job; elsewhere shutdown() then init()), then learns what init() does."""
    _kolo._elastic_reset()
    _session['homogeneous'] = _all_hosts_alike()


# What init() learned for the session's local queries.
_session = {'homogeneous': None}


def _is_empty_list(comm):
    return isinstance(comm, (list, tuple)) and len(comm) == 0


def _all_hosts_alike():
    """Whether every host runs as many ranks: what the engine knows (an elastic
    job's membership, a world's hosts), else one small allgather, in init(),
    which every rank calls, so that is_homogeneous() is a local query. An
    elastic job runs no collective here: a joining worker's init() returns
    before the job takes it in, and its answer is its plan's until then."""
    if _kolo._hosts_alike() is not None:
        return None  # is_homogeneous() asks the engine
    from kolo.torch.functions import allgather_object
    return len(set(allgather_object(_kolo.local_size(), name='kolo.is_homogeneous'))) == 1


def _world_ranks(comm):
    """The job ranks of the world init(comm=...) asks for."""
    if hasattr(comm, 'Get_group') and hasattr(comm, 'Get_size'):
        return _mpi_ranks(comm)
    if isinstance(comm, (str, bytes)) or not hasattr(comm, '__iter__'):
        raise TypeError(f'kolo.torch.init: comm must be a list of ranks or an mpi4py communicator, not {comm!r}')
    ranks = []
    for r in comm:
        try:
            if isinstance(r, bool):
                raise TypeError
            ranks.append(operator.index(r))  # ints, numpy's too
        except TypeError:
            raise TypeError(f'kolo.torch.init: comm lists ranks (ints), not {r!r}') from None
    return ranks


def _mpi_ranks(comm):
    """An mpi4py communicator's members as ranks of MPI_COMM_WORLD, which are the
    job's ranks when mpirun (or kolorun --mpi) started the job."""
    from mpi4py import MPI
    if comm == MPI.COMM_NULL:
        raise ValueError('kolo.torch.init: comm is MPI.COMM_NULL: this process is in no world')
    world = MPI.COMM_WORLD
    job_rank, job_size = os.environ.get('KOLO_RANK'), os.environ.get('KOLO_SIZE')
    if job_size is not None and (int(job_size) != world.Get_size() or int(job_rank) != world.Get_rank()):
        raise ValueError(f'kolo.torch.init: comm is an MPI communicator, but MPI_COMM_WORLD (rank '
                         f'{world.Get_rank()} of {world.Get_size()}) is not this job (rank {job_rank} of '
                         f'{job_size}): start the job with kolorun --mpi or mpirun to pass MPI communicators')
    group, world_group = comm.Get_group(), world.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(group, list(range(comm.Get_size())), world_group))
    finally:
        group.Free()
        world_group.Free()


shutdown = _kolo.shutdown
is_initialized = _kolo.is_initialized
size = _kolo.size
rank = _kolo.rank
local_size = _kolo.local_size
local_rank = _kolo.local_rank
cross_size = _kolo.cross_size
cross_rank = _kolo.cross_rank


def is_homogeneous():
    """True when every host runs the same number of ranks (a local query)."""
    if not _kolo.is_initialized():
        raise ValueError('Horovod has not been initialized; use hvd.init().')
    known = _kolo._hosts_alike()
    return known if known is not None else _session['homogeneous']


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome trace of every operation to file_path (rank 0's,
    or every rank's with KOLO_TIMELINE_ALL_RANKS=1). kolo marks no cycles."""
    _kolo.start_timeline(str(file_path))


def stop_timeline():
    """Closes the timeline start_timeline() began."""
    _kolo.stop_timeline()


def mpi_built():
    return bool(_kolo.built()['mpi'])


def gloo_built():
    return bool(_kolo.built()['gloo'])


def mpi_enabled():
    """True when the job's collectives run over MPI (started by mpirun); False
    before init()."""
    return _kolo.is_initialized() and _kolo.backend() == 'mpi'


def gloo_enabled():
    """True when the job's collectives run over Gloo's TCP transport (KOLO_BACKEND=gloo);
    across hosts kolo otherwise takes its own TCP communicator. False before init()."""
    if not _kolo.is_initialized():
        return False
    backend = _kolo.backend()
    return backend == 'gloo' or (backend == 'hierarchical' and os.environ.get('KOLO_BACKEND') == 'gloo')


def mpi_threads_supported():
    """kolo calls MPI from its own thread with MPI_THREAD_MULTIPLE."""
    if not mpi_enabled():
        raise ValueError('MPI is not enabled in this job (kolo runs on %s)' % _kolo.backend())
    return True


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False
