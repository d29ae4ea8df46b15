"""Broadcasts of model and optimizer state and of Python objects, as horovod.torch.functions."""

import collections.abc
import io
import pickle

try:  # as Horovod, for lambdas and closures, where it is installed (python3-cloudpickle)
    import cloudpickle as _pickler
except ImportError:
    _pickler = pickle

import torch

from kolo.torch import _kolo
from kolo.torch.mpi_ops import allgather, broadcast_, broadcast_async_, synchronize
from kolo.torch.process_sets import global_process_set, _set_id


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with root_rank's (a global rank).

    `params` is a model's state_dict(), named_parameters() or parameters(): a
    mapping, or an iterable of (name, tensor) pairs or of tensors. Names must
    agree across ranks."""
    _set_id(process_set)
    if isinstance(params, collections.abc.Mapping):
        items = sorted(params.items())
    elif isinstance(params, collections.abc.Iterable):
        items = list(params)
    else:
        raise ValueError('invalid params of type: %s' % type(params))
    handles = []
    for entry in items:
        # model.parameters() gives bare tensors: unnamed broadcasts, as in Horovod.
        name, p = entry if isinstance(entry, tuple) else (None, entry)
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError(f'parameter {name!r} is a {type(p).__name__}, not a tensor')
        op_name = None if name is None else 'broadcast_parameters.' + str(name)
        handles.append(broadcast_async_(p, root_rank, name=op_name, process_set=process_set))
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Overwrites every rank's optimizer state (hyper-parameters and per-parameter
    state such as momentum) with root_rank's (a global rank), tensors through
    broadcasts and the rest as one pickled object.

    An optimizer that has no state yet gets it first, as in Horovod: every
    parameter that requires a gradient gets a zero gradient, and the wrapped
    optimizer takes one step. `model` is accepted for Horovod's signature; the
    state's structure travels whole, so kolo needs no model to place it."""
    del model
    _set_id(process_set)
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')
    if len(optimizer.state_dict()['state']) == 0:
        _initialize_state(optimizer)
    _broadcast_state_from(optimizer, root_rank, process_set)


