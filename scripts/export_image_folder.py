"""Write a torchvision data set's images as PNG files in class folders, the layout a user's own images have:
``python scripts/export_image_folder.py --dataset cifar10 --per_class 500 --out ../folder_data/cifar10_test_5k``.
``--dataset digits``: scikit-learn's 1,797 8x8 digits (grey levels 0-16 scaled to 0-255), all of them by default.

The folder path's defaults (configs/folder_example.yaml) are measured on such exports of data they were not chosen
on (configs/studies/folder_defaults.yaml). Images are taken from the test split, the first ``per_class`` of each
class in file order; class folders are named by torchvision's class names. Writes outside the repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image
from torchvision.datasets import CIFAR10, MNIST

class Digits:
    """scikit-learn's digits as a torchvision-like data set of (PIL image, label), classes named "0" to "9"."""

    def __init__(self, data_dir: str, train: bool = False, download: bool = False) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.images = np.round(digits.images * 255 / 16).astype(np.uint8)  # (1797, 8, 8)
        self.targets, self.classes = digits.target, [str(k) for k in range(10)]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.images[index]), int(self.targets[index])  # uint8 (8, 8): mode L


DATASETS = {"mnist": MNIST, "cifar10": CIFAR10, "digits": Digits}


def export(dataset: str, data_dir: str, out: str, per_class: int, train: bool = False) -> int:
    """Write the images; returns how many. An existing file is left as it is (the export is resumable)."""
    data = DATASETS[dataset](data_dir, train=train, download=False)
    counts: dict[int, int] = {}
    for index in range(len(data)):
        image, label = data[index]
        if counts.get(label, 0) >= per_class:
            continue
        counts[label] = counts.get(label, 0) + 1
        path = Path(out) / data.classes[label].replace(" ", "") / f"{index:05d}.png"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path)
    return sum(counts.values())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    parser.add_argument("--data_dir", default="../shared/data", help="torchvision's layout, as the data modules read")
    parser.add_argument("--out", required=True)
    parser.add_argument("--per_class", type=int, default=500)
    args = parser.parse_args()
    print(f"{export(args.dataset, args.data_dir, args.out, args.per_class)} images in {args.out}")
