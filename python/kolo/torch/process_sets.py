"""Process sets, as horovod.common.process_sets.

Every collective takes a process_set argument. kolo runs collectives on the
global set, which holds every rank; sets of some of the ranks are refused with
a clear error until the engine negotiates per set.
"""


class ProcessSet:
    """A set of ranks that run collectives among themselves."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _is_global(self):
        return self.process_set_id == 0

    def size(self):
        from kolo.torch import _kolo
        return _kolo.size() if self._is_global() else len(self.ranks)

    def rank(self):
        from kolo.torch import _kolo
        return _kolo.rank() if self._is_global() else self.ranks.index(_kolo.rank())

    def included(self):
        from kolo.torch import _kolo
        return self._is_global() or _kolo.rank() in self.ranks

    def __repr__(self):
        return f'ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})'


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _check_process_set(process_set):
    if process_set is global_process_set or getattr(process_set, 'process_set_id', None) == 0:
        return
    raise NotImplementedError('kolo runs collectives on the global process set only; '
                              f'{process_set!r} is not supported yet')


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks)."""
    ranks = process_set.ranks if isinstance(process_set, ProcessSet) else list(process_set)
    from kolo.torch import _kolo
    if sorted(ranks) == list(range(_kolo.size())):
        return global_process_set
    raise NotImplementedError('kolo runs collectives on the global process set only; '
                              f'a set of ranks {sorted(ranks)} is not supported yet')


def remove_process_set(process_set):
    """Horovod's remove_process_set: the global set cannot be removed."""
    if process_set is global_process_set:
        raise ValueError('the global process set cannot be removed')
    return False
