"""Data modules that decode their samples once and serve batches from memory.

- :mod:`~lit_otclust.data.torchvision`: MNIST and CIFAR-10 (``fit_split``: which samples are clustered; ``classes``).
- :mod:`~lit_otclust.data.folder` and :mod:`~lit_otclust.data.arrays`: your own images or features, in a folder, an
  array file or in memory (``ArrayDataModule.from_arrays``), with or without labels (:mod:`~lit_otclust.data.user`).
- :mod:`~lit_otclust.data.base`: what they share: the loader settings (``batch_size``, ``subset``,
  ``class_proportions`` for imbalanced data sets, ...), stated once in :class:`InMemoryDataModule`, and the loaders.
- :mod:`~lit_otclust.data.loading`: the in-memory dataset, the resumable training loader and its seeded sampler.
- :mod:`~lit_otclust.data.sampling`: seeded stratified subsets and class-proportional subsamples.

In a config, ``class_path: lit_otclust.data.MNISTDataModule`` (and the other names here) resolves through this package.
"""

from lit_otclust.data.arrays import ArrayDataModule
from lit_otclust.data.base import SCALINGS, InMemoryDataModule
from lit_otclust.data.folder import ImageFolderDataModule
from lit_otclust.data.loading import (DEFAULT_EVAL_BATCH_SIZE, EpochShuffleSampler, InMemoryDataset, ResumableLoader,
                                      eval_batch_size, passthrough)
from lit_otclust.data.sampling import (check_class_proportions, geometric_proportions, proportional_counts,
                                       proportional_indices, random_indices, stratified_indices)
from lit_otclust.data.torchvision import FIT_SPLITS, CIFAR10DataModule, MNISTDataModule, TorchvisionDataModule

__all__ = ["ArrayDataModule", "CIFAR10DataModule", "DEFAULT_EVAL_BATCH_SIZE", "EpochShuffleSampler", "FIT_SPLITS",
           "ImageFolderDataModule", "InMemoryDataModule", "InMemoryDataset", "MNISTDataModule", "ResumableLoader",
           "SCALINGS", "TorchvisionDataModule", "check_class_proportions", "eval_batch_size", "geometric_proportions",
           "passthrough", "proportional_counts", "proportional_indices", "random_indices", "stratified_indices"]
