"""The collectives of horovod.torch, on kolo's engine.

Same names, arguments, defaults and results as Horovod 0.28's horovod.torch.mpi_ops.
Tensors reach kolo without a copy; an operation with a tensor that requires grad
runs as an autograd function whose backward is the collective Horovod uses.
"""

import torch

from kolo.torch import _kolo
from kolo.torch.compression import Compression
from kolo.torch.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: F401
                                     remove_process_set, _set_id)
# Horovod's mpi_ops exports the session's functions too (`from horovod.torch.mpi_ops import size`).
from kolo.torch.basics import (init, shutdown, is_initialized, size, rank, local_size, local_rank,  # noqa: F401
                               cross_size, cross_rank, is_homogeneous, start_timeline, stop_timeline,
                               mpi_built, mpi_enabled, mpi_threads_supported, gloo_built, gloo_enabled,
                               nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)

# Horovod's values of its op constants.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

HorovodInternalError = _kolo.HorovodInternalError
PeerFailureError = _kolo.PeerFailureError
ShutdownError = _kolo.ShutdownError
OperationTimeoutError = _kolo.OperationTimeoutError
MismatchError = _kolo.MismatchError
InvalidArgumentError = _kolo.InvalidArgumentError


def _resolve_op(op, average):
    if op is not None and average is not None:
        raise ValueError('The op parameter supersedes average. Please provide only one of them.')
    if op is None:
        return Average if average is None or average else Sum
    return op


def _needs_grad(tensor):
    return tensor.requires_grad and torch.is_grad_enabled()


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _contiguous_copy(tensor):
    return torch.empty_like(tensor, memory_format=torch.contiguous_format).copy_(tensor.detach())


class _StagedInPlace:
    """The handle of an in-place operation on a non-contiguous tensor: kolo works
    on a contiguous copy, written back into the tensor when waited for."""

    def __init__(self, handle, target, staging):
        self._handle, self._target, self._staging = handle, target, staging
        self._written = False

    def poll(self):
        return self._handle.poll()

    def wait(self):
        self._handle.wait()
        if not self._written:
            with torch.no_grad():
                self._target.copy_(self._staging)
            self._written = True
        return self._target


def _in_place_async(tensor, start):
    """Runs start(contiguous_tensor) -> handle on `tensor` itself, or on a staged copy."""
    if tensor.is_contiguous():
        return start(tensor)
    staging = _contiguous_copy(tensor)
    return _StagedInPlace(start(staging), tensor, staging)


def _in_place(tensor, run):
    """Runs run(contiguous_tensor) in place of `tensor`, staging a non-contiguous one."""
    if tensor.is_contiguous():
        run(tensor)
        return tensor
    staging = _contiguous_copy(tensor)
    run(staging)
    with torch.no_grad():
        tensor.copy_(staging)
    return tensor


def _grad_name(name, suffix='.grad'):
    """The name of a backward pass's collective: the forward's name and a suffix,
    or None (a name from the call site) when the forward had none."""
    return None if name is None else name + suffix


def poll(handle):
    """True when the operation of `handle` has finished; then synchronize() returns at once."""
    return handle.poll()


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result; rethrows its error."""
    return handle.wait()


# ---- allreduce ------------------------------------------------------------------------


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale_factor, postscale_factor, process_set
        ctx.grad_name = _grad_name(name)
        return _kolo.allreduce(_contiguous(tensor.detach()), False, name, op, prescale_factor, postscale_factor,
                               _set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, name=ctx.grad_name, op=ctx.op, prescale_factor=ctx.prescale,
                         postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts averaging (or op-reducing) `tensor` over all ranks into a new tensor; returns a handle."""
    op = _resolve_op(op, average)
    return _kolo.allreduce_async(_contiguous(tensor.detach()), False, name, op, prescale_factor, postscale_factor,
                                 _set_id(process_set))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Averages (or op-reduces) `tensor` over all ranks into a new tensor; differentiable."""
    op = _resolve_op(op, average)
    if compression is Compression.none and not _needs_grad(tensor):
        # The common case without the compressor's two calls: a few tenths of a
        # microsecond in an 8-byte allreduce of about two.
        return _kolo.allreduce(_contiguous(tensor), False, name, op, prescale_factor, postscale_factor,
                               _set_id(process_set))
    compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        reduced = _kolo.allreduce(_contiguous(compressed), False, name, op, prescale_factor, postscale_factor,
                                  _set_id(process_set))
    return compression.decompress(reduced, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing `tensor` in place; returns a handle."""
    op = _resolve_op(op, average)
    set_id = _set_id(process_set)
    return _in_place_async(tensor, lambda t: _kolo.allreduce_async(t, True, name, op, prescale_factor,
                                                                   postscale_factor, set_id))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    op = _resolve_op(op, average)
    return _in_place(tensor, lambda t: _kolo.allreduce(t, True, name, op, prescale_factor, postscale_factor,
                                                       _set_id(process_set)))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale_factor, postscale_factor, process_set
        ctx.grad_name = _grad_name(name)
        copies = [_contiguous_copy(t) for t in tensors]
        return tuple(_kolo.grouped_allreduce_async(copies, name, op, prescale_factor, postscale_factor,
                                                   _set_id(process_set)).wait())

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), name=ctx.grad_name, op=ctx.op, prescale_factor=ctx.prescale,
                                  postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return (None, None, None, None, None, *grads)


