"""MNIST and CIFAR-10 as LightningDataModules that decode once and serve batches from memory.

The images are read from torchvision's on-disk layout, turned into one float32 tensor per sample
set in ``setup`` and never touched by PIL again: a batch is a single gather of rows, so an epoch of
MNIST in batches of 300 costs under 0.1 s on a 2-core CPU (``benchmarks/bench_data.py``), against
about 3 s through torchvision's per-sample PIL path.

Which samples are clustered (``fit_split``)
-------------------------------------------
The paper (Genevay et al., 2020) clusters "a training set" and wants to "classify out-of-sample
data" (Sec. 1), but its experiments (Sec. 3) do not say which MNIST / CIFAR-10 images Table 1 is
computed on. The
deep-clustering literature it compares with (DEC, DKM) clusters all 70,000 MNIST / 60,000 CIFAR-10
images, so Table 1 most likely corresponds to ``fit_split="all"``, which is what our configs use.

- ``"train"``: the official training split (60k / 50k); the test split is truly held out.
- ``"test"``: the official test split (10k / 10k), handy for quick runs.
- ``"all"``: train followed by test (70k / 60k).

The held-out loader always serves the official test split. Under ``"all"`` and ``"test"`` that
split is *inside* the fitted samples, so its accuracy measures the learned classifier on those
images, not generalisation; only ``"train"`` gives a genuine out-of-sample accuracy.

Imbalanced data sets (``class_proportions``)
--------------------------------------------
Every data module here (these two, and the folder and array modules of
:mod:`lit_otclust.user_data`) takes ``class_proportions``: a seeded per-class subsample of the
fitted samples with those class proportions, the largest the classes allow
(:func:`proportional_counts`), for studying the OT loss with unequal cluster sizes.
:func:`geometric_proportions` gives a long-tailed set with a chosen largest/smallest ratio. The
model is told the proportions separately (``--model.proportions``, which must match). MNIST and
CIFAR-10 also take ``classes``, a few classes kept and relabelled 0, 1, ... (e.g. the paper's
two-digit example: ``classes=[1, 2]``, ``class_proportions=[0.2, 0.8]``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
import torchvision
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torchvision.datasets.utils import check_integrity

FIT_SPLITS = ("train", "test", "all")
SCALINGS = ("unit", "standard")

Batch = tuple[Tensor, Tensor, Tensor]


class InMemoryDataset(Dataset):
    """Samples held as stacked tensors; a whole batch is fetched with one gather.

    Args:
        x: inputs, shape (N, *input_shape), float32.
        y: labels, shape (N,), int64; -1 marks a sample without a label (a user's unlabelled images).
        paths: the file each sample was read from (N,), for data read from image files; else None.

    ``dataset[i]`` is ``(x[i], y[i], i)``. ``DataLoader`` calls ``__getitems__`` with a batch's
    index list when the dataset has one, so batches come out already stacked as
    ``(x (B, *input_shape), y (B,), index (B,))`` and ``collate_fn=passthrough`` keeps them as is.
    Any sampler works, so Lightning's automatic ``DistributedSampler`` injection for the training
    loader (which rebuilds the DataLoader with the same dataset and collate_fn) is unaffected.
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
            # A run of consecutive samples (every evaluation batch without DDP): views of the stored tensors,
            # not a copy; an MNIST evaluation otherwise copies its 70k images (220 MB) once more per epoch.
            # Nothing downstream writes into a batch in place.
            rows = slice(int(index[0]), int(index[-1]) + 1)
            return self.x[rows], self.y[rows], torch.from_numpy(index)
        # numpy's gather runs on one thread. torch's spreads a ~1 MB copy over all intra-op
        # threads, and on a busy 2-core machine the hand-off cost 30x the copy (1.6 s vs 0.05 s
        # per MNIST epoch); the model, not the data, should have those threads.
        x = torch.from_numpy(self.x.numpy()[index])  # (B, *input_shape)
        y = torch.from_numpy(self.y.numpy()[index])  # (B,)
        return x, y, torch.from_numpy(index)


def _gather_on_device(x: Tensor, y: Tensor, indices: Sequence[int]) -> Batch:
    """One batch gathered by torch on the device the tensors lie on (``on_device``).

    On a GPU this is one index gather in device memory: no gather on the host and no
    host-to-device copy of the batch (only the B indices travel).

    Args:
        x: inputs (N, *input_shape); y: labels (N,), on the same device as x.
        indices: the batch's positions (B,).

    Returns:
        ``(x[index] (B, *input_shape), y[index] (B,), index (B,) int64)``, all on x's device.
    """
    index = torch.as_tensor(indices, dtype=torch.int64, device=x.device)  # (B,)
    return x[index], y[index], index


class EpochShuffleSampler(RandomSampler):
    """A random order that depends only on ``(seed, epoch)``.

    torch's RandomSampler draws its order from the global RNG, whose state a checkpoint does not
    hold, so a resumed run would see other batches than the uninterrupted one. Lightning calls
    ``set_epoch`` before every epoch; under DDP it replaces this RandomSampler subclass with a
    DistributedSampler, which is seeded the same way.
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

    Lightning saves ``state_dict()`` in every checkpoint and calls ``load_state_dict`` before the
    first epoch of a resumed run, so a run stopped inside an epoch (SIGTERM, SLURM's pre-emption
    signal) continues with the batches it had not seen, in the same order (the order depends only
    on the seed and the epoch: :class:`EpochShuffleSampler`), and ends equal to an uninterrupted run.
    Lightning knows the length, so it fetches no batch ahead: what was yielded was trained on.
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


def stratified_indices(labels: Tensor, size: int, seed: int) -> Tensor:
    """Draw ``size`` sample positions with classes as equal in number as the data allow.

    Each class :math:`c` with :math:`n_c` samples receives :math:`q_c` of them, where the quotas
    fill classes from the smallest up with :math:`q_c = \\min(n_c, \\lceil r / k \\rceil)`,
    :math:`r` the samples still to draw and :math:`k` the classes still to serve. Classes with
    enough samples therefore differ by at most one, and a class too small for its share gives
    all it has, its deficit spread over the others.

    Args:
        labels: class of each sample, shape (N,), int64, values in [0, K).
        size: number of positions to draw, 1 <= size <= N.
        seed: seed of the draw; the same (labels, size, seed) always gives the same positions.

    Returns:
        Sorted positions, shape (size,), int64, without repeats.
    """
    if not 1 <= size <= len(labels):
        raise ValueError(f"size={size} must lie in [1, {len(labels)}]")
    counts = torch.bincount(labels)  # (K,)
    generator = torch.Generator().manual_seed(seed)
    remaining = size
    chosen = []
    order = torch.argsort(counts, stable=True).tolist()
    for served, label in enumerate(order):
        left = len(order) - served
        quota = min(int(counts[label]), -(-remaining // left))  # ceil: extras go to early classes
        members = torch.nonzero(labels == label).squeeze(1)  # (n_c,)
        chosen.append(members[torch.randperm(len(members), generator=generator)[:quota]])
        remaining -= quota
    return torch.sort(torch.cat(chosen)).values


def geometric_proportions(num_classes: int, ratio: float) -> list[float]:
    """Class proportions decreasing geometrically from class 0 to class C - 1 with ``w_0 / w_{C-1} = ratio``.

    .. math::
        w_c = \\frac{r^{-c / (C - 1)}}{\\sum_{j=0}^{C-1} r^{-j / (C - 1)}}, \\qquad c = 0, \\dots, C - 1,

    the usual way to make a long-tailed version of a balanced data set (the imbalance ratio r is
    the largest class over the smallest). ``ratio = 1`` gives uniform proportions.

    Args:
        num_classes: C >= 2.
        ratio: r >= 1, the largest proportion over the smallest.

    Returns:
        C floats summing to 1 (to rounding), for ``data.class_proportions`` and ``model.proportions``.

    Example:
        >>> [round(w, 4) for w in geometric_proportions(3, 4.0)]
        [0.5714, 0.2857, 0.1429]
    """
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes} must be at least 2")
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(f"ratio={ratio!r} must be a finite number >= 1 (largest class over smallest)")
    weights = [ratio ** (-c / (num_classes - 1)) for c in range(num_classes)]
    total = math.fsum(weights)
    return [w / total for w in weights]


def check_class_proportions(proportions: Sequence[float], num_classes: int | None = None) -> list[float]:
    """Validate ``class_proportions`` (finite, >= 0, summing to 1 within 1e-6, one per class) and return them as floats."""
    values = [float(w) for w in proportions]
    if not all(math.isfinite(w) and w >= 0 for w in values) or abs(math.fsum(values) - 1.0) > 1e-6:
        raise ValueError(f"class_proportions must be finite, non-negative and sum to 1 (within 1e-6), got {values}; "
                         f"lit_otclust.data.geometric_proportions(num_classes, ratio) gives a long-tailed set")
    if num_classes is not None and len(values) != num_classes:
        raise ValueError(f"class_proportions has {len(values)} entries but the data have {num_classes} classes")
    return values


def proportional_counts(counts: Tensor, proportions: Sequence[float], size: int | None = None) -> Tensor:
    """How many samples of each class to keep so that the classes follow ``proportions``.

    With ``size=None``, the largest sample the classes allow: with :math:`n_c` samples of class
    :math:`c` and proportion :math:`w_c`, the total is :math:`s = \\min_{c : w_c > 0} n_c / w_c` and
    class :math:`c` keeps :math:`\\lfloor w_c s \\rfloor`, so the class that runs out first keeps all
    its samples (with a long-tailed ``w`` on balanced data: the largest class is kept whole).
    With ``size``, exactly that many: :math:`\\lfloor w_c \\, size \\rfloor` each, the remainder going one
    by one to the classes with the largest fractional parts.

    Args:
        counts: samples available per class, shape (C,), int64.
        proportions: w, C non-negative weights summing to 1.
        size: the total to keep, or None for the largest possible.

    Returns:
        Per-class counts, shape (C,), int64, each at most ``counts``.

    Raises:
        ValueError: a class with a positive proportion has no samples, or ``size`` asks a class for
            more samples than it has (the message names the class and the largest possible size).
    """
    w = torch.tensor(list(proportions), dtype=torch.float64)  # (C,)
    n = counts.to(torch.float64)  # (C,)
    if len(w) != len(n):
        raise ValueError(f"{len(w)} proportions for {len(n)} classes")
    used = w > 0
    if (n[used] == 0).any():
        empty = torch.nonzero(used & (n == 0)).flatten().tolist()
        raise ValueError(f"class(es) {empty} have no samples but a positive class proportion")
    # The classes that bind first keep all their samples; the 1e-6 absorbs n_c / w_c * w_c rounding below n_c.
    largest = torch.floor(w * (n[used] / w[used]).min() + 1e-6).long().minimum(counts)  # (C,)
    if size is None:
        return largest
    quota = torch.floor(w * size).long()  # (C,)
    short = size - int(quota.sum())
    if short > 0:
        remainder = w * size - quota  # largest remainders first, ties to the lower class
        quota[torch.argsort(-remainder, stable=True)[:short]] += 1
    over = torch.nonzero(quota > counts).flatten().tolist()
    if over:
        c = over[0]
        raise ValueError(f"subset={size} with class_proportions asks class {c} for {int(quota[c])} samples but it has "
                         f"{int(counts[c])}; at most {int(largest.sum())} samples can follow these proportions")
    return quota


def proportional_indices(labels: Tensor, proportions: Sequence[float], size: int | None, seed: int) -> Tensor:
    """A seeded per-class draw whose class counts are :func:`proportional_counts` of the labels.

    Args:
        labels: class of each sample, shape (N,), int64, values in [0, C), C = len(proportions).
        proportions: w, the class proportions of the draw.
        size: samples to draw, or None for as many as the proportions allow.
        seed: seed of the draw; the same (labels, proportions, size, seed) give the same positions.

    Returns:
        Sorted positions, shape (sum of the counts,), int64, without repeats.
    """
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= len(proportions)):
        raise ValueError(f"labels must lie in [0, {len(proportions)}) to follow {len(proportions)} class proportions")
    counts = torch.bincount(labels, minlength=len(proportions))  # (C,)
    quota = proportional_counts(counts, proportions, size)
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for label, q in enumerate(quota.tolist()):
        members = torch.nonzero(labels == label).squeeze(1)  # (n_c,)
        chosen.append(members[torch.randperm(len(members), generator=generator)[:q]])
    return torch.sort(torch.cat(chosen)).values


def random_indices(num_samples: int, size: int, seed: int) -> Tensor:
    """``size`` sorted seeded positions out of ``num_samples``: the subset of unlabelled data."""
    if not 1 <= size <= num_samples:
        raise ValueError(f"size={size} must lie in [1, {num_samples}]")
    generator = torch.Generator().manual_seed(seed)
    return torch.sort(torch.randperm(num_samples, generator=generator)[:size]).values


DEFAULT_EVAL_BATCH_SIZE = 500  # evaluation batches of a data set of unknown shape (see _InMemoryDataModule)


def eval_batch_size(datamodule: object) -> int:
    """The data module's evaluation batch (``eval_batch_size``, the data set's fastest), ``DEFAULT_EVAL_BATCH_SIZE``
    for one without: the embedding passes of the k-means init and the pictures run in these batches."""
    return getattr(datamodule, "eval_batch_size", DEFAULT_EVAL_BATCH_SIZE)


class _InMemoryDataModule(L.LightningDataModule):
    """What every data module here shares: samples held as tensors, seeded subsets, the loaders.

    A subclass reads its samples in ``setup`` into ``fit_set`` (the samples clustered) and
    ``heldout_set`` (scored out of sample; None where there is none; ``heldout_offset`` where it is
    ``fit_set``'s tail from that index on) and states ``num_classes``
    and ``input_shape`` as class attributes or in ``__init__``, so LightningCLI's
    ``link_arguments(..., apply_on="instantiate")`` can read them off the instance.

    Args:
        batch_size: training batch size m (the paper: 300).
        eval_batch_size: batch size of the validation, test and predict loaders (and of the embedding
            passes of the k-means init and the pictures); None: ``default_eval_batch_size``, the fastest
            measured for the data set (evaluation is memory-bound: larger batches spill the caches).
        subset: if set, a seeded subset of that many fitted samples, class-stratified where there
            are labels (see the subclass for the held-out set).
        class_proportions: if set, a seeded per-class subsample of the fitted samples whose
            classes follow these proportions (one per class, summing to 1; see
            :func:`proportional_counts`): the largest sample they allow, the class that runs out
            first kept whole (with ``subset``: exactly ``subset`` samples). The held-out samples
            are drawn the same way (capped at ``subset``). Needs labels. For the OT loss, give the
            model the same weights: ``--model.proportions`` must match (in a YAML config, state
            them once with an anchor: ``class_proportions: &w [...]`` and ``proportions: *w``).
            :func:`geometric_proportions` builds a long-tailed set with a given largest/smallest ratio.
        seed: seed of the subset draws and of the training order (see EpochShuffleSampler).
        scaling: "unit" or "standard" (see the subclass for the statistics used).
        drop_last: drop the last incomplete training batch, so every OT batch has exactly
            batch_size samples and the cluster-size marginal is meaningful.
        num_workers: DataLoader workers; 0 is fastest here, a batch being a single gather.
        on_device: keep the samples on the training device: each loader moves its sample set
            there once (to the trainer's ``strategy.root_device``; without a trainer they stay
            where they are), and a batch is then one index gather in device memory, with no
            gather on the host and no host-to-device copy per batch. On a GPU the whole set must
            fit beside the model (MNIST 220 MB float32, CIFAR-10 700 MB); under DDP every rank
            holds a full copy on its own device. On CPU it changes nothing. Needs
            ``num_workers=0``: worker processes cannot share device tensors.

    Every loader yields ``(x, y, index)``: x float32 (B, *input_shape), y int64 (B,) (-1 where a
    sample has no label), and index int64 (B,), the sample's position in that loader's sample set
    (fitted or held-out), so predictions can be written per sample also when DDP interleaves
    samples across ranks.
    """

    name: str
    num_classes: int
    input_shape: tuple[int, ...]
    _no_heldout_hint = ""  # how to give this module a held-out set, for the error of test_dataloader
    # Evaluation batches, unless eval_batch_size says otherwise. An evaluation pass is memory-bound: a CIFAR-10
    # evaluation (60k images, the conv encoder, 2 threads) took 9.5 s in batches of 10,000, 6.5 s of 2,000, 3.4 s
    # of 500 and 3.5 s of 250; MNIST's (70k, the MLP) 0.70 s of 10,000, 0.58 s of 2,000, 0.66 s of 500 (1 thread:
    # 1.10, 0.87, 0.97 s) (python -m benchmarks.bench_eval_batch, benchmarks/results/bench_eval_batch.txt).
    # 500 for images of unknown shape; MNISTDataModule takes 2,000.
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
        if subset is not None and subset < 1:
            raise ValueError(f"subset={subset} must be at least 1")
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

    # --- which samples -------------------------------------------------------------------------

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
        """``on_device``: move the dataset's tensors to the trainer's device, once (a no-op when there already).

        Outside a Trainer (``self.trainer`` is None) they stay where they are.
        """
        if self.trainer is None:
            return
        device = self.trainer.strategy.root_device
        if dataset.x.device != device:
            dataset.x = dataset.x.to(device)
        if dataset.y.device != device:
            dataset.y = dataset.y.to(device)

    def _loader(self, dataset: InMemoryDataset | None, train: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for a dataloader")
        if self.on_device:
            self._move_to_device(dataset)
        common = dict(collate_fn=passthrough, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        if train:
            # drop_last keeps every batch at batch_size, so the OT cluster-size marginal applies to
            # a full batch. Under DDP, Lightning swaps the RandomSampler for a DistributedSampler.
            sampler = EpochShuffleSampler(dataset, self.seed)
            return ResumableLoader(dataset, batch_size=self.batch_size, sampler=sampler, drop_last=self.drop_last, **common)
        sampler = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            if len(dataset) < dist.get_world_size():
                # A rank with no evaluation batch skips the evaluation loop while the others wait for it.
                raise ValueError(f"an evaluation set of {len(dataset)} samples cannot be shared by "
                                 f"{dist.get_world_size()} ranks; use more samples (data subset) or fewer devices")
            # Lightning's default DistributedSampler pads with repeated samples; this one does not,
            # so each sample is evaluated exactly once. Lightning keeps a DistributedSampler subclass.
            sampler = UnrepeatedDistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=False)
        return DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False, sampler=sampler, drop_last=False, **common)

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches ``(x, y, index)`` of the fitted samples, ``batch_size`` each."""
        return self._loader(self.fit_set, train=True)

    def val_dataloader(self) -> list[DataLoader]:
        """[fitted samples in order (clustering accuracy), held-out samples in order (if any)].

        Where the held-out samples are the tail of the fitted ones (``heldout_offset`` set: fit_split
        "all" or "test", whole), only the fitted loader: the system scores ``heldout/*`` on the tail of
        that pass instead of embedding the same images twice (10k of 80k MNIST images an epoch).
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


def _standardize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """(x - mean) / std per channel, in place, for x of shape (N, C, H, W) or (N, d) with C = 1."""
    shape = (-1,) + (1,) * (x.dim() - 2)  # broadcast over (N, C, H, W) or (N, 784)
    return x.sub_(torch.tensor(mean, dtype=x.dtype).view(shape)).div_(torch.tensor(std, dtype=x.dtype).view(shape))


class _ImageDataModule(_InMemoryDataModule):
    """A LightningDataModule serving one torchvision image data set from memory; subclasses name the files.

    Args:
        data_dir: folder holding the data set in torchvision's layout (``MNIST/raw/...`` or
            ``cifar-10-batches-py/...``).
        download: let ``prepare_data`` download missing files (needs internet).
        batch_size: training batch size m (the paper: 300).
        eval_batch_size: batch size of the validation, test and predict loaders; None: the data set's
            ``default_eval_batch_size`` (see :class:`_InMemoryDataModule`).
        fit_split: "train", "test" or "all": which samples are clustered (see the module docstring).
        subset: if set, a seeded class-stratified subset of that many fitted samples; the held-out
            test split is cut the same way to min(subset, 10,000) samples, so smoke runs stay fast.
        class_proportions: an imbalanced version of the data set: a seeded per-class subsample
            with these class proportions (one float per class, summing to 1; see
            :class:`_InMemoryDataModule`), e.g. ``geometric_proportions(10, 10.0)``; the test split is
            subsampled the same way. ``--model.proportions`` must match for the OT loss to use them.
        classes: keep only these classes (e.g. ``[3, 8]``: two digits), relabelled 0, 1, ... in the
            order given, in the fitted and the held-out samples; ``num_classes`` (hence the model's
            number of clusters, linked by the CLI) becomes their number. ``class_proportions`` and
            ``subset`` then apply to the kept samples, ``class_proportions[i]`` to ``classes[i]``.
        seed: seed of the subset draw and of the training order (see EpochShuffleSampler).
        scaling: "unit" for pixels / 255 in [0, 1]; "standard" for (pixel / 255 - mean) / std per
            channel, with the official training split's ``mean`` and ``std``.
        drop_last: drop the last incomplete training batch, so every OT batch has exactly
            batch_size samples and the cluster-size marginal is meaningful.
        num_workers: DataLoader workers; 0 is fastest here, a batch being a single gather.
        on_device: keep the samples on the training device (a GPU), each batch one index gather
            there; see :class:`_InMemoryDataModule`. Needs ``num_workers=0``.

    Every loader yields ``(x, y, index)``: x float32 (B, *input_shape), y int64 (B,), and index
    int64 (B,), the sample's position in that loader's sample set (fitted or held-out), so
    predictions can be written per sample also when DDP interleaves samples across ranks.
    ``num_classes`` and ``input_shape`` are attributes (``num_classes`` set per instance when
    ``classes`` is given), for LightningCLI ``link_arguments``.

    Raises:
        ValueError: unknown fit_split or scaling; subset outside [1, available]; batch_size or
            eval_batch_size below 1; batch_size above the fitted samples with drop_last; on_device
            with num_workers > 0; class_proportions not one non-negative number per class summing
            to 1, or (in ``setup``) asking a class for more samples than it has; classes with
            repeats, fewer than 2, or outside [0, 10).
        FileNotFoundError: in ``setup``, when files are missing (names the folder and the files).
    """

    name: str
    num_classes: int = 10
    input_shape: tuple[int, ...]
    split_sizes: dict[str, int]  # samples in the official train and test splits
    folder: str  # relative to data_dir
    files: tuple[str, ...]  # expected inside folder
    mean: tuple[float, ...]  # per channel, of the training split, pixels in [0, 1]
    std: tuple[float, ...]

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = True,
        batch_size: int = 300,
        eval_batch_size: int | None = None,
        fit_split: str = "all",
        subset: int | None = None,
        class_proportions: list[float] | None = None,
        classes: list[int] | None = None,
        seed: int = 0,
        scaling: str = "unit",
        drop_last: bool = True,
        num_workers: int = 0,
        on_device: bool = False,
    ) -> None:
        if classes is not None:
            if len(set(classes)) != len(classes) or len(classes) < 2 or not all(0 <= c < self.num_classes for c in classes):
                raise ValueError(f"classes={list(classes)} must be at least 2 distinct classes of [0, {self.num_classes})")
            self.num_classes = len(classes)  # before the base class checks class_proportions against it
        self.classes = None if classes is None else [int(c) for c in classes]
        if fit_split not in FIT_SPLITS:
            raise ValueError(f"fit_split={fit_split!r} is unknown; choose one of {FIT_SPLITS}")
        available = self.split_sizes["train"] + self.split_sizes["test"] if fit_split == "all" else self.split_sizes[fit_split]
        if subset is not None and not 1 <= subset <= available:
            raise ValueError(f"subset={subset} must lie in [1, {available}], the {self.name} samples in fit_split={fit_split!r}")
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size, subset=subset,
                         class_proportions=class_proportions, seed=seed, scaling=scaling, drop_last=drop_last,
                         num_workers=num_workers, on_device=on_device)
        if class_proportions is None or subset is not None:  # else the size is known after reading the labels
            self._check_fit_size(available if subset is None else subset)
        self.data_dir = Path(data_dir)
        self.download = download
        self.fit_split = fit_split

    # --- reading -------------------------------------------------------------------------------

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        """Return uint8 images (N, *input_shape) and int64 labels (N,) of one official split."""
        raise NotImplementedError

    def _torchvision_dataset(self, train: bool, download: bool):
        raise NotImplementedError

    def _expected_paths(self) -> str:
        """The files a data_dir must hold, relative to it, for the error messages."""
        return ", ".join(f"{self.folder}/{name}" for name in self.files)

    def _downloaded(self) -> bool:
        """Whether ``prepare_data`` has nothing to download: torchvision's own test (MNIST: the files exist)."""
        return all((self.data_dir / self.folder / name).is_file() for name in self.files)

    def _check_files(self) -> None:
        folder = self.data_dir / self.folder
        missing = [name for name in self.files if not (folder / name).is_file()]
        if missing:
            how = "call prepare_data() first (the Trainer does) to download them" if self.download else "or set download=True (needs internet)"
            raise FileNotFoundError(
                f"{self.name} files not found in {folder}: missing {', '.join(missing)}. "
                f"Expected {self._expected_paths()} under data_dir. "
                f"Set data_dir to the folder that holds {self.folder.split('/')[0]}/ (on these machines ../shared/data), {how}."
            )

    def prepare_data(self) -> None:
        """Download the files (Lightning runs this on one process per node only)."""
        if not self.download or self._downloaded():
            # Files present: nothing to fetch. torchvision's constructor with download=True would also read (CIFAR-10:
            # unpickle) every image here for setup() to read again: 1.3 s of each CIFAR-10 run's start, 0.05 s of
            # MNIST's (benchmarks/results/bench_data_prepare_2026-11-26.txt). setup() reads them through torchvision
            # and names a corrupt file.
            return
        for train in (True, False):
            try:
                self._torchvision_dataset(train, download=True)  # a no-op when the files are already there
            # torchvision turns a failed download (no internet: URLError) into a RuntimeError of its own.
            except (OSError, RuntimeError) as error:
                raise RuntimeError(
                    f"could not download {self.name} into data_dir {self.data_dir}: {error}. Without internet, set "
                    f"data_dir to a folder that holds {self._expected_paths()} "
                    f"(on these machines ../shared/data; on the command line --data.data_dir), or put the files "
                    f"there; download=False (--data.download false) then never tries the network."
                ) from error

    def setup(self, stage: str | None = None) -> None:
        """Build the fitted and held-out tensors, once for every stage."""
        if self.fit_set is not None:
            return
        self._check_files()
        test_x, test_y = self._keep_classes(*self._read_split(train=False))
        if self.fit_split == "test":
            fit_x, fit_y = test_x, test_y
        else:
            train_x, train_y = self._keep_classes(*self._read_split(train=True))
            fit_x, fit_y = (train_x, train_y) if self.fit_split == "train" else (torch.cat([train_x, test_x]), torch.cat([train_y, test_y]))
        if self.classes is not None:
            self._check_fit_size(len(fit_y))
        if self.subset is not None or self.class_proportions is not None:
            fit_keep, test_keep = self._fit_indices(fit_y), self._heldout_indices(test_y)
            self._check_fit_size(len(fit_keep))
            # Convert only the kept uint8 rows: a small subset never builds the full float tensor.
            self.fit_set = InMemoryDataset(self._to_float(fit_x[fit_keep]), fit_y[fit_keep])
            self.heldout_set = InMemoryDataset(self._to_float(test_x[test_keep]), test_y[test_keep])
        elif self.fit_split == "train":
            self.fit_set = InMemoryDataset(self._to_float(fit_x), fit_y)
            self.heldout_set = InMemoryDataset(self._to_float(test_x), test_y)
        else:
            # The test split is the tail of the fitted tensor: a view shares its memory instead of
            # converting the same 10k images twice.
            self.fit_set = InMemoryDataset(self._to_float(fit_x), fit_y)
            start = len(fit_y) - len(test_y)
            self.heldout_set = InMemoryDataset(self.fit_set.x[start:], self.fit_set.y[start:])
            self.heldout_offset = start

    def _keep_classes(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """The samples of ``classes`` only, relabelled by their position in ``classes`` (all if None)."""
        if self.classes is None:
            return images, labels
        relabel = torch.full((max(int(labels.max()), *self.classes) + 1,), -1, dtype=torch.int64)  # old -> new label; -1: dropped
        relabel[self.classes] = torch.arange(len(self.classes))
        new = relabel[labels]  # (N,)
        keep = new >= 0
        return images[keep], new[keep]

    def _to_float(self, images: Tensor) -> Tensor:
        """Map uint8 pixels (N, *input_shape) to float32 per ``scaling``."""
        x = images.to(torch.float32).div_(255.0)
        if self.scaling == "standard":
            # Channel statistics of the official training split (also for fit_split "test"/"all"),
            # the convention torchvision users know; the tests recompute them from the files.
            _standardize(x, self.mean, self.std)
        return x


class MNISTDataModule(_ImageDataModule):
    """MNIST digits, flattened to 784 values in [0, 1] for the paper's 500-250-10 MLP encoder.

    70,000 images: 60,000 train, 10,000 test. "standard" scaling uses mean 0.1307, std 0.3081.
    The arguments are those of :class:`_ImageDataModule`.
    """

    name = "MNIST"
    input_shape = (784,)
    default_eval_batch_size = 2_000  # the MLP's fastest (see _InMemoryDataModule)
    split_sizes = {"train": 60_000, "test": 10_000}
    folder = "MNIST/raw"
    files = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    mean = (0.1307,)
    std = (0.3081,)

    def _torchvision_dataset(self, train: bool, download: bool) -> torchvision.datasets.MNIST:
        return torchvision.datasets.MNIST(self.data_dir, train=train, download=download)

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        names = self.files[:2] if train else self.files[2:]
        try:
            dataset = self._torchvision_dataset(train, download=False)
        except (RuntimeError, ValueError) as error:  # a truncated or foreign file fails torchvision's parser
            raise RuntimeError(f"MNIST files {' / '.join(names)} in {self.data_dir / self.folder} are corrupted "
                               f"or truncated ({error}); replace them with the originals") from error
        return dataset.data.reshape(len(dataset.data), -1), dataset.targets.to(torch.int64)  # (N, 784), (N,)


class CIFAR10DataModule(_ImageDataModule):
    """CIFAR-10 images kept as 3x32x32 for the paper's convolutional encoder.

    60,000 images: 50,000 train, 10,000 test. "standard" scaling uses channel means
    (0.4914, 0.4822, 0.4465) and stds (0.2470, 0.2435, 0.2616). The arguments are those of
    :class:`_ImageDataModule`.
    """

    name = "CIFAR-10"
    input_shape = (3, 32, 32)
    split_sizes = {"train": 50_000, "test": 10_000}
    folder = "cifar-10-batches-py"
    files = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)

    def _torchvision_dataset(self, train: bool, download: bool) -> torchvision.datasets.CIFAR10:
        return torchvision.datasets.CIFAR10(self.data_dir, train=train, download=download)

    def _downloaded(self) -> bool:
        # torchvision's test for CIFAR-10 (CIFAR10.download): the batches' md5s, so a corrupt file is fetched again.
        # 0.27 s, without unpickling the images.
        folder, cifar = self.data_dir / self.folder, torchvision.datasets.CIFAR10
        return super()._downloaded() and all(check_integrity(str(folder / name), md5)
                                             for name, md5 in cifar.train_list + cifar.test_list)

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        try:
            dataset = self._torchvision_dataset(train, download=False)
        except RuntimeError as error:  # the files exist (checked before) but fail torchvision's md5
            raise RuntimeError(f"CIFAR-10 files in {self.data_dir / self.folder} are corrupted: {error}") from error
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()  # (N, 32, 32, 3) -> (N, 3, 32, 32)
        return images, torch.as_tensor(dataset.targets, dtype=torch.int64)
