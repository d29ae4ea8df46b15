"""kolo.torch: Horovod's horovod.torch API on kolo's engine.

A Horovod script runs unchanged with `import kolo.torch as hvd`, started by
`kolorun -np 4 python3 train.py`."""

import atexit as _atexit
import os as _os
import sys as _sys

import torch as _torch  # noqa: F401  (loads libtorch before the extension)

from kolo.torch import _kolo

_kolo.set_package_dir(_os.path.dirname(_os.path.abspath(__file__)))

from kolo.torch.basics import (init, shutdown, is_initialized, size, rank, local_size, local_rank,  # noqa: E402
                               cross_size, cross_rank, is_homogeneous, start_timeline, stop_timeline,
                               mpi_built, mpi_enabled, mpi_threads_supported, gloo_built, gloo_enabled,
                               nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)
from kolo.torch.compression import Compression, PowerSGD  # noqa: E402
from kolo.torch.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: E402
                                     remove_process_set)
from kolo.torch.mpi_ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: E402
                                HorovodInternalError, PeerFailureError, ShutdownError, OperationTimeoutError,
                                MismatchError, InvalidArgumentError,
                                allreduce, allreduce_, allreduce_async, allreduce_async_,
                                grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                grouped_allreduce_async_, sparse_allreduce_async,
                                allgather, allgather_async, grouped_allgather, grouped_allgather_async,
                                broadcast, broadcast_, broadcast_async, broadcast_async_,
                                alltoall, alltoall_async,
                                reducescatter, reducescatter_async, grouped_reducescatter,
                                grouped_reducescatter_async,
                                join, barrier, poll, synchronize)
from kolo.torch.functions import (broadcast_parameters, broadcast_optimizer_state,  # noqa: E402
                                  broadcast_object, allgather_object)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: E402
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402
from kolo.torch import elastic  # noqa: E402

# Before the interpreter tears down the tensors kolo may still be using.
_atexit.register(_kolo.shutdown)


def _fail_on_uncaught(kind, value, traceback, previous=_sys.excepthook):
    """An uncaught exception ends this rank's program: after its traceback, the
    other ranks learn of it as this rank's failure (a PeerFailureError naming this
    rank and the exception), not as the orderly shutdown that the exit runs."""
    previous(kind, value, traceback)
    _kolo.fail(f'its program raised {kind.__name__}: {value}')


_sys.excepthook = _fail_on_uncaught