class _GroupHandle:
    """The handle of a grouped operation made of one operation per tensor.
    Calling it waits, as a Horovod sparse allreduce's handle does."""

    def __init__(self, handles, finish=list):
        self._handles, self._finish = handles, finish
        self._result = None
        self._done = False

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        if not self._done:
            self._result = self._finish([h.wait() for h in self._handles])
            self._done = True
        return self._result

    __call__ = wait


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts reducing the tensors as one unit (none before all are ready everywhere) into new tensors."""
    op = _resolve_op(op, average)
    copies = [_contiguous_copy(t) for t in tensors]
    return _kolo.grouped_allreduce_async(copies, name, op, prescale_factor, postscale_factor,
                                         _set_id(process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces the tensors as one unit into new tensors; differentiable."""
    op = _resolve_op(op, average)
    compressed = [compression.compress(t) for t in tensors]
    inputs = [c for c, _ in compressed]
    if any(_needs_grad(t) for t in inputs):
        reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, *inputs)
    else:
        copies = [_contiguous_copy(t) for t in inputs]
        reduced = _kolo.grouped_allreduce_async(copies, name, op, prescale_factor, postscale_factor,
                                                _set_id(process_set)).wait()
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing the tensors in place as one unit; returns a handle."""
    op = _resolve_op(op, average)
    staged = [t if t.is_contiguous() else _contiguous_copy(t) for t in tensors]
    handle = _kolo.grouped_allreduce_async(staged, name, op, prescale_factor,
                                           postscale_factor, _set_id(process_set))
    if all(s is t for s, t in zip(staged, tensors)):
        return handle

    def write_back(_):
        with torch.no_grad():
            for s, t in zip(staged, tensors):
                if s is not t:
                    t.copy_(s)
        return list(tensors)
    return _GroupHandle([handle], lambda results: write_back(results[0]))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces the tensors in place as one unit and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse COO tensor: its indices and values are allgathered.
    The handle is callable, as Horovod's: handle() (or synchronize(handle)) returns
    the gathered entries as one uncoalesced sparse tensor, its values divided by
    the set's size for Average first."""
    if op not in (Average, Sum):
        raise InvalidArgumentError('sparse_allreduce_async supports op=Average or op=Sum')
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = _kolo.allgather_async(t.indices().t().contiguous(), name + '.indices' if name else None,
                                    _set_id(process_set))
    values = _kolo.allgather_async(t.values().contiguous(), name + '.values' if name else None,
                                   _set_id(process_set))

    def finish(results):
        gathered_indices, gathered_values = results
        if op == Average:
            gathered_values = gathered_values / process_set.size()
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, t.size())
    return _GroupHandle([indices, values], finish)


