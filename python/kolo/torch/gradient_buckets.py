"""DistributedOptimizer's gradients laid out end to end in memory the host's other
ranks can map, so that kolo's shared-memory transport averages them in place of
the ranks' gradients instead of copying them through its segment and back.

The first step records the order in which gradients are reduced (the order
backward produces them); after it each dtype's gradients get one bucket in that
order, and each p.grad becomes a view of its place in the bucket. Backward then
accumulates into the views (zero_grad() zeroes them in place), and a fused batch
of consecutive gradients is one buffer on every rank. A gradient that is no
longer a view (the user assigned p.grad, or set it to None) is moved back into
its place before it is reduced.

The buckets' memory is made, and written once, when the optimizer is: a
process touches fresh memory a page at a time, and a worker that joins an
elastic job builds its optimizer before the job takes it in, so its first
step (which the others wait for) does not pay for it."""

import torch

from kolo.torch import _kolo


class GradientBuckets:
    def __init__(self, params):
        """params: those whose gradients may be reduced (every dtype's bucket
        holds them all; the first step's order decides their places)."""
        self._order = []    # parameters in the order their gradients were first reduced
        self._recorded = set()
        self._views = None  # parameter -> the view of its bucket its gradient lives in, once laid out
        counts, like = {}, {}
        for p in params:
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
            like.setdefault(p.dtype, p)
        self._memory = {}   # dtype -> its bucket, written once so that its pages are in
        for dtype, count in counts.items():
            self._memory[dtype] = _kolo.shareable_zeros(count, like[dtype])
            self._memory[dtype].zero_()

    def place(self, p):
        """Called with p.grad (dense) just before its allreduce starts."""
        if self._views is None:
            if p not in self._recorded:
                self._recorded.add(p)
                self._order.append(p)
            return
        view = self._views.get(p)
        if view is not None and not _is_view(p.grad, view):
            _move_into(p, view)

    def lay_out(self):
        """After the first step's gradients are reduced: the buckets, and p.grad in them."""
        if self._views is not None or not self._order:
            return
        by_dtype = {}
        for p in self._order:
            by_dtype.setdefault(p.dtype, []).append(p)
        views = {}
        for dtype, params in by_dtype.items():
            count = sum(p.numel() for p in params)
            bucket = self._memory.pop(dtype, None)
            bucket = bucket.narrow(0, 0, count) if bucket is not None and bucket.numel() >= count \
                else _kolo.shareable_zeros(count, params[0])
            offset = 0
            for p in params:
                views[p] = bucket.narrow(0, offset, p.numel()).view(p.shape)
                offset += p.numel()
        self._views = views
        self._memory = {}
        for p, view in views.items():
            _move_into(p, view)


def _is_view(grad, view):
    return grad is not None and grad.data_ptr() == view.data_ptr() and grad.shape == view.shape


def _move_into(p, view):
    grad = p.grad
    if grad is None or grad.is_sparse or grad.shape != view.shape or grad.dtype != view.dtype:
        return
    with torch.no_grad():
        view.copy_(grad)
    p.grad = view
