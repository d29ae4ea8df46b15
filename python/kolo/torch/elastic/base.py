"""State that survives a reset: the base class and plain Python attributes, as
horovod.common.elastic's State and ObjectState."""

import collections.abc
import copy

from kolo.torch import _kolo
from kolo.torch.elastic.exceptions import HostsUpdatedInterrupt
from kolo.torch.functions import broadcast_object
from kolo.torch.mpi_ops import rank


def _broadcast_from_rank_0(obj):
    # Named: an unnamed broadcast is named after its call site and how often it
    # ran there, which a rank that joined later has counted differently.
    return broadcast_object(obj, root_rank=0, name='kolo.elastic.object_state')


def _copy(name, value):
    try:
        return copy.deepcopy(value)
    except Exception as e:  # noqa: B902 - any failure to copy, named with its attribute
        raise TypeError(f'kolo.torch.elastic: cannot copy the state attribute {name!r} '
                        f'({type(e).__name__}: {e}); keep only copyable values in a State') from e


class State:
    """What a training loop keeps across resets: save() it with commit(), and
    run() restores and synchronizes it when the job's membership changes.

    bcast_object(obj) broadcasts obj from rank 0 and get_rank() returns this
    rank; both default to kolo.torch's."""

    def __init__(self, bcast_object=None, get_rank=None):
        for what, fn in (('bcast_object', bcast_object), ('get_rank', get_rank)):
            if fn is not None and not callable(fn):
                raise TypeError(f'kolo.torch.elastic.State: {what} must be a function, not {fn!r}')
        self._bcast_object = bcast_object or _broadcast_from_rank_0
        self._rank = get_rank or rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions that run (without arguments, in order) after every reset,
        before the state is synchronized: to scale the learning rate to the new
        size(), for example."""
        if callable(callbacks) or not isinstance(callbacks, collections.abc.Iterable):
            raise TypeError('kolo.torch.elastic: register_reset_callbacks takes a list of functions, '
                            f'not {callbacks!r}')
        callbacks = list(callbacks)
        for callback in callbacks:
            if not callable(callback):
                raise TypeError(f'kolo.torch.elastic: a reset callback must be a function, not {callback!r}')
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """What run() calls after a reset: reset() then the registered callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state as the point a failure rolls back to, then checks for
        a membership change (which raises HostsUpdatedInterrupt on every rank)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt when workers joined the job. Every rank
        gets the same answer at the same call, and the check runs no
        collective; outside an elastic job it never raises."""
        hosts_updated = getattr(_kolo, '_elastic_hosts_updated', None)
        if hosts_updated is not None and hosts_updated():
            raise HostsUpdatedInterrupt(False)

    def save(self):
        """Keeps a copy of the state in memory."""
        raise NotImplementedError(f'{type(self).__name__} must define save()')

    def restore(self):
        """Puts back the copy save() kept, undoing what came after it."""
        raise NotImplementedError(f'{type(self).__name__} must define restore()')

    def sync(self):
        """Gives every rank rank 0's state."""
        raise NotImplementedError(f'{type(self).__name__} must define sync()')

    def reset(self):
        """Adapts the state to the new membership (size() and rank())."""

    def prepare_to_join(self):
        """Runs on a worker that joins a running job, before it is taken in:
        allocates what its first sync will fill, while the others still train
        (they wait for it once it is in). Nothing by default."""


class ObjectState(State):
    """State made of the keyword arguments, each an attribute of the object
    (state.epoch, state.batch); any value that copy.deepcopy and pickle take."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        for name in kwargs:
            _check_attribute_name(type(self), name)
        self._saved_state = {name: _copy(name, value) for name, value in kwargs.items()}
        for name, value in kwargs.items():
            setattr(self, name, value)
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: _copy(name, getattr(self, name)) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        # Copies, so that changing an attribute in place leaves the saved value alone.
        for name, value in self._saved_state.items():
            setattr(self, name, _copy(name, value))


def _check_attribute_name(cls, name):
    if name.startswith('_') or hasattr(cls, name):
        raise ValueError(f'kolo.torch.elastic.{cls.__name__}: {name!r} cannot name a state attribute '
                         '(it starts with _ or is a method of the state)')
