"""Run by test_runtime.py as a pytest suite of its own under kolorun -np 2, with
the suite's pytest.ini and conftest.py: rank 1 fails the first test before its
collective, which rank 0 waits in. The job must end at that failure, and no rank
may go on to the next test."""

import os
import pathlib

import torch

import kolo.torch as hvd


def test_fails_on_rank_1_before_its_collective():
    assert hvd.rank() != 1, 'rank 1 fails before its allreduce'
    hvd.allreduce(torch.ones(1), name='diverging.first')


def test_after_the_failure():
    pathlib.Path(os.environ['DIVERGING_MARKERS'], f'after.{hvd.rank()}').touch()
    hvd.allreduce(torch.ones(1), name='diverging.second')
