"""The kolo.torch suites run as one pytest per rank under kolorun (-np 2 and -np 3).

Every rank collects the same tests in the same order and runs them in step; a
test's collectives are named after the test, so a test that fails on one rank
cannot pair up with another test's collectives on the others."""

import pytest
import torch

import kolo.torch as hvd


@pytest.fixture(scope='session', autouse=True)
def kolo_session():
    hvd.init()
    torch.manual_seed(1234)
    yield
    hvd.shutdown()


def rank_values(shape, dtype, rank, salt=0):
    """Values that differ by rank and element, exact in every dtype (small integers)."""
    count = 1
    for d in shape:
        count *= d
    base = torch.arange(count, dtype=torch.int64).reshape(shape)
    values = (base * 7 + rank * 3 + salt) % 11 - 3
    if dtype == torch.bool:
        return values > 0
    if dtype == torch.uint8:
        values = values.abs()
    return values.to(dtype)


# Every dtype Horovod's torch ops take on CPU.
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.bool]
NUMERIC_DTYPES = [d for d in ALL_DTYPES if d != torch.bool]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
