"""Process sets, as horovod.common.process_sets: groups of ranks that run
collectives among themselves. Every collective takes process_set=; the default
is the global set of every rank. Disjoint sets run their collectives
concurrently, each on its own engine. A broadcast's root_rank is a global rank,
as in Horovod and torch.distributed, and must be a member of the set."""

from kolo.torch import _kolo


class ProcessSet:
    """A set of job ranks. It takes part in collectives once add_process_set()
    (or init(process_sets=[...])) has registered it on every rank."""

    def __init__(self, ranks):
        self._ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _global(self):
        return self.process_set_id == 0

    @property
    def ranks(self):
        """The set's ranks, ascending (every rank for the global set, as in Horovod)."""
        return list(range(_kolo.size())) if self._global() else self._ranks

    def size(self):
        """The number of ranks in the set."""
        return _kolo.size() if self._global() else len(self.ranks)

    def rank(self):
        """This rank's index in the set, or -1 when it is not a member."""
        if self._global():
            return _kolo.rank()
        me = _kolo.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """True when this rank is a member."""
        return self._global() or _kolo.rank() in self.ranks

    def __repr__(self):
        ranks = 'every rank' if self._global() else self.ranks
        return f'ProcessSet(process_set_id={self.process_set_id}, ranks={ranks})'


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _set_id(process_set):
    """The engine's id of a registered set."""
    set_id = getattr(process_set, 'process_set_id', None)
    if set_id is None:
        raise ValueError(f'{process_set!r} is not a registered process set: call hvd.add_process_set() '
                         'with it on every rank first')
    return set_id


def add_process_set(process_set):
    """Registers a set (a ProcessSet or a list of ranks) and returns it. Collective:
    every rank calls it with the same ranks, in the same order of calls."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f'{process_set!r} is already registered')
    process_set.process_set_id = _kolo.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Unregisters a set (collective, as add_process_set); True when it was
    removed, False (as in Horovod) for the global set or one never registered."""
    set_id = getattr(process_set, 'process_set_id', None)
    if set_id is None or set_id == 0:
        return False
    _kolo.remove_process_set(set_id)
    process_set.process_set_id = None
    return True
