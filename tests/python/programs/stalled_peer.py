"""Run by test_runtime.py under its own kolorun -np 2: rank 1 stops itself (SIGSTOP)
in the middle of the job; rank 0's next allreduce must fail with PeerFailureError
naming rank 1 within KOLO_PEER_TIMEOUT, then rank 0 ends rank 1."""

import os
import signal
import sys
import time

import torch

import kolo.torch as hvd

hvd.init()
pids = hvd.allgather_object(os.getpid())
hvd.allreduce(torch.ones(4), name='warm')
if hvd.rank() == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(0)
started = time.monotonic()
try:
    hvd.allreduce(torch.ones(4), name='after.stop')
    print('no error', flush=True)
    sys.exit(1)
except hvd.PeerFailureError as error:
    print(f'PeerFailureError peer_rank={error.peer_rank} after {time.monotonic() - started:.1f} s: {error}',
          flush=True)
finally:
    os.kill(pids[1], signal.SIGKILL)
