"""A PyTorch training's state across resets, as horovod.torch.elastic.TorchState:
models, optimizers, learning-rate schedulers and ElasticSamplers by their own
state_dict()s, everything else as ObjectState attributes."""

import copy
import hashlib
import inspect
import pickle

import torch

from kolo.torch import _kolo
from kolo.torch.elastic.base import ObjectState, _check_attribute_name
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.functions import (_broadcast_state_from, allgather_object, broadcast_object,
                                  broadcast_parameters)
from kolo.torch.mpi_ops import rank


def _copy_into(saved, current):
    """A copy of `current` (a state_dict: tensors in dicts and lists) that reuses
    the tensors of `saved`, the previous copy, wherever they still fit: a commit
    every step then copies into memory already there instead of allocating the
    whole state anew, and costs about a memcpy."""
    if isinstance(current, torch.Tensor):
        if (isinstance(saved, torch.Tensor) and saved is not current and saved.layout == torch.strided
                and current.layout == torch.strided and saved.shape == current.shape
                and saved.dtype == current.dtype and saved.device == current.device):
            with torch.no_grad():
                saved.copy_(current)
            return saved
        return current.detach().clone()
    if isinstance(current, dict):
        previous = saved if isinstance(saved, dict) else {}
        copied = type(current)() if type(current) is not dict else {}
        for key, value in current.items():
            copied[key] = _copy_into(previous.get(key), value)
        return copied
    if isinstance(current, (list, tuple)) and type(current) in (list, tuple):
        previous = saved if isinstance(saved, (list, tuple)) and len(saved) == len(current) else [None] * len(current)
        return type(current)(_copy_into(p, c) for p, c in zip(previous, current))
    return copy.deepcopy(current)


def _digest(value):
    """One number for a state_dict: each tensor by kolo's digest of its bytes,
    type and shape, the rest (hyper-parameters, step counts) as pickled."""
    def summarized(v):
        if isinstance(v, torch.Tensor):
            return ('kolo.tensor', _kolo._elastic_digest(v))
        if isinstance(v, dict):
            return type(v), [(k, summarized(x)) for k, x in v.items()]
        if isinstance(v, (list, tuple)):
            return type(v), [summarized(x) for x in v]
        return v
    summary = pickle.dumps(summarized(value), protocol=4)
    return int.from_bytes(hashlib.blake2b(summary, digest_size=8).digest(), 'little')


def _differ_from_rank_0(digests, name):
    """For each digest, whether any rank's differs from rank 0's (the same list on
    every rank): what a sync must send. After a failure the survivors restored
    the same commit, and only joiners, or a rank a commit behind, need rank 0's."""
    return _kolo._elastic_differ_from_rank_0(digests, name)


class _StatePool:
    """Tensors by (shape, dtype), made ahead for a state to be received into
    (their values are the received ones; never read before): a worker that
    joins a running job makes them before it is taken in, so that its first
    sync receives into memory already touched instead of faulting in fresh
    pages while the others wait."""

    def __init__(self, tensors):
        self._free = {}
        for t in tensors:
            self._free.setdefault((tuple(t.shape), t.dtype), []).append(t)

    @classmethod
    def for_optimizer(cls, optimizer):
        """As many tensors of each parameter's shape as the optimizer keeps per
        parameter (momentum: 1, Adam's moments: 2), found by one step of a twin
        optimizer over a small probe parameter."""
        per_parameter = _state_tensors_per_parameter(optimizer)
        params = [p for group in optimizer.param_groups for p in group['params'] if p.requires_grad]
        return cls(_touched(torch.empty_like(p, memory_format=torch.contiguous_format))
                   for p in params for _ in range(per_parameter))

    def take(self, shape, dtype):
        free = self._free.get((tuple(shape), dtype))
        return free.pop() if free else None


