"""Gradient compression for the wire, as horovod.torch.compression."""

import torch


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


class Compression:
    """The compressors, by name: Compression.none, Compression.fp16, Compression.bf16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
