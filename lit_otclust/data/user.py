"""Cluster your own images: what the folder and array data modules share.

The folder (:mod:`lit_otclust.data.folder`) and array (:mod:`lit_otclust.data.arrays`) modules keep the contract of the
other data modules (:class:`~lit_otclust.data.base.InMemoryDataModule`): decoded once, in ``setup``, into float32
tensors, the same loaders and seeded subsamples.

``num_classes`` and ``input_shape`` are set in ``__init__`` from a look at the data (the folder listing and the first
image, or the array file's header and its labels), so LightningCLI links them to the model before the tensors are built.

Labels. With labels (class sub-folders, or a label array) the Hungarian accuracy, NMI and ARI are logged as for MNIST.
Without them every sample's label is -1: the label-based metrics are skipped, and ``num_classes`` must be given.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lit_otclust.data.base import InMemoryDataModule, standardize
from lit_otclust.data.loading import InMemoryDataset
from lit_otclust.data.sampling import check_class_proportions

NO_LABEL = -1


class UserDataModule(InMemoryDataModule):
    """What the folder and array modules share: the number of classes, and the float conversion.

    ``scaling="unit"`` maps uint8 pixels to [0, 1] (/ 255) and keeps float images as they are; ``"standard"`` then
    standardises each channel (each feature of features) by the fitted samples' ``mean`` and ``std`` (after ``subset``
    / ``class_proportions``), the held-out ones too.
    """

    _no_heldout_hint = ": give it held-out images"

    def _resolve_num_classes(self, num_classes: int | None, classes: Sequence | None, where: str) -> int:
        """The number of clusters: the classes found in the labels, or the user's ``num_classes`` without labels."""
        if classes is None:
            if num_classes is None:
                raise ValueError(f"{where} has no labels: set num_classes to the number of clusters to find")
            if num_classes < 2:
                raise ValueError(f"num_classes={num_classes} must be at least 2 (it is the number of clusters)")
            if self.class_proportions is not None:
                raise ValueError(f"class_proportions draws per class and needs labels; {where} has none")
            return num_classes
        if len(classes) < 2:
            raise ValueError(f"{where} has {len(classes)} class ({list(classes)}); clustering needs at least 2")
        if num_classes is not None and num_classes != len(classes):
            raise ValueError(f"num_classes={num_classes} but {where} has {len(classes)} classes ({preview(classes)}); "
                             f"leave num_classes unset to use them, or drop the labels to choose the number of clusters")
        if self.class_proportions is not None:
            check_class_proportions(self.class_proportions, len(classes))
        return len(classes)

    def _to_float(self, images: Tensor) -> Tensor:
        """uint8 (N, C, H, W) / 255, or float images as they are, to float32."""
        return images.to(torch.float32).div_(255.0) if images.dtype == torch.uint8 else images.to(torch.float32)

    def _build(self, fit: tuple[Tensor, Tensor, list[str] | None],
               heldout: tuple[Tensor, Tensor, list[str] | None] | None) -> None:
        """Set ``fit_set`` / ``heldout_set`` from (images, labels, paths), scaled per ``scaling``."""
        x = self._to_float(fit[0])
        self._check_fit_size(len(x))
        heldout_x = None if heldout is None else self._to_float(heldout[0])
        if self.scaling == "standard":
            dims = (0, *range(2, x.dim()))  # per channel of images (N, C, H, W), per feature of features (N, d)
            mean = x.mean(dim=dims, dtype=torch.float64)  # (C,) or (d,)
            # A constant channel (std 0) is only centred: dividing by 0 would turn it into NaN.
            std = x.std(dim=dims).double().clamp_min(1e-12) if len(x) > 1 else torch.ones_like(mean)
            self.mean, self.std = tuple(mean.tolist()), tuple(std.tolist())
            for images in (x, heldout_x):
                if images is not None:
                    standardize(images, self.mean, self.std)
        self.fit_set = InMemoryDataset(x, fit[1], fit[2])
        self.heldout_set = None if heldout is None else InMemoryDataset(heldout_x, heldout[1], heldout[2])


def preview(items: Sequence, limit: int = 5) -> str:
    """The first ``limit`` items, comma-separated, for an error message."""
    shown = ", ".join(str(item) for item in list(items)[:limit])
    return shown + (", ..." if len(items) > limit else "")
