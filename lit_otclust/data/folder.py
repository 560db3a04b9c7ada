"""A folder of image files as a data module: one sub-folder per class, or unlabelled.

Images of unequal size. Every image is resized to ``image_size`` (H, W), by default the size of
the first image in sorted path order, with ``torchvision.transforms.v2.functional.resize(...,
antialias=True)``: bilinear, the aspect ratio not kept. Crop your images beforehand if
stretching them would matter. Labels and the rest of the contract: :mod:`lit_otclust.data.user`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch import Tensor
from torchvision.transforms.v2.functional import pil_to_tensor, resize

from lit_otclust.data.user import NO_LABEL, UserDataModule, preview

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def _image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` (recursively, hidden files and folders left out), in sorted order."""
    return sorted(path for path in folder.rglob("*")
                  if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
                  and not any(part.startswith(".") for part in path.relative_to(folder).parts))


def _list_folder(folder: Path, labelled: bool, setting: str) -> tuple[list[Path], list[str] | None, list[int]]:
    """(image paths, class names or None, label of each path) of one folder."""
    if not folder.exists():
        raise FileNotFoundError(f"{setting}={str(folder)!r}: no such folder")
    if not folder.is_dir():
        raise NotADirectoryError(f"{setting}={str(folder)!r} is not a folder")
    if not labelled:
        paths = _image_files(folder)
        if not paths:
            raise FileNotFoundError(f"{setting}={str(folder)!r} holds no images (looked for {', '.join(IMAGE_EXTENSIONS)})")
        return paths, None, [NO_LABEL] * len(paths)
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise FileNotFoundError(f"{setting}={str(folder)!r} has no class sub-folders (the ImageFolder layout is "
                                f"{folder}/<class>/<image>); for one folder of images without classes set labelled=False")
    paths, labels = [], []
    for label, name in enumerate(classes):
        files = _image_files(folder / name)
        if not files:
            raise FileNotFoundError(f"class folder {str(folder / name)!r} holds no images "
                                    f"(looked for {', '.join(IMAGE_EXTENSIONS)})")
        paths += files
        labels += [label] * len(files)
    return paths, classes, labels


def _read_image(path: Path, mode: str) -> Tensor:
    """One image file as uint8 (C, H, W), converted to ``mode`` ("L" or "RGB")."""
    try:
        with Image.open(path) as image:
            return pil_to_tensor(image.convert(mode))
    except (OSError, ValueError, Image.DecompressionBombError) as error:  # UnidentifiedImageError is an OSError
        raise ValueError(f"cannot read image {path}: {error}") from error


def _image_size(path: Path) -> tuple[int, int]:
    """(H, W) of an image from its header, without decoding the pixels."""
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise ValueError(f"cannot read image {path}: {error}") from error
    return height, width


