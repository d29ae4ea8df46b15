"""The kolo.torch suites run as one pytest per rank under kolorun (-np 2 and -np 3).

Every rank collects the same tests in the same order and runs them in step; a
test's collectives are named after the test, so a test that fails on one rank
cannot pair up with another test's collectives on the others."""

import os
import threading
import time

import pytest
import torch

import kolo.torch as hvd


@pytest.fixture(scope='session', autouse=True)
def kolo_session():
    hvd.init()
    torch.manual_seed(1234)
    yield
    hvd.shutdown()


def on_rank_0(work, poll_seconds=0.5):
    """Runs work() on rank 0 (a job of its own, started from there) while the other
    ranks wait in short collectives, one every poll_seconds: waiting in one would
    reach the suite's KOLO_STALL_SHUTDOWN_TIME when the work is slow under load.
    Re-raises work's exception on rank 0, after every rank has seen it end."""
    outcome = {}
    worker = None
    if hvd.rank() == 0:
        def run():
            try:
                work()
            except BaseException as e:  # noqa: B902 - re-raised below, in the test's thread
                outcome['error'] = e
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
    test = os.environ.get('PYTEST_CURRENT_TEST', 'on_rank_0').split(' ')[0]
    step = 0
    while True:
        busy = torch.tensor([int(worker is not None and worker.is_alive())])
        if hvd.allreduce(busy, op=hvd.Sum, name=f'{test}.on_rank_0.{step}').item() == 0:
            break
        step += 1
        time.sleep(poll_seconds)
    if 'error' in outcome:
        raise outcome['error']


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
