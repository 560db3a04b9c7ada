"""A folder of image files as a data module: one sub-folder per class, or unlabelled.

Every file is decoded with PIL into values in [0, 1], by these rules:

- orientation: the EXIF orientation tag is applied (``ImageOps.exif_transpose``), so an image
  has the orientation a viewer shows, and its (H, W) is that orientation's;
- 8-bit images (modes ``1``, ``L``, ``P``, ``RGB``, ``CMYK``, ...): / 255;
- 16-bit images (``I;16``, ``I;16B``, ...): / 65535;
- 32-bit integer images (``I``): / 65535 when every value lies in [0, 65535] (PIL reads 16-bit
  PGM and some 16-bit TIFFs as ``I``, a PGM of another maxval rescaled to that range), else
  min-max scaled by the image's own range (a constant image reads 0);
- float images (``F``, float TIFFs): kept when every value lies in [0, 1], else min-max scaled by
  the image's own range; NaN or inf makes the file unreadable;
- transparency (``RGBA``, ``LA``, ``PA``, a palette or ``L``/``RGB`` image with a transparent
  colour): composited onto a white background, as the image shows on a white page;
- channels: ``grayscale`` reads PIL's ``L`` (ITU-R 601-2 luma), else ``RGB``; a single-channel
  16-bit, 32-bit or float image is repeated into the three channels.

PIL for every format, not ``torchvision.io.decode_image``: torchvision's decoders are deprecated, read no TIFF, BMP or
PGM, and drop the alpha of WebP and GIF images. 16-bit colour PNGs are read at 8 bits a channel (the top byte).

Unreadable files. ``__init__`` decodes every file (fitted and held-out) before anything runs: a header can read fine in
a truncated file, and LightningCLI builds the data module before the trainer and its loggers. If any file fails,
:class:`UnreadableImagesError` names the count and the first files with their reasons, and the full list
(``<path><TAB><reason>`` lines) is written to the temp folder (:func:`unreadable_list_path`), never into the image
folder. With ``skip_unreadable=True`` the readable files are used instead, with one warning; ``predict`` then has no row
for the skipped files. Files are only read, never moved or changed.

Images of unequal size are resized to ``image_size`` (H, W), by default the first image's, bilinear with antialias,
the aspect ratio not kept. Labels and the rest of the contract: :mod:`lit_otclust.data.user`.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor
from torchvision.transforms.v2.functional import pil_to_tensor, resize

from lit_otclust.data.user import NO_LABEL, UserDataModule, preview

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
BACKGROUND = (255, 255, 255, 255)  # white: what transparent pixels show (module docstring)
ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
SHOWN_FAILURES = 5  # files named in the error; the rest are in the list file


class UnreadableImagesError(ValueError):
    """Image files that do not decode: its message names the count, the first files and the list file."""


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


def _unit_range(pixels: np.ndarray, mode: str) -> np.ndarray:
    """A 16-bit, 32-bit integer or float image (H, W) as float32 in [0, 1], by the rules of the module docstring."""
    pixels = pixels.astype(np.float64)  # exact for every 32-bit integer
    if not np.isfinite(pixels).all():
        raise ValueError("NaN or inf pixel values")
    full = 1.0 if mode == "F" else 65535.0  # the range a value of this mode usually spans
    if mode.startswith("I;16") or (pixels.min() >= 0 and pixels.max() <= full):
        return (pixels / full).astype(np.float32)
    low, span = pixels.min(), pixels.max() - pixels.min()
    return ((pixels - low) / span if span > 0 else pixels * 0).astype(np.float32)


def _read_image(path: Path, grayscale: bool) -> Tensor:
    """One image file as (C, H, W), C = 1 if ``grayscale`` else 3: uint8 for 8-bit images, else float32 in [0, 1].

    Raises whatever PIL raises on a file it cannot decode (:func:`_unreadable` turns it into a reason).
    """
    with Image.open(path) as image:
        image = ImageOps.exif_transpose(image)  # decodes the whole file, so a truncated one fails here
    if image.mode.startswith("I") or image.mode == "F":
        pixels = torch.from_numpy(_unit_range(np.asarray(image), image.mode))[None]  # (1, H, W)
        return pixels if grayscale else pixels.expand(3, -1, -1)
    if image.mode in ALPHA_MODES or "transparency" in image.info:
        image = Image.alpha_composite(Image.new("RGBA", image.size, BACKGROUND), image.convert("RGBA"))
    return pil_to_tensor(image.convert("L" if grayscale else "RGB"))


def _reason(path: Path, error: Exception) -> str:
    """Why a file does not decode, in a few words."""
    if path.is_file() and path.stat().st_size == 0:
        return "empty file (0 bytes)"
    if isinstance(error, UnidentifiedImageError):
        return "not an image PIL can read (unknown format)"
    return f"{type(error).__name__}: {error}"


def _unreadable(paths: list[Path], grayscale: bool) -> list[tuple[Path, str]]:
    """(path, reason) of each file of ``paths`` that does not decode as :func:`_read_image` decodes it."""
    failed = []
    for path in paths:
        try:
            _read_image(path, grayscale)
        # Any exception: PIL's format readers raise many types on a damaged file, and each means the same here.
        except Exception as error:
            failed.append((path, _reason(path, error)))
    return failed


def unreadable_list_path(data_dir: Path) -> Path:
    """Where the list of ``data_dir``'s unreadable files goes: the temp folder, one file per image folder."""
    digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / "lit_otclust" / f"unreadable-{data_dir.resolve().name}-{digest}.txt"


