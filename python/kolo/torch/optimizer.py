"""DistributedOptimizer, as horovod.torch.optimizer: gradients are averaged across
ranks by allreduces that start during backward, as each gradient is ready."""

import contextlib
import warnings

import torch

from kolo.torch import _kolo
from kolo.torch.compression import Compression, PowerSGD
from kolo.torch.gradient_buckets import GradientBuckets
from kolo.torch.mpi_ops import (Average, Adasum, Max, Min, Product, Sum, InvalidArgumentError, allreduce_async_,
                                grouped_allreduce_async_, sparse_allreduce_async, synchronize)
from kolo.torch.process_sets import global_process_set, _set_id

# The handle of a gradient the compressor took: its finish() writes the result.
_COMPRESSED = object()


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class (see DistributedOptimizer)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        _set_id(process_set)
        if op == Adasum:
            raise InvalidArgumentError('kolo does not implement Adasum; use op=Average or op=Sum')
        if op not in (Average, Sum, Min, Max, Product):
            raise ValueError(f'DistributedOptimizer: unknown op {op!r}')
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError('gradient_predivide_factor not supported with op != Average')
        # A compressor with memory (PowerSGD) takes some gradients; the rest travel as they are.
        self._compressor = compression if isinstance(compression, PowerSGD) else None
        if self._compressor is not None:
            compression = Compression.none
        self._compression = compression
        self._op = op
        self._gradient_predivide_factor = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        # Horovod's public names for them.
        self.compression = self._compressor or compression
        self.op, self.gradient_predivide_factor = op, gradient_predivide_factor
        self.sparse_as_dense, self.process_set = sparse_as_dense, process_set

        all_params = [p for group in self.param_groups for p in group['params']]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f'allreduce.noname.{i}', p) for i, p in enumerate(all_params)]
        if any(not isinstance(entry, tuple) or len(entry) != 2 for entry in named_parameters):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')
        names = [name for name, _ in named_parameters]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError('Parameter names in named_parameters must be unique. '
                             'Found duplicates: %s' % ', '.join(duplicates))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [p for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError('named_parameters was specified, but one or more model parameters were not named. '
                             'Python object ids: %s' % ', '.join(str(id(p)) for p in unnamed))
        self._parameter_names = {p: name for name, p in named_parameters}

        if groups is not None and not (isinstance(groups, int) or isinstance(groups, list)):
            raise ValueError('groups should be an int or a list of lists of parameters')
        self._group_members = self._make_groups(groups, all_params)
        self._agreed_session = None
        if self._compressor is not None:
            self._bind_compressor(process_set, names)
        self._groups = {p: index for index, members in enumerate(self._group_members) for p in members}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._group_ready = {}    # group index -> how many members' hooks ran
        self._group_handles = {}  # group index -> (handle, [(compressed, ctx) per member])
        # Gradients in shareable buckets pay off where the transport works in place
        # of them (shared memory) and only when they travel as they are.
        self._buckets = None
        if (process_set.size() > 1 and compression is Compression.none and self._compressor is None
                and _kolo.works_in_shared_buffers()):
            self._buckets = GradientBuckets([p for p in all_params if p.requires_grad])
        if process_set.size() > 1 and process_set.included():
            self._register_hooks()

    def _bind_compressor(self, process_set, names):
        if self._op not in (Average, Sum):
            raise ValueError('DistributedOptimizer: compression=PowerSGD reduces with op=Average or op=Sum')
        if self._gradient_predivide_factor != 1.0:
            raise ValueError('DistributedOptimizer: gradient_predivide_factor does not apply with compression=PowerSGD')
        if self._group_members:
            raise ValueError('DistributedOptimizer: groups do not combine with compression=PowerSGD, which sends '
                             'the factors of all its gradients in a few fused allreduces')
        # Named after the optimizer's first parameter: two optimizers' factors never meet.
        prefix = 'kolo.grad.' + (min(names) if names else 'noname')
        self._compressor._impl.bind(average=self._op == Average, process_set=process_set.process_set_id,
                                    name_prefix=prefix)

    def _agreed(self):
        """Whether this session's ranks agreed on the compressor (or there is none):
        until then synchronize() starts every gradient, after checking."""
        return self._compressor is None or self._agreed_session == _kolo.session_number()

    # ---- groups ---------------------------------------------------------------------

    def _make_groups(self, groups, all_params):
        """The groups of parameters reduced as one unit, as tuples."""
        if groups is None or groups == 0:
            return []
        if isinstance(groups, int):
            trainable = [p for p in all_params if p.requires_grad]
            count = min(groups, len(trainable)) or 1
            size = -(-len(trainable) // count)
            lists = [trainable[i:i + size] for i in range(0, len(trainable), size)]
        else:
            lists = groups
        seen = set()
        for group in lists:
            for p in group:
                if p in seen:
                    raise ValueError('a parameter appears in more than one group')
                seen.add(p)
        return [tuple(group) for group in lists if group]

    # ---- hooks ----------------------------------------------------------------------

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group['params']:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # The gradient accumulator of p: its hook runs once p.grad holds
                    # this backward pass's gradient.
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _scales(self):
        if self._op == Average:
            return 1.0 / self._gradient_predivide_factor, self._gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self._sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self._op, process_set=self._process_set), 'sparse'
            # A dense copy travels; the result goes back into the sparse gradient
            # (_write_gradient), which stays sparse for optimizers such as SparseAdam.
            tensor = tensor.to_dense()
        elif self._compressor is not None and self._compressor._impl.takes(tensor):
            self._compressor._impl.add(name, tensor)
            return _COMPRESSED, None
        elif self._buckets is not None:
            self._buckets.place(p)
            tensor = p.grad
        compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scales()
        handle = allreduce_async_(compressed, name=name, op=self._op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self._process_set)
        return handle, (compressed, ctx)

    def _start_group(self, index):
        members = [p for p in self._group_members[index] if p.grad is not None]
        self._group_handles[index] = (members, *self._grouped_allreduce_async(members))
        for p in members:
            self._handles.pop(p, None)

    def _grouped_allreduce_async(self, params):
        tensors, ctxs = [], []
        for p in params:
            grad = p.grad
            if grad.is_sparse:
                grad = grad.to_dense()  # written back into the sparse gradient (_write_gradient)
            elif self._buckets is not None:
                self._buckets.place(p)
                grad = p.grad
            compressed, ctx = self._compression.compress(grad)
            tensors.append(compressed)
            ctxs.append(ctx)
        prescale, postscale = self._scales()
        name = 'group.' + self._parameter_names[params[0]]
        handle = grouped_allreduce_async_(tensors, name=name, op=self._op, prescale_factor=prescale,
                                          postscale_factor=postscale, process_set=self._process_set)
        return handle, list(zip(tensors, ctxs))

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        'Gradients were computed more than backward_passes_per_step times before call to step(). '
                        'Increase backward_passes_per_step to accumulate gradients locally.')
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] != 0:
                self._handles[p] = (None, None)
                return
            index = self._groups.get(p)
            if index is None:
                # Before the ranks agreed on a compressor, synchronize() starts it.
                self._handles[p] = self._allreduce_grad_async(p) if self._agreed() else (None, None)
                return
            self._handles[p] = (None, None)
            self._group_ready[index] = self._group_ready.get(index, 0) + 1
            if self._group_ready[index] == len(self._group_members[index]):
                self._start_group(index)
        return hook

    # ---- synchronize, step ----------------------------------------------------------

    def synchronize(self):
        """Waits for every gradient's allreduce; starts those whose hook did not run."""
        if self._process_set.size() == 1 or not self._process_set.included():
            self._synchronized = True
            return
        for p in self._requires_update:
            if p.grad is None:
                # As Horovod: a gradient this rank did not compute (a branch unused
                # here, a head frozen on this rank) is zero, and its allreduce runs,
                # since other ranks may have computed it and wait for this one.
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        if not self._agreed():
            self._compressor._impl.check_settings_agree()
            self._agreed_session = _kolo.session_number()
        for p in self._requires_update:
            index = self._groups.get(p)
            if index is not None:
                # A group some of whose members' hooks did not run this step.
                if index not in self._group_handles:
                    self._start_group(index)
                continue
            if self._handles.get(p, (None,))[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        if self._compressor is not None:
            try:
                self._compressor._impl.finish()
            except BaseException:
                self._abandon_step()
                raise

        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                continue
            if handle is _COMPRESSED:
                self._allreduce_delay[p] = self.backward_passes_per_step
                continue
            output = synchronize(handle)
            if ctx == 'sparse':
                with torch.no_grad():
                    p.grad.zero_().add_(output)  # as Horovod: the gradient stays the same sparse tensor
            else:
                self._write_gradient(p, ctx[0], ctx[1], output)
            self._allreduce_delay[p] = self.backward_passes_per_step
        for members, handle, ctxs in self._group_handles.values():
            outputs = synchronize(handle)
            for p, (compressed, ctx), reduced in zip(members, ctxs, outputs):
                self._write_gradient(p, compressed, ctx, reduced)
                self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._group_handles.clear()
        self._group_ready.clear()
        if self._buckets is not None:
            self._buckets.lay_out()
        self._synchronized = True

    def _write_gradient(self, p, compressed, ctx, reduced):
        if compressed is p.grad:
            return  # reduced in place
        with torch.no_grad():
            result = self._compression.decompress(reduced, ctx)
            if p.grad.is_sparse:
                # sparse_as_dense, as Horovod, in the gradient's own sparse layout.
                p.grad.zero_().add_(result.to_sparse(p.grad.sparse_dim()))
            else:
                p.grad.copy_(result)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() after an explicit synchronize() (e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without optimizer.skip_synchronize() context after '
                              'optimizer.synchronize(). This can cause training slowdown. You may want to '
                              'consider using optimizer.skip_synchronize() context if you use '
                              'optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def _abandon_step(self):
        """Forgets the step in progress: no allreduce waited for (those in flight keep
        their tensors alive by themselves), every count of backward passes full."""
        self._handles.clear()
        self._group_handles.clear()
        self._group_ready.clear()
        self._synchronized = False
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if self._compressor is not None:
            self._compressor._impl.abandon()

    def load_state_dict(self, *args, **kwargs):
        # As Horovod: a loaded state starts a fresh step.
        self._abandon_step()
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._handles or self._group_handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but before '
                                 'optimizer.step() or optimizer.synchronize(). This is prohibited as it '
                                 'can cause a race condition.')
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients averaged over all ranks.

    Each gradient's allreduce starts in backward as soon as the gradient is ready
    (backward_passes_per_step > 1 accumulates that many passes locally first);
    step() waits for them. num_groups or groups reduce parameters in groups
    (each group one negotiated unit); compression chooses the wire format."""
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    # _kolo_wraps names the optimizer's own class (elastic state makes twins of it).
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__, _kolo_wraps=optimizer.__class__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
