"""Rank 1 raises mid-training while the others are in collectives: they must get
a PeerFailureError naming rank 1 and its exception, not an orderly shutdown."""

import torch

import kolo.torch as hvd

hvd.init()
try:
    for step in range(1000):
        if hvd.rank() == 1 and step == 5:
            raise ValueError('boom at step 5')
        hvd.allreduce(torch.ones(4), name='training.step')
except hvd.PeerFailureError as e:
    print(f'rank {hvd.rank()}: PeerFailureError peer_rank={e.peer_rank}: {e}', flush=True)
    raise