class ImageFolderDataModule(UserDataModule):
    """Images from a folder: one sub-folder per class (torchvision's ImageFolder layout), or unlabelled.

    Labelled (``labelled=True``)::

        data_dir/cat/001.png
        data_dir/cat/002.jpg
        data_dir/dog/abc.png

    the classes are the sub-folders in sorted order (``classes``), images found recursively
    inside each; images lying directly in ``data_dir`` are not used. Unlabelled
    (``labelled=False``): every image under ``data_dir`` (recursively), labels -1, and
    ``num_classes`` gives the number of clusters. Files are taken in sorted path order; the fitted
    images' paths are ``fit_set.paths`` (and ``paths`` lists every file found), so predictions
    name their files. Decoding uses PIL (8-bit images; alpha dropped).

    Args:
        data_dir: the folder of images.
        image_size: (H, W), or one int for square images, that every image is resized to (see the
            module docstring); None: the size of the first image.
        grayscale: read images as one channel ("L"); else as three (RGB). ``input_shape`` is
            (1 or 3, H, W).
        labelled: whether the sub-folders of ``data_dir`` are classes (see above).
        heldout_dir: an optional second folder of the same layout, scored out of sample
            (``heldout/*`` metrics, the ``test`` command). Its class folders must be classes of
            ``data_dir``. Without it, validation scores the fitted images only and ``test`` is refused.
        num_classes: the number of clusters, required without labels; with labels it is the number
            of class folders and may be left unset (if given, it must agree).
        **loader: the loader settings of :class:`~lit_otclust.data.base.InMemoryDataModule`
            (batch_size, eval_batch_size, subset, class_proportions, seed, scaling, drop_last,
            num_workers, on_device). ``subset`` draws a seeded subset of the fitted images
            (class-stratified with labels) and only those are decoded; the held-out images are cut
            to at most ``subset`` the same way. ``class_proportions`` needs labels. "standard"
            ``scaling`` uses the statistics of the fitted images (:class:`UserDataModule`).

    Raises:
        FileNotFoundError: ``data_dir`` (or ``heldout_dir``) missing, without images, or (labelled)
            without class sub-folders or with an empty class folder; the message names the folder.
        ValueError: an image PIL cannot read (names the file, in ``__init__`` for the first image,
            else in ``setup``); ``num_classes`` missing without labels or disagreeing with the
            class folders; a held-out class unknown to ``data_dir``; the settings of the base class.
    """

    def __init__(
        self,
        data_dir: str,
        image_size: int | tuple[int, int] | None = None,
        grayscale: bool = False,
        labelled: bool = True,
        heldout_dir: str | None = None,
        num_classes: int | None = None,
        **loader: Any,
    ) -> None:
        super().__init__(**loader)
        self.data_dir = Path(data_dir)
        self.name = f"images in {data_dir}"
        self.grayscale = grayscale
        self.labelled = labelled
        # Listing the files and reading one header is cheap; the pixels are decoded in setup.
        self.paths, self.classes, labels = _list_folder(self.data_dir, labelled, "data_dir")
        self._labels = torch.tensor(labels, dtype=torch.int64)  # (N,)
        self.num_classes = self._resolve_num_classes(num_classes, self.classes, f"data_dir={str(self.data_dir)!r}")
        self.heldout_dir = None if heldout_dir is None else Path(heldout_dir)
        self._heldout_paths: list[Path] | None = None
        if self.heldout_dir is not None:
            self._heldout_paths, heldout_classes, heldout_labels = _list_folder(self.heldout_dir, labelled, "heldout_dir")
            if heldout_classes is not None:
                unknown = sorted(set(heldout_classes) - set(self.classes))
                if unknown:
                    raise ValueError(f"heldout_dir={str(self.heldout_dir)!r} has class folders {unknown} that "
                                     f"data_dir={str(self.data_dir)!r} lacks (its classes: {preview(self.classes)})")
                # The held-out folder may lack classes: number its labels by data_dir's classes.
                heldout_labels = [self.classes.index(heldout_classes[label]) for label in heldout_labels]
            self._heldout_labels = torch.tensor(heldout_labels, dtype=torch.int64)
        if image_size is None:
            image_size = _image_size(self.paths[0])
        elif isinstance(image_size, int):
            image_size = (image_size, image_size)
        if len(image_size) != 2 or min(image_size) < 1:
            raise ValueError(f"image_size={image_size!r} must be (H, W) with H, W >= 1, or one int")
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.input_shape = (1 if grayscale else 3, *self.image_size)
        self._check_subset(len(self.paths), f"the fitted {self.name} samples")

    def _decode(self, paths: list[Path]) -> Tensor:
        """The images at ``paths`` as uint8 (N, C, H, W), resized to ``image_size`` where they differ."""
        mode = "L" if self.grayscale else "RGB"
        images = torch.empty((len(paths), *self.input_shape), dtype=torch.uint8)  # (N, C, H, W)
        resized = []
        for i, path in enumerate(paths):
            image = _read_image(path, mode)  # (C, h, w)
            if tuple(image.shape[1:]) != self.image_size:
                image = resize(image, list(self.image_size), antialias=True)
                resized.append(path)
            images[i] = image
        if resized:
            rank_zero_info(f"{len(resized)} of {len(paths)} images resized to {self.image_size[0]}x{self.image_size[1]} "
                           f"(image_size), e.g. {resized[0]}")
        return images

    def setup(self, stage: str | None = None) -> None:
        """Decode the fitted (and held-out) images into float tensors, once for every stage."""
        if self.fit_set is not None:
            return
        keep = self._fit_indices(self._labels)
        fit_pos = list(range(len(self.paths))) if keep is None else keep.tolist()
        fit_paths = [self.paths[i] for i in fit_pos]
        fit = (self._decode(fit_paths), self._labels[fit_pos], [str(p) for p in fit_paths])
        heldout = None
        if self._heldout_paths is not None:
            keep = self._heldout_indices(self._heldout_labels)
            pos = list(range(len(self._heldout_paths))) if keep is None else keep.tolist()
            paths = [self._heldout_paths[i] for i in pos]
            heldout = (self._decode(paths), self._heldout_labels[pos], [str(p) for p in paths])
        self._build(fit, heldout)
