"""The elastic training loop, as horovod.torch.elastic.run: retries the training
function after every reset until it returns."""

import functools

from kolo.torch import _kolo
from kolo.torch import basics
from kolo.torch.elastic.base import State
from kolo.torch.elastic.exceptions import HostsUpdatedInterrupt
from kolo.torch.mpi_ops import HorovodInternalError, InvalidArgumentError, MismatchError

# Errors of the program, not of the job: the session goes on after them, and a
# retry would meet them again.
_NOT_RETRIED = (InvalidArgumentError, MismatchError)


def run(func):
    """Decorates func(state, *args, **kwargs), the training, so that it survives
    changes of the job's membership and failures of ranks.

    Each call first gives every rank rank 0's state (state.sync()), then runs
    func. When func raises a HorovodInternalError (a rank failed), every rank
    restores its last commit, resets to the job's new membership and calls func
    again; a HostsUpdatedInterrupt (from state.commit()) resets without
    restoring. A worker that joins a running job is taken in here (or at its
    first collective, if that comes first): its init() returned with its planned
    rank and size, and the others trained on while it built its model. Before
    it asks to be taken in, state.prepare_to_join() makes room for what the
    sync will bring, so that the others do not wait while it allocates. When its
    place differs from the plan, state.on_reset() runs before the sync."""
    if not callable(func):
        raise TypeError(f'kolo.torch.elastic.run decorates a function, not {func!r}')

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise TypeError(f'{getattr(func, "__name__", "the function")} decorated with kolo.torch.elastic.run '
                            f'takes a kolo.torch.elastic State first, not {type(state).__name__}')
        awaits_admission = getattr(_kolo, '_elastic_awaits_admission', None)
        if awaits_admission is not None and awaits_admission():
            state.prepare_to_join()  # while the others still train
        admit = getattr(_kolo, '_elastic_admit', None)
        if admit is not None and admit():
            state.on_reset()  # a new worker whose place is not the planned one
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except _NOT_RETRIED:
                raise
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _reset()
            wrapper.reset_count += 1
            state.on_reset()

    wrapper.reset_count = 0  # resets over every call, for logs
    return wrapper


def _reset():
    """Ends this session and joins the job's newest membership, which re-numbers
    the ranks; shutdown() then init() where the extension has no elastic reset."""
    if getattr(_kolo, '_elastic_reset', None) is None:
        basics.shutdown()
        basics.init()
    else:
        basics._elastic_reset()  # the engine's reset, then what init() learns
