"""The base class of every data module here: the nine loader settings, the seeded subsets, the loaders.

A subclass reads its samples in ``setup``; everything else (which samples are kept, how they are
batched, where the tensors live) is stated once, in :class:`InMemoryDataModule`. Its subclasses
forward those settings with ``**loader``, which LightningCLI (jsonargparse) follows to this
signature, so every data module takes them under the same flat keys
(``data.init_args.batch_size``, ``data.init_args.on_device``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch import Tensor
from torch.utils.data import DataLoader

from lit_otclust.data.loading import (DEFAULT_EVAL_BATCH_SIZE, EpochShuffleSampler, InMemoryDataset, ResumableLoader,
                                      passthrough)
from lit_otclust.data.sampling import (check_class_proportions, proportional_counts, proportional_indices,
                                       random_indices, stratified_indices)

SCALINGS = ("unit", "standard")


class InMemoryDataModule(L.LightningDataModule):
    """What every data module here shares: samples held as tensors, seeded subsets, the loaders.

    A subclass reads its samples in ``setup`` into ``fit_set`` (the samples clustered) and ``heldout_set`` (scored
    out of sample; None where there is none; ``heldout_offset`` where it is ``fit_set``'s tail from that index on),
    states ``num_classes`` and ``input_shape`` by ``__init__`` (for LightningCLI's ``link_arguments``), and then calls
    :meth:`_check_subset`.

    Args:
        batch_size: training batch size m (the paper: 300).
        eval_batch_size: batch size of the evaluation loaders and embedding passes; None: ``default_eval_batch_size``.
        subset: if set, a seeded subset of that many fitted samples, class-stratified where there are labels.
        class_proportions: if set, a seeded per-class subsample of the fitted samples whose classes follow these
            proportions (one per class, summing to 1; see :func:`~lit_otclust.data.sampling.proportional_counts`): the
            largest sample they allow, the class that runs out first kept whole (with ``subset``: exactly ``subset``
            samples). The held-out samples are drawn the same way (capped at ``subset``). Needs labels. The OT loss's
            ``--model.proportions`` must match (a YAML anchor states them once: ``class_proportions: &w [...]``,
            ``proportions: *w``); :func:`~lit_otclust.data.sampling.geometric_proportions` builds long-tailed ones.
        seed: seed of the subset draws and of the training order (see EpochShuffleSampler).
        scaling: "unit" or "standard" (see the subclass for the statistics used).
        drop_last: drop the last incomplete training batch, so every OT batch has exactly ``batch_size`` samples.
        num_workers: DataLoader workers; 0 is fastest here, a batch being a single gather.
        on_device: keep the samples on the training device: each loader moves its sample set there once (to the
            trainer's ``strategy.root_device``; without a trainer they stay where they are), and a batch is then one
            index gather in device memory. On a GPU the whole set must fit beside the model (MNIST 220 MB float32);
            under DDP every rank holds a full copy. On CPU it changes nothing. Needs ``num_workers=0``.

    Every loader yields ``(x, y, index)``: x float32 (B, *input_shape), y int64 (B,) (-1: no label), and index int64
    (B,), the sample's position in its set, so predictions are written per sample also under DDP.
    """

    name: str
    num_classes: int
    input_shape: tuple[int, ...]
    _no_heldout_hint = ""  # how to give this module a held-out set, for the error of test_dataloader
    # Evaluation is memory-bound: batch activations should stay in cache (benchmarks/README.md, "Data pipeline ...").
    default_eval_batch_size = DEFAULT_EVAL_BATCH_SIZE

    def __init__(
        self,
        batch_size: int = 300,
        eval_batch_size: int | None = None,
        subset: int | None = None,
        class_proportions: list[float] | None = None,
        seed: int = 0,
        scaling: str = "unit",
        drop_last: bool = True,
        num_workers: int = 0,
        on_device: bool = False,
    ) -> None:
        super().__init__()
        if scaling not in SCALINGS:
            raise ValueError(f"scaling={scaling!r} is unknown; choose one of {SCALINGS}")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        if eval_batch_size is None:
            eval_batch_size = self.default_eval_batch_size
        if eval_batch_size < 1:
            raise ValueError(f"eval_batch_size={eval_batch_size} must be at least 1")
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers} must be at least 0")
        if on_device and num_workers > 0:
            raise ValueError(f"on_device=True needs num_workers=0, got num_workers={num_workers}: worker processes "
                             f"cannot share the tensors on the device; set one of them back")
        self.class_proportions = None if class_proportions is None else check_class_proportions(
            class_proportions, getattr(self, "num_classes", None))
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.subset = subset
        self.seed = seed
        self.scaling = scaling
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.on_device = on_device
        self.fit_set: InMemoryDataset | None = None
        self.heldout_set: InMemoryDataset | None = None
        # Set where the held-out samples are fit_set[heldout_offset:]: evaluation then embeds them once.
        self.heldout_offset: int | None = None

    @property
    def class_names(self) -> list[str] | None:
        """What classes 0, 1, ... are called, for predictions and figures: ``classes`` as text where a subclass has
        them (an image folder's sub-folders, an array file's label values); None where a label is its own name."""
        classes = getattr(self, "classes", None)
        return None if classes is None else [str(c) for c in classes]

    # --- which samples -------------------------------------------------------------------------

    def _check_subset(self, available: int, samples: str) -> None:
        """The checks that need only the number of samples that can be fitted (the rest come in ``setup``).

        Args:
            available: how many samples ``subset`` may keep at most.
            samples: what they are, for the message (e.g. "the MNIST samples in fit_split='all'").
        """
        if self.subset is not None and not 1 <= self.subset <= available:
            raise ValueError(f"subset={self.subset} must lie in [1, {available}], {samples}")
        if self.class_proportions is None or self.subset is not None:  # else the size is known after the draw
            self._check_fit_size(available if self.subset is None else self.subset)

    def _check_fit_size(self, num_fit: int) -> None:
        if self.drop_last and self.batch_size > num_fit:
            raise ValueError(f"batch_size={self.batch_size} exceeds the {num_fit} fitted samples: with drop_last=True "
                             f"no training batch would remain")

    def _fit_indices(self, labels: Tensor) -> Tensor | None:
        """Positions of the fitted samples to keep (class_proportions, else subset), or None for all."""
        if self.class_proportions is not None:
            if (labels < 0).any():
                raise ValueError("class_proportions needs a label for every fitted sample; these data have none")
            return proportional_indices(labels, self.class_proportions, self.subset, self.seed)
        if self.subset is None:
            return None
        if not self.subset <= len(labels):
            raise ValueError(f"subset={self.subset} must lie in [1, {len(labels)}], the fitted {self.name} samples")
        if (labels < 0).any():  # no labels to stratify by
            return random_indices(len(labels), self.subset, self.seed)
        return stratified_indices(labels, self.subset, self.seed)

    def _heldout_indices(self, labels: Tensor) -> Tensor | None:
        """Positions of the held-out samples to keep: as the fitted ones, at most ``subset`` of them."""
        if self.class_proportions is not None and not (labels < 0).any():
            counts = torch.bincount(labels, minlength=len(self.class_proportions))
            most = int(proportional_counts(counts, self.class_proportions).sum())
            size = None if self.subset is None or self.subset >= most else self.subset
            return proportional_indices(labels, self.class_proportions, size, self.seed)
        if self.subset is None:
            return None
        size = min(self.subset, len(labels))
        if (labels < 0).any():
            return random_indices(len(labels), size, self.seed)
        return stratified_indices(labels, size, self.seed)

    # --- loaders -------------------------------------------------------------------------------

    def _move_to_device(self, dataset: InMemoryDataset) -> None:
        """``on_device``: move the dataset's tensors to the trainer's device, once; outside a Trainer they stay."""
        if self.trainer is not None:  # .to is a no-op where they already are
            device = self.trainer.strategy.root_device
            dataset.x, dataset.y = dataset.x.to(device), dataset.y.to(device)

    def _loader(self, dataset: InMemoryDataset | None, train: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for a dataloader")
        if self.on_device:
            self._move_to_device(dataset)
        common = dict(collate_fn=passthrough, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        if train:
            # Under DDP, Lightning swaps the sampler for a DistributedSampler.
            sampler = EpochShuffleSampler(dataset, self.seed)
            return ResumableLoader(dataset, batch_size=self.batch_size, sampler=sampler, drop_last=self.drop_last, **common)
        sampler = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            if len(dataset) < dist.get_world_size():
                # A rank with no evaluation batch skips the evaluation loop while the others wait for it.
                raise ValueError(f"an evaluation set of {len(dataset)} samples cannot be shared by "
                                 f"{dist.get_world_size()} ranks; use more samples (data subset) or fewer devices")
            # Lightning's default DistributedSampler pads with repeats; this subclass evaluates each sample once.
            sampler = UnrepeatedDistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=False)
        return DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False, sampler=sampler, drop_last=False, **common)

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches ``(x, y, index)`` of the fitted samples, ``batch_size`` each."""
        return self._loader(self.fit_set, train=True)

    def val_dataloader(self) -> list[DataLoader]:
        """[fitted samples in order (clustering accuracy), held-out samples in order (if any)].

        Where the held-out samples are the tail of the fitted ones (``heldout_offset`` set: fit_split
        "all" or "test", whole), only the fitted loader: the system scores ``heldout/*`` on the tail of
        that pass instead of embedding the same images twice.
        """
        if self.fit_set is not None and (self.heldout_set is None or self.heldout_offset is not None):
            return [self._loader(self.fit_set, train=False)]
        return [self._loader(self.fit_set, train=False), self._loader(self.heldout_set, train=False)]

    def test_dataloader(self) -> DataLoader:
        """The held-out samples, in order."""
        if self.fit_set is not None and self.heldout_set is None:
            raise RuntimeError(f"{type(self).__name__} has no held-out samples to test on{self._no_heldout_hint}; "
                               f"`validate` or `predict` score the fitted samples")
        return self._loader(self.heldout_set, train=False)

    def predict_dataloader(self) -> DataLoader:
        """The fitted samples, in order."""
        return self._loader(self.fit_set, train=False)


def standardize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """(x - mean) / std per channel, in place, for x of shape (N, C, H, W) or (N, d) with C = 1."""
    shape = (-1,) + (1,) * (x.dim() - 2)  # broadcast over (N, C, H, W) or (N, 784)
    return x.sub_(torch.tensor(mean, dtype=x.dtype).view(shape)).div_(torch.tensor(std, dtype=x.dtype).view(shape))
