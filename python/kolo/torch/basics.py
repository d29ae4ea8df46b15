"""Session control and what was built, as horovod.common.basics."""


from kolo.torch import _kolo
from kolo.torch.process_sets import add_process_set


def init(comm=None, process_sets=None):
    """Joins the job kolorun (or mpirun, or Slurm) started; a job of one without them.

    A second init() is harmless; init() after shutdown() starts a new session."""
    if comm is not None:
        raise NotImplementedError('kolo.torch.init: comm (an MPI communicator or a list of ranks) is not '
                                  'supported; kolo joins every rank of the job')
    if isinstance(process_sets, str):
        raise NotImplementedError(f"kolo.torch.init: process_sets={process_sets!r}; pass a list of ProcessSets "
                                  "(kolo adds and removes sets at any time without 'dynamic')")
    _kolo.init()
    for process_set in process_sets or []:
        if getattr(process_set, 'process_set_id', None) is None:
            add_process_set(process_set)


shutdown = _kolo.shutdown
is_initialized = _kolo.is_initialized
size = _kolo.size
rank = _kolo.rank
local_size = _kolo.local_size
local_rank = _kolo.local_rank
cross_size = _kolo.cross_size
cross_rank = _kolo.cross_rank


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    from kolo.torch.functions import allgather_object
    sizes = set(allgather_object(local_size(), name='kolo.is_homogeneous'))
    return len(sizes) == 1


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
    """True when the job's collectives run over MPI (started by mpirun)."""
    return _kolo.backend() == 'mpi'


def gloo_enabled():
    """True when the job's collectives cross hosts over Gloo's TCP transport."""
    return _kolo.backend() in ('gloo', 'hierarchical')


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
