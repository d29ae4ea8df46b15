"""A sampler whose epoch survives changes of the job's membership, as
horovod.torch.elastic.ElasticSampler."""

import collections.abc
import itertools
import math
import operator

import torch
import torch.utils.data

from kolo.torch.mpi_ops import rank, size


def _index(what, value, minimum):
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f'kolo.torch.elastic.ElasticSampler: {what} must be an int, not {value!r}') from None
    if value < minimum:
        raise ValueError(f'kolo.torch.elastic.ElasticSampler: {what} must be at least {minimum}, not {value}')
    return value


class ElasticSampler(torch.utils.data.Sampler):
    """Splits a dataset's indices over the ranks, as DistributedSampler, and
    remembers which ones this epoch has processed: after a reset the indices
    not yet processed are split over the new ranks.

    Keep it in a TorchState, call record_batch() after each batch and
    set_epoch() at the end of each epoch (not at its start, which would forget
    what a resumed epoch already processed). Each rank's share is padded, by
    repeating indices of the split, to the same length on every rank.

    dataset: anything with a len(); shuffle: a new order every epoch, the same
    on every rank; seed: the same on every rank."""

    def __init__(self, dataset, shuffle=True, seed=0):
        super().__init__(None)
        if not isinstance(dataset, collections.abc.Sized):
            raise TypeError('kolo.torch.elastic.ElasticSampler: the dataset must have a len(), '
                            f'not {type(dataset).__name__}')
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = _index('seed', seed, -2**63)
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` with no index processed; call it at an epoch's end."""
        self.epoch = _index('epoch', epoch, 0)
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks batch `batch_idx` of this rank's share as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Marks dataset indices as processed."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """The dataset indices of batch `batch_idx` of this rank's share."""
        batch_idx = _index('batch_idx', batch_idx, 0)
        batch_size = _index('batch_size', batch_size, 1)
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self):
        return {'epoch': self.epoch, 'processed_indices': set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Takes a state_dict() and splits what remains of its epoch over the ranks."""
        if not isinstance(state_dict, collections.abc.Mapping) or \
                not {'epoch', 'processed_indices'} <= state_dict.keys():
            raise ValueError('kolo.torch.elastic.ElasticSampler: load_state_dict takes a mapping with '
                             f'epoch and processed_indices, as state_dict() returns; got {state_dict!r}')
        self.epoch = _index('epoch', state_dict['epoch'], 0)
        self.processed_indices = set(state_dict['processed_indices'])
        self.reset()

    def reset(self):
        """Splits the indices not yet processed over the job's ranks now."""
        self._split(size(), rank())

    def _split(self, num_replicas, rank):
        """This rank's share of the unprocessed indices when num_replicas ranks split them."""
        num_replicas = _index('num_replicas', num_replicas, 1)
        rank = _index('rank', rank, 0)
        if rank >= num_replicas:
            raise ValueError(f'kolo.torch.elastic.ElasticSampler: rank {rank} of {num_replicas}')
        self.num_replicas, self.rank = num_replicas, rank
        # One order per epoch, the same on every rank whatever the resets: the
        # epoch's permutation with the processed indices left out.
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=generator).tolist()
        else:
            order = range(len(self.dataset))
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = math.ceil(len(self.remaining_indices) / num_replicas)
        self.total_size = self.num_samples * num_replicas
        # Equal shares, so that every rank runs as many batches (and collectives).
        padded = list(itertools.islice(itertools.cycle(self.remaining_indices), self.total_size))
        self.indices = padded[rank::num_replicas]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