def _readable(paths: list[Path], labels: list[int], bad: set[Path]) -> tuple[list[Path], list[int]]:
    """``paths`` and their ``labels`` without the files in ``bad``."""
    kept = [i for i, path in enumerate(paths) if path not in bad]
    return [paths[i] for i in kept], [labels[i] for i in kept]


class ImageFolderDataModule(UserDataModule):
    """Images from a folder: one sub-folder per class (torchvision's ImageFolder layout), or unlabelled.

    Labelled (``labelled=True``)::

        data_dir/cat/001.png
        data_dir/cat/002.jpg
        data_dir/dog/abc.png

    the classes are the sub-folders in sorted order (``classes``), images found recursively inside each; images lying
    directly in ``data_dir`` are not used. Unlabelled (``labelled=False``): every image under ``data_dir``, labels -1,
    and ``num_classes`` gives the number of clusters. Files are taken in sorted path order; the fitted images' paths are
    ``fit_set.paths`` (``paths``: every readable file found). Decoding: the module docstring.

    Args:
        data_dir: the folder of images.
        image_size: (H, W), or one int, that every image is resized to; None: the first readable image's.
        grayscale: read images as one channel ("L"); else as three (RGB). ``input_shape`` is (1 or 3, H, W).
        labelled: whether the sub-folders of ``data_dir`` are classes (see above).
        heldout_dir: an optional second folder of the same layout, scored out of sample (``heldout/*``, the ``test``
            command); its class folders must be classes of ``data_dir``. Without it, ``test`` is refused.
        num_classes: the number of clusters, required without labels; with labels, unset or the class folders'.
        skip_unreadable: leave out the files that do not decode (``unreadable``, with a warning) instead of stopping.
        **loader: the loader settings of :class:`~lit_otclust.data.base.InMemoryDataModule`. Only the kept images
            are decoded in ``setup``; the held-out images are cut to at most ``subset`` the same way. "standard"
            ``scaling`` uses the statistics of the fitted images (:class:`UserDataModule`).

    Attributes:
        unreadable: (path, reason) of each file left out by ``skip_unreadable``; empty otherwise.
        unreadable_list: the file listing them (:func:`unreadable_list_path`), or None.

    Raises:
        FileNotFoundError: ``data_dir`` (or ``heldout_dir``) missing, without images, or (labelled) without class
            sub-folders or with an empty class folder; the message names the folder.
        UnreadableImagesError: files that do not decode, or, with ``skip_unreadable``, no readable file left.
        ValueError: ``num_classes`` missing without labels or disagreeing with the class folders; a held-out class
            unknown to ``data_dir``; the settings of the base class.
    """

    def __init__(
        self,
        data_dir: str,
        image_size: int | tuple[int, int] | None = None,
        grayscale: bool = False,
        labelled: bool = True,
        heldout_dir: str | None = None,
        num_classes: int | None = None,
        skip_unreadable: bool = False,
        **loader: Any,
    ) -> None:
        super().__init__(**loader)
        self.data_dir = Path(data_dir)
        self.name = f"images in {data_dir}"
        self.grayscale = grayscale
        self.labelled = labelled
        self.paths, self.classes, labels = _list_folder(self.data_dir, labelled, "data_dir")
        self.num_classes = self._resolve_num_classes(num_classes, self.classes, f"data_dir={str(self.data_dir)!r}")
        self.heldout_dir = None if heldout_dir is None else Path(heldout_dir)
        self._heldout_paths: list[Path] | None = None
        heldout_labels: list[int] = []
        if self.heldout_dir is not None:
            self._heldout_paths, heldout_classes, heldout_labels = _list_folder(self.heldout_dir, labelled, "heldout_dir")
            if heldout_classes is not None:
                unknown = sorted(set(heldout_classes) - set(self.classes))
                if unknown:
                    raise ValueError(f"heldout_dir={str(self.heldout_dir)!r} has class folders {unknown} that "
                                     f"data_dir={str(self.data_dir)!r} lacks (its classes: {preview(self.classes)})")
                # The held-out folder may lack classes: number its labels by data_dir's classes.
                heldout_labels = [self.classes.index(heldout_classes[label]) for label in heldout_labels]
        # Here, not in setup: a bad file stops the run before a W&B run exists (module docstring).
        found = len(self.paths) + len(self._heldout_paths or [])
        self.unreadable = _unreadable(self.paths + (self._heldout_paths or []), grayscale)
        self.unreadable_list = self._write_unreadable_list()
        if self.unreadable:
            bad = {path for path, _ in self.unreadable}
            self.paths, labels = _readable(self.paths, labels, bad)
            if self._heldout_paths is not None:
                self._heldout_paths, heldout_labels = _readable(self._heldout_paths, heldout_labels, bad)
            self._stop_or_warn(skip_unreadable, found)
        self._labels = torch.tensor(labels, dtype=torch.int64)  # (N,)
        self._heldout_labels = torch.tensor(heldout_labels, dtype=torch.int64)
        if image_size is None:
            image_size = tuple(_read_image(self.paths[0], grayscale=True).shape[1:])  # (H, W) as decoded
        elif isinstance(image_size, int):
            image_size = (image_size, image_size)
        if len(image_size) != 2 or min(image_size) < 1:
            raise ValueError(f"image_size={image_size!r} must be (H, W) with H, W >= 1, or one int")
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.input_shape = (1 if grayscale else 3, *self.image_size)
        self._check_subset(len(self.paths), f"the fitted {self.name} samples")

    def _write_unreadable_list(self) -> Path | None:
        """Write ``unreadable`` as ``<path><TAB><reason>`` lines; returns the file (None, and no file, if empty)."""
        listing = unreadable_list_path(self.data_dir)
        if not self.unreadable:
            listing.unlink(missing_ok=True)  # a list from an earlier run, before the files were fixed
            return None
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text("".join(f"{path}\t{reason}\n" for path, reason in self.unreadable))
        return listing

    def _stop_or_warn(self, skip: bool, found: int) -> None:
        """Stop on the unreadable files, naming the first few, or with ``skip`` warn once that they are left out."""
        count = len(self.unreadable)
        folders = str(self.data_dir) + ("" if self.heldout_dir is None else f" and {self.heldout_dir}")
        heading = f"{count} of {found} image files under {folders}"
        if skip and self.paths and self._heldout_paths != []:
            rank_zero_warn(f"skip_unreadable: {heading} cannot be read and are left out (not trained on, not "
                           f"predicted); they are listed in {self.unreadable_list}")
            return
        shown = "".join(f"\n  {path}: {reason}" for path, reason in self.unreadable[:SHOWN_FAILURES])
        more = f"\n  ... and {count - SHOWN_FAILURES} more" if count > SHOWN_FAILURES else ""
        remedy = ("no readable image is left in " + ("heldout_dir" if self.paths else "data_dir") if skip else
                  "replace or remove them, or set skip_unreadable: true (--data.skip_unreadable true) to leave "
                  "them out")
        raise UnreadableImagesError(f"{heading} cannot be read:{shown}{more}\n"
                                    f"All {count} are listed in {self.unreadable_list}; {remedy}")

    def _decode(self, paths: list[Path]) -> Tensor:
        """The images at ``paths`` as float32 (N, C, H, W) in [0, 1], resized to ``image_size`` where they differ."""
        images = torch.empty((len(paths), *self.input_shape), dtype=torch.float32)  # (N, C, H, W)
        resized = []
        for i, path in enumerate(paths):
            image = _read_image(path, self.grayscale)  # (C, h, w), uint8 or float32
            if tuple(image.shape[1:]) != self.image_size:
                # A uint8 image is resized as uint8 (rounded).
                image = resize(image, list(self.image_size), antialias=True)
                resized.append(path)
            images[i] = self._to_float(image[None])[0]
        if resized:
            rank_zero_info(f"{len(resized)} of {len(paths)} images resized to {self.image_size[0]}x{self.image_size[1]} "
                           f"(image_size), e.g. {resized[0]}")
        return images

    def setup(self, stage: str | None = None) -> None:
        """Decode the fitted (and held-out) images into float tensors, once for every stage."""
        if self.fit_set is not None:
            return
        fit = self._load(self.paths, self._labels, self._fit_indices(self._labels))
        heldout = None
        if self._heldout_paths is not None:
            heldout = self._load(self._heldout_paths, self._heldout_labels, self._heldout_indices(self._heldout_labels))
        self._build(fit, heldout)

    def _load(self, paths: list[Path], labels: Tensor, keep: Tensor | None) -> tuple[Tensor, Tensor, list[str]]:
        """(images, labels, paths) of the files at ``keep`` (all if None)."""
        pos = list(range(len(paths))) if keep is None else keep.tolist()
        chosen = [paths[i] for i in pos]
        return self._decode(chosen), labels[pos], [str(p) for p in chosen]
