"""Serving samples held in memory: the dataset, the resumable training loader and its sampler.

A batch is a single gather of rows of one float32 tensor, never a per-sample PIL decode
(benchmarks/README.md, "Data pipeline and evaluation").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler

Batch = tuple[Tensor, Tensor, Tensor]

DEFAULT_EVAL_BATCH_SIZE = 500  # evaluation batches of a data set of unknown shape (see InMemoryDataModule)


class InMemoryDataset(Dataset):
    """Samples held as stacked tensors; a whole batch is fetched with one gather.

    Args:
        x: inputs, shape (N, *input_shape), float32. y: labels, shape (N,), int64; -1 marks no label.
        paths: the file each sample was read from (N,), for data read from image files; else None.

    ``dataset[i]`` is ``(x[i], y[i], i)``. ``DataLoader`` calls ``__getitems__`` with a batch's index list, so batches
    come out already stacked as ``(x (B, *input_shape), y (B,), index (B,))`` and ``collate_fn=passthrough`` keeps
    them as is. Any sampler works, Lightning's ``DistributedSampler`` included.
    """

    def __init__(self, x: Tensor, y: Tensor, paths: Sequence[str] | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
        if paths is not None and len(paths) != len(y):
            raise ValueError(f"paths has {len(paths)} entries but there are {len(y)} samples")
        self.x = x
        self.y = y
        self.paths = None if paths is None else list(paths)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> Batch:
        return self.x[index], self.y[index], torch.tensor(index, dtype=torch.int64)

    def __getitems__(self, indices: list[int]) -> Batch:
        if self.x.device.type != "cpu":  # on_device: the tensors live on a GPU, gather there
            return _gather_on_device(self.x, self.y, indices)
        index = np.asarray(indices, dtype=np.int64)  # (B,)
        if len(index) and index[-1] - index[0] == len(index) - 1 and (np.diff(index) == 1).all():
            # A run of consecutive samples (every evaluation batch without DDP): views, not a copy of the whole
            # set once more per epoch. Nothing downstream writes into a batch in place.
            rows = slice(int(index[0]), int(index[-1]) + 1)
            return self.x[rows], self.y[rows], torch.from_numpy(index)
        # numpy's gather runs on one thread; torch's spreads a small copy over all intra-op threads, whose
        # hand-off costs far more than the copy on a busy machine. The model should have those threads.
        x = torch.from_numpy(self.x.numpy()[index])  # (B, *input_shape)
        y = torch.from_numpy(self.y.numpy()[index])  # (B,)
        return x, y, torch.from_numpy(index)


def _gather_on_device(x: Tensor, y: Tensor, indices: Sequence[int]) -> Batch:
    """``(x[index] (B, *input_shape), y[index] (B,), index (B,) int64)`` gathered on x's device (``on_device``): only
    the B indices travel from the host."""
    index = torch.as_tensor(indices, dtype=torch.int64, device=x.device)  # (B,)
    return x[index], y[index], index


class EpochShuffleSampler(RandomSampler):
    """A random order that depends only on ``(seed, epoch)``.

    torch's RandomSampler draws from the global RNG, whose state a checkpoint does not hold. Lightning calls
    ``set_epoch`` before every epoch; under DDP it replaces this sampler with a DistributedSampler, seeded the same way.
    """

    def __init__(self, data_source: Dataset, seed: int) -> None:
        super().__init__(data_source)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class ResumableLoader(DataLoader):
    """A training ``DataLoader`` that resumes mid-epoch: a restored run skips the batches already trained on.

    Lightning saves ``state_dict()`` in every checkpoint and calls ``load_state_dict`` before the first epoch of a
    resumed run, so a run stopped inside an epoch continues with the batches it had not seen, in the same order
    (:class:`EpochShuffleSampler`), and ends equal to an uninterrupted run. Lightning knows the length, so it fetches
    no batch ahead: what was yielded was trained on.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._yielded = 0  # batches of the current epoch handed out so far
        self._skip = 0  # batches to skip at the next iteration (set by a restore)

    def state_dict(self) -> dict[str, int]:
        # A finished epoch resumes at the start of the next one, not by skipping all of it.
        return {"batches_done": self._yielded % max(len(self), 1)}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self._skip = int(state_dict.get("batches_done", 0))

    def __iter__(self):
        # A generator: the sampler's order is drawn at the first batch, after Lightning's set_epoch.
        skip, self._skip, self._yielded = self._skip, 0, 0
        for i, batch in enumerate(super().__iter__()):
            self._yielded = i + 1
            if i >= skip:
                yield batch


def passthrough(batch: Batch) -> Batch:
    """Collate function for :class:`InMemoryDataset`: the batch is already stacked."""
    return batch


def eval_batch_size(datamodule: object) -> int:
    """The data module's evaluation batch (``eval_batch_size``, the data set's fastest), ``DEFAULT_EVAL_BATCH_SIZE``
    for one without: the embedding passes of the k-means init and the pictures run in these batches."""
    return getattr(datamodule, "eval_batch_size", DEFAULT_EVAL_BATCH_SIZE)