def _touched(tensor):
    """The tensor, each 4 KiB page of its memory written once (faulted in)."""
    flat = tensor.view(-1)
    flat[::max(1, 4096 // tensor.element_size())] = 0
    return tensor


def _state_tensors_per_parameter(optimizer):
    """How many tensors of a parameter's shape the optimizer's step keeps for it:
    a twin of its class (the one DistributedOptimizer wraps) with the first
    group's settings steps once over a probe. 0 when the twin cannot be made."""
    probe = torch.zeros(2, 3, requires_grad=True)
    probe.grad = torch.ones(2, 3)
    kind = getattr(type(optimizer), '_kolo_wraps', type(optimizer))
    try:
        # The group's settings the constructor takes (a scheduler adds others, such as initial_lr).
        accepted = inspect.signature(kind.__init__).parameters
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        twin = kind([probe], **{k: v for k, v in group.items() if k != 'params' and k in accepted})
        twin.step()
    except Exception:  # noqa: B902 - any optimizer that cannot be twinned is only not prepared for
        return 0
    return sum(1 for v in twin.state[probe].values() if isinstance(v, torch.Tensor) and v.shape == probe.shape)


class StateHandler:
    """Saves, restores and synchronizes one attribute of a TorchState."""

    kind = object

    def __init__(self, name, value):
        self.name = name
        self.value = value
        self._keep()

    def set_value(self, value):
        """An attribute assigned anew is saved at once, as in Horovod."""
        if not isinstance(value, self.kind):
            raise TypeError(f'kolo.torch.elastic.TorchState: {self.name} holds a {type(self.value).__name__}; '
                            f'assign another one of its kind, not {value!r}')
        self.value = value
        self._keep()

    def _keep(self):
        # Local, never a collective: a rank that joins builds its state while
        # the others are elsewhere.
        self._saved = _copy_into(getattr(self, '_saved', None), self.value.state_dict())

    def save(self):
        self._keep()

    def restore(self):
        # A copy: load_state_dict may keep the tensors it is given (optimizers
        # do in recent PyTorch), and training would then change the saved ones.
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        raise NotImplementedError

    def reset(self):
        pass

    def prepare_to_join(self):
        pass

    def _name(self, what):
        return f'kolo.elastic.{self.name}.{what}'


class ModelStateHandler(StateHandler):
    kind = torch.nn.Module

    def restore(self):
        self.value.load_state_dict(self._saved)  # copies into the parameters

    def sync(self):
        items = sorted(self.value.state_dict().items())
        differ = _differ_from_rank_0([_kolo._elastic_digest(t) for _, t in items], self._name('digests'))
        broadcast_parameters({k: t for (k, t), d in zip(items, differ) if d}, root_rank=0)


class OptimizerStateHandler(StateHandler):
    """An optimizer's state_dict(), and the memory of a DistributedOptimizer's
    compressor (PowerSGD's error feedback and factors) when it has one."""

    kind = torch.optim.Optimizer

    @property
    def _compressor(self):
        return getattr(self.value, '_compressor', None)

    def _keep(self):
        super()._keep()
        if self._compressor is not None:
            self._saved_memory = _copy_into(getattr(self, '_saved_memory', None), self._compressor.memory())

    def restore(self):
        super().restore()
        if self._compressor is not None:
            self._compressor.load_memory(self._saved_memory)

    def prepare_to_join(self):
        # The tensors rank 0's state will be received into, made (and their
        # memory touched) before this worker is taken in.
        self._receive_pool = _StatePool.for_optimizer(self.value)

    def sync(self):
        pool, self._receive_pool = getattr(self, '_receive_pool', None), None  # used by this sync only
        self._sync_compressor()
        if not _differ_from_rank_0([_digest(self.value.state_dict())], self._name('digest'))[0]:
            return
        # A rank without state (one that joined) receives rank 0's into tensors
        # it allocates once, without the step broadcast_optimizer_state would
        # give it first; when rank 0 has none, every rank takes rank 0's empty state.
        empty = len(self.value.state_dict()['state']) == 0 if rank() == 0 else None
        if broadcast_object(empty, root_rank=0, name=self._name('empty')):
            state = broadcast_object(self.value.state_dict() if rank() == 0 else None, root_rank=0,
                                     name=self._name('groups'))
            if rank() != 0:
                self.value.load_state_dict(state)
        else:
            _broadcast_state_from(self.value, root_rank=0, pool=pool)

    def _sync_compressor(self):
        """Rank 0's step count and factors; each rank keeps its own error feedback
        (a joiner starts without). The step count decides which gradients are
        compressed, so it must agree."""
        compressor = self._compressor
        if compressor is None:
            return
        memory = compressor.memory()
        shared = {k: v for k, v in memory.items() if not k.startswith('local.')}
        shared = broadcast_object(shared if rank() == 0 else None, root_rank=0, name=self._name('compressor'))
        if rank() != 0:
            compressor.load_memory({**{k: v for k, v in memory.items() if k.startswith('local.')}, **shared})


class SchedulerStateHandler(StateHandler):
    kind = (getattr(torch.optim.lr_scheduler, 'LRScheduler', torch.optim.lr_scheduler._LRScheduler),
            torch.optim.lr_scheduler.ReduceLROnPlateau)

    def sync(self):
        state = broadcast_object(self.value.state_dict(), root_rank=0, name=self._name('scheduler'))
        if rank() != 0:
            self.value.load_state_dict(state)


class SamplerStateHandler(StateHandler):
    kind = ElasticSampler

    def save(self):
        # What every rank processed: after a failure the survivors go on from
        # the union, whichever rank recorded which batch.
        processed = set().union(*allgather_object(self.value.processed_indices, name=self._name('processed')))
        self.value.processed_indices = processed
        self._saved = {'epoch': self.value.epoch, 'processed_indices': set(processed)}

    def restore(self):
        self.value.load_state_dict(self._saved)  # copies the set

    def sync(self):
        state = broadcast_object(self.value.state_dict(), root_rank=0, name=self._name('sampler'))
        self.value.load_state_dict(state)

    def reset(self):
        self.value.reset()


# The first entry whose type an attribute's value is decides its handler.
_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (SchedulerStateHandler.kind, SchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = list(registry)


def _handler_for(name, value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(name, value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training: model and optimizer, and any other
    keyword arguments (more models and optimizers, schedulers, ElasticSamplers,
    plain values such as epoch and batch), each an attribute of the object.

    sync() broadcasts rank 0's state, only the parts that differ on some rank:
    models last, after whatever a custom handler's sync did to parameters."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            _check_attribute_name(type(self), name)
            handler = _handler_for(name, value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
                object.__setattr__(self, name, value)
        object.__setattr__(self, '_handlers', handlers)
        super().__init__(**plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        ordered = sorted(self._handlers.values(), key=lambda h: isinstance(h, ModelStateHandler))
        for handler in ordered:
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def prepare_to_join(self):
        for handler in self._handlers.values():
            handler.prepare_to_join()
        super().prepare_to_join()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get('_handlers')
        if handlers is not None and name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