def _broadcast_state_from(optimizer, root_rank, process_set=global_process_set, pool=None):
    """root_rank's optimizer state into every other rank's optimizer, whatever
    state those have (none included). Each tensor is received into the rank's own
    tensor where one of its shape and type sits at the same place, else into one
    taken from `pool` (made ahead: pool.take(shape, dtype)), else into a new one;
    and installed without the copy of the whole state that load_state_dict
    makes: a rank that joins an elastic job allocates the state once."""
    state_dict = optimizer.state_dict()
    is_root = _kolo.rank() == root_rank
    # The structure (which tensors exist, hyper-parameters) comes from the root.
    tensors = []

    def strip(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return _TensorSlot(len(tensors) - 1, value.dtype, tuple(value.shape))
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(strip(v) for v in value)
        return value
    structure = broadcast_object(strip(state_dict) if is_root else None, root_rank,
                                 name='broadcast_optimizer_state.structure', process_set=process_set)
    found = list(_slots_of(structure))
    slots = [None] * len(found)
    for where, slot in found:
        own = tensors[slot.index] if is_root else _own_tensor(state_dict, where, slot)
        if own is None and pool is not None:
            own = pool.take(slot.shape, slot.dtype)
        slots[slot.index] = own if own is not None else torch.empty(slot.shape, dtype=slot.dtype)
    handles = [broadcast_async_(t, root_rank, name=f'broadcast_optimizer_state.{i}', process_set=process_set)
               for i, t in enumerate(slots)]
    for handle in handles:
        synchronize(handle)
    if not is_root:
        _install_state(optimizer, structure, found, slots)


def _slots_of(structure):
    """(where, slot) for every tensor of a stripped state_dict; `where` is
    (param key, state key) for a tensor directly in a parameter's state, else None."""
    def walk(value, where):
        if isinstance(value, _TensorSlot):
            yield where, value
        elif isinstance(value, dict):
            for v in value.values():
                yield from walk(v, None)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from walk(v, None)
    for param_key, per_param in structure['state'].items():
        if isinstance(per_param, dict):
            for key, value in per_param.items():
                yield from walk(value, (param_key, key) if isinstance(value, _TensorSlot) else None)
        else:
            yield from walk(per_param, None)
    yield from walk(structure['param_groups'], None)


def _own_tensor(state_dict, where, slot):
    """This rank's tensor at the place of the root's, when it can take the root's bytes."""
    if where is None:
        return None
    own = state_dict['state'].get(where[0], {})
    own = own.get(where[1]) if isinstance(own, dict) else None
    if (isinstance(own, torch.Tensor) and own.layout == torch.strided and own.is_contiguous()
            and own.dtype == slot.dtype and tuple(own.shape) == slot.shape and own.device.type == 'cpu'):
        return own
    return None


def _install_state(optimizer, structure, found, slots):
    """load_state_dict of the root's state without copying its tensors: the
    optimizer loads the structure with empty placeholders (hyper-parameters,
    steps as plain values, its own casts and hooks), then each placeholder is
    replaced by the received tensor. A tensor nested deeper than a parameter's
    state takes load_state_dict's own path. `found` is _slots_of(structure)."""
    if any(where is None for where, _ in found):
        optimizer.load_state_dict(_filled(structure, slots))
        return
    placeholders = [torch.empty(0, dtype=slot.dtype) for slot in slots]
    optimizer.load_state_dict(_filled(structure, placeholders))
    saved_ids = [i for group in structure['param_groups'] for i in group['params']]
    params = [p for group in optimizer.param_groups for p in group['params']]
    by_id = dict(zip(saved_ids, params))
    for (param_key, key), slot in found:
        owner = optimizer.state[by_id.get(param_key, param_key)]
        cast = owner[key]  # the placeholder as load_state_dict cast it to the parameter
        tensor = slots[slot.index]
        owner[key] = tensor if (tensor.dtype, tensor.device) == (cast.dtype, cast.device) else tensor.to(cast)


def _filled(structure, slots):
    if isinstance(structure, _TensorSlot):
        return slots[structure.index]
    if isinstance(structure, dict):
        return {k: _filled(v, slots) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return type(structure)(_filled(v, slots) for v in structure)
    return structure


def _initialize_state(optimizer):
    """Horovod's start for a fresh optimizer: zero gradients and one step of the
    wrapped optimizer (a DistributedOptimizer's own step would allreduce, and
    only this rank may be here)."""
    for group in optimizer.param_groups:
        for p in group['params']:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if hasattr(optimizer, '_parameter_names'):  # a kolo DistributedOptimizer
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


class _TensorSlot:
    """Where a tensor sits in a broadcast optimizer state."""

    def __init__(self, index, dtype, shape):
        self.index, self.dtype, self.shape = index, dtype, shape


def _to_bytes(obj):
    buffer = io.BytesIO()
    _pickler.dump(obj, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes(tensor):
    return pickle.loads(tensor.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (any picklable object) on every rank; root_rank is a global rank."""
    _set_id(process_set)
    name = _kolo.operation_name('broadcast_object', name)
    is_root = _kolo.rank() == root_rank  # a global rank, also in a set
    if is_root:
        payload = _to_bytes(obj)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=name + '.length', process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name + '.payload', process_set=process_set)
    return obj if is_root else _from_bytes(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (any picklable object), as a list in rank order."""
    _set_id(process_set)
    name = _kolo.operation_name('allgather_object', name)
    payload = _to_bytes(obj)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=name + '.length',
                        process_set=process_set)
    gathered = allgather(payload, name=name + '.payload', process_set=process_set)
    out, offset = [], 0
    for length in lengths.tolist():
        out.append(_from_bytes(gathered[offset:offset + length]))
        offset += length
    return out