# ---- allgather ------------------------------------------------------------------------


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.process_set = tensor.shape[0], process_set
        ctx.grad_name = _grad_name(name)
        return _kolo.allgather(_contiguous(tensor.detach()), name, _set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, name=ctx.grad_name, op=Average, process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), name=_grad_name(ctx.grad_name, '.dims'),
                         process_set=ctx.process_set)
        offset = int(dims[:ctx.process_set.rank()].sum().item())
        return grad.narrow(0, offset, ctx.dim), None, None


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's tensor along the first dimension; returns a handle."""
    return _kolo.allgather_async(_contiguous(tensor.detach()), name, _set_id(process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along the first dimension (which may differ); differentiable."""
    if _needs_grad(tensor):
        return _Allgather.apply(tensor, name, process_set)
    return _kolo.allgather(_contiguous(tensor), name, _set_id(process_set))


def _member_names(op, name, count):
    base = _kolo.operation_name(op, name)
    return [f'{base}.{i}' for i in range(count)]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of each tensor; the handle's result is the list of outputs."""
    names = _member_names('grouped_allgather', name, len(tensors))
    return _GroupHandle([_kolo.allgather_async(_contiguous(t.detach()), n, _set_id(process_set)) for t,
                        n in zip(tensors, names)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """An allgather of each tensor; differentiable."""
    if any(_needs_grad(t) for t in tensors):
        names = _member_names('grouped_allgather', name, len(tensors))
        return [_Allgather.apply(t, n, process_set) for t, n in zip(tensors, names)]
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---- broadcast ------------------------------------------------------------------------


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        ctx.grad_name = _grad_name(name)
        copy = _contiguous_copy(tensor)
        _kolo.broadcast(copy, root_rank, name, _set_id(process_set))
        return copy

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, name=ctx.grad_name, op=Average, process_set=ctx.process_set)
        if _kolo.rank() != ctx.root_rank:  # root_rank is a global rank, also in a set
            grad = grad * 0
        return grad, None, None, None


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's tensor to every rank, into a new tensor; returns a handle."""
    return _kolo.broadcast_async(_contiguous_copy(tensor), root_rank, name, _set_id(process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank, as a new tensor; differentiable."""
    if _needs_grad(tensor):
        return _Broadcast.apply(tensor, root_rank, name, process_set)
    copy = _contiguous_copy(tensor)
    _kolo.broadcast(copy, root_rank, name, _set_id(process_set))
    return copy


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root_rank's; returns a handle."""
    return _in_place_async(tensor, lambda t: _kolo.broadcast_async(t, root_rank, name,
                                                                   _set_id(process_set)))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's and returns it."""
    return _in_place(tensor, lambda t: _kolo.broadcast(t, root_rank, name, _set_id(process_set)))


# ---- alltoall -------------------------------------------------------------------------


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        ctx.grad_name = _grad_name(name)
        output, received = _kolo.alltoall(_contiguous(tensor.detach()), splits, name,
                                          _set_id(process_set))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        grad, _ = alltoall(grad_output, splits=ctx.received, name=ctx.grad_name, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[j] first-dimension rows to rank j; the handle's result
    is (output, received_splits)."""
    return _kolo.alltoall_async(_contiguous(tensor.detach()), _splits_list(splits), name,
                                _set_id(process_set))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows to rank j (even splits when None) and returns what every
    rank sent here in rank order, and, when splits were given, how many rows came
    from each rank; differentiable."""
    if _needs_grad(tensor):
        output, received = _Alltoall.apply(tensor, _splits_list(splits), name, process_set)
    else:
        output, received = _kolo.alltoall(_contiguous(tensor), _splits_list(splits), name,
                                          _set_id(process_set))
    return output if splits is None else (output, received)


# ---- reducescatter --------------------------------------------------------------------


def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise InvalidArgumentError('reducescatter supports op=Average or op=Sum')


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.process_set = op, process_set
        ctx.factor = prescale_factor * postscale_factor
        ctx.grad_name = _grad_name(name)
        return _kolo.reducescatter(_contiguous(tensor.detach()), op, name, prescale_factor, postscale_factor,
                                   _set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: every rank's upstream gradient gathered, times the
        # set's size for Sum (as it is for Average), times the scale factors.
        grad = allgather(grad_output, name=ctx.grad_name, process_set=ctx.process_set)
        factor = ctx.factor * (ctx.process_set.size() if ctx.op == Sum else 1)
        return (grad if factor == 1 else grad * factor), None, None, None, None, None


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing `tensor` over all ranks, this rank keeping its block of the first dimension."""
    _check_reducescatter_op(op)
    return _kolo.reducescatter_async(_contiguous(tensor.detach()), op, name, prescale_factor, postscale_factor,
                                     _set_id(process_set))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over all ranks and returns this rank's block of the first
    dimension (the first ranks get one row more when it does not divide); differentiable."""
    _check_reducescatter_op(op)
    compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        output = _Reducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        output = _kolo.reducescatter(_contiguous(compressed), op, name, prescale_factor, postscale_factor,
                                     _set_id(process_set))
    return compression.decompress(output, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of each tensor; the handle's result is the list of outputs."""
    _check_reducescatter_op(op)
    names = _member_names('grouped_reducescatter', name, len(tensors))
    return _GroupHandle([_kolo.reducescatter_async(_contiguous(t.detach()), op, n, prescale_factor,
                                                   postscale_factor, _set_id(process_set))
                         for t, n in zip(tensors, names)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """A reducescatter of each tensor; differentiable."""
    _check_reducescatter_op(op)
    names = _member_names('grouped_reducescatter', name, len(tensors))
    return [reducescatter(t, name=n, compression=compression, op=op, process_set=process_set,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor)
            for t, n in zip(tensors, names)]


# ---- join and barrier -----------------------------------------------------------------


def join(device=-1):
    """Declares that this rank has no more data: until every rank has joined, the
    others' allreduces go on with zeros in its place. Returns the last rank to join."""
    return _kolo.join()


def barrier(process_set=global_process_set):
    """Returns once every rank has entered the barrier."""
    _kolo.barrier(None, _set_id(process_set))
