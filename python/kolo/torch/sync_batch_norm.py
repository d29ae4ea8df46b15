"""SyncBatchNorm, as horovod.torch.sync_batch_norm: batch normalization whose
statistics are those of the whole global batch, across ranks, in training.

The statistics are sums over every rank (two differentiable Sum-allreduces: the
mean, then the squared deviations from it), so autograd's backward through them
is the gradient of the global batch exactly, with no backward code of its own."""

import itertools

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from kolo.torch import _kolo
from kolo.torch.mpi_ops import Sum, allreduce


class SyncBatchNorm(_BatchNorm):
    """Applies synchronized batch normalization over the ranks' batches
    (1D, 2D or 3D inputs with channels in dimension 1)."""

    _instances = itertools.count()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        # Layers are built in the same order on every rank, so this names each
        # layer's collectives alike everywhere and lets them reuse one name per call.
        self._kolo_name = f'sync_batch_norm.{next(SyncBatchNorm._instances)}'

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {input.dim()}D input)')

    def _momentum(self):
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked)

    def forward(self, input):
        self._check_input_dim(input)
        # Batch statistics in training, and in eval without running statistics
        # (torch's BatchNorm rule); those are the global batch's, as in Horovod.
        if not (self.training or not self.track_running_stats) or _kolo.size() == 1:
            return super().forward(input)  # this rank's batch is the whole batch
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        # Half types count and sum in float32: a float16 sum overflows past 65504.
        out_dtype = input.dtype
        if input.dtype in (torch.float16, torch.bfloat16):
            input = input.float()
        dims = [0] + list(range(2, input.dim()))
        shape = [1, input.size(1)] + [1] * (input.dim() - 2)
        count = torch.tensor([input.numel() // input.size(1)], dtype=input.dtype)
        sums = allreduce(torch.cat([input.sum(dims), count]), op=Sum, name=self._kolo_name + '.mean')
        total = sums[-1]
        mean = sums[:-1] / total
        centered = input - mean.view(shape)
        squares = allreduce((centered * centered).sum(dims), op=Sum, name=self._kolo_name + '.var')
        var = squares / total
        out = centered * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                m = self._momentum()
                n = float(total.item())
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                unbiased = var.detach() * (n / (n - 1)) if n > 1 else var.detach()
                self.running_var.mul_(1 - m).add_(unbiased, alpha=m)
        return out.to(out_dtype)
