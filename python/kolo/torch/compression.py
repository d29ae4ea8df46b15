"""Gradient compression for the wire, as horovod.torch.compression, and
compressors with memory between steps (PowerSGD)."""

import torch

from kolo.torch import _kolo


class Compressor:
    """Compresses a tensor before a collective and restores it after."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and the context decompress() needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire_dtype, doc):
    class _Cast(Compressor):
        __doc__ = doc

        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != wire_dtype:
                return tensor.type(wire_dtype), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.type(ctx)
    return _Cast


FP16Compressor = _cast_compressor(torch.float16, 'Sends floating-point tensors as float16.')
BF16Compressor = _cast_compressor(torch.bfloat16, 'Sends floating-point tensors as bfloat16.')


class PowerSGD:
    """Low-rank gradient compression with error feedback (Vogels et al., 2019;
    PyTorch DDP's PowerSGD hook), for DistributedOptimizer(compression=...).

    Each gradient with two or more dimensions, at least min_size elements and
    factors smaller than itself travels as two factors of rank `rank`: a rank
    sends rank * (rows + columns) numbers instead of rows * columns. The factors
    of all such gradients go after backward in a few chunks, two allreduces a
    chunk (last_allreduces says how many a step took); what the approximation
    misses is carried into the next step (error_feedback). The other gradients,
    and all of them before start_step, are allreduced whole. warm_start keeps
    the factors from step to step. kolo::torch::PowerSGD does the work, so a
    Python and a C++ training get the same bits. One object per optimizer;
    every rank needs the same settings (the first step of a session checks)."""

    def __init__(self, rank=4, start_step=0, min_size=16384, warm_start=True, error_feedback=True, seed=0):
        for what, value in (('rank', rank), ('start_step', start_step), ('min_size', min_size), ('seed', seed)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f'PowerSGD: {what} must be an int, not {value!r}')
        if seed < 0:
            raise ValueError(f'PowerSGD: seed must be 0 or more, got {seed}')
        self._impl = _kolo.PowerSGD(rank=rank, start_step=start_step, min_size=min_size,
                                    warm_start=bool(warm_start), error_feedback=bool(error_feedback), seed=seed)
        self.rank, self.start_step, self.min_size = rank, start_step, min_size
        self.warm_start, self.error_feedback, self.seed = bool(warm_start), bool(error_feedback), seed

    def __repr__(self):
        return f'kolo.torch.PowerSGD({self._impl.settings()})'

    @property
    def steps(self):
        """The steps it has finished (compressed or not)."""
        return self._impl.steps

    @property
    def last_sent_elements(self):
        """Numbers one rank sent for the gradients it compressed in the last step."""
        return self._impl.last_sent_elements

    @property
    def last_compressed_elements(self):
        """Numbers those gradients hold: with last_sent_elements, the compression."""
        return self._impl.last_compressed_elements

    @property
    def last_allreduces(self):
        """Allreduces the last step's factors took: a P and a Q per chunk."""
        return self._impl.last_allreduces

    def memory(self):
        """What it keeps between steps, {name: tensor}: its step count, warm-start
        factors ('q.*', the same on every rank) and error feedback ('local.*',
        this rank's own). The tensors are its own: copy them to keep them."""
        return dict(self._impl.memory())

    def load_memory(self, memory):
        """Puts back a memory() (copied in); names missing start empty."""
        self._impl.load_memory(list(memory.items()))


class Compression:
    """The compressors, by name: Compression.none, Compression.fp16, Compression.bf16,
    and Compression.powersgd(rank=...), a PowerSGD."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    powersgd = PowerSGD
