"""kolo.torch.elastic: Horovod's horovod.torch.elastic on kolo. Training that
goes on when ranks fail, leave or join: the state in a TorchState, the
training in a function decorated with run(), commits with state.commit()."""

from kolo.torch.elastic.base import ObjectState, State
from kolo.torch.elastic.exceptions import HostsUpdatedInterrupt
from kolo.torch.elastic.runner import run
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import TorchState

__all__ = ['run', 'State', 'ObjectState', 'TorchState', 'ElasticSampler', 'HostsUpdatedInterrupt']
