"""The data pipeline with no model: decoding the files into tensors, then an epoch of batches and an evaluation pass.

    python -m benchmarks.bench_data --data-dir ../shared/data [--datasets mnist cifar10] [--rounds 3] [--pil-batches 20]

For each data set (``fit_split`` "all", the configs'): the seconds of ``prepare_data`` with the files present and of
``setup`` (decoding into float32 tensors), then, alternating round by round, one epoch of shuffled training batches
(batch_size 300, drop_last) and one pass over the two evaluation loaders; medians. ``--pil-batches N`` also times N
batches through torchvision's per-sample PIL + ToTensor path, the usual alternative, scaled to an epoch.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
import torchvision
from torch.utils.data import DataLoader

from benchmarks.harness import alternate, median
from lit_otclust.data import CIFAR10DataModule, MNISTDataModule

MODULES = {"mnist": (MNISTDataModule, torchvision.datasets.MNIST),
           "cifar10": (CIFAR10DataModule, torchvision.datasets.CIFAR10)}


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def drain(make_loader) -> int:
    return sum(len(batch[0]) for batch in make_loader())


def drain_all(make_loaders) -> int:
    return sum(len(batch[0]) for loader in make_loaders() for batch in loader)


def pil_epoch(dataset, batch_size: int, batches: int, epoch_batches: int) -> float:
    """Seconds of ``batches`` batches through the per-sample PIL path, scaled to ``epoch_batches``."""
    loader = iter(DataLoader(dataset, batch_size=batch_size, shuffle=True))
    return epoch_batches / batches * seconds(lambda: [next(loader) for _ in range(batches)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", choices=list(MODULES), default=list(MODULES))
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pil-batches", type=int, default=0, help="also time this many batches via PIL + ToTensor")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch_size {args.batch_size}, "
          f"median of {args.rounds}")
    for name in args.datasets:
        module_class, reference_class = MODULES[name]
        prepare_s = seconds(module_class(args.data_dir, download=True).prepare_data)
        module = module_class(args.data_dir, download=False, fit_split="all", batch_size=args.batch_size)
        setup_s = seconds(module.setup)
        runs = {"train epoch": partial(seconds, partial(drain, module.train_dataloader)),
                "evaluation pass": partial(seconds, partial(drain_all, module.val_dataloader))}
        if args.pil_batches:
            dataset = reference_class(args.data_dir, train=True, download=False,
                                      transform=torchvision.transforms.ToTensor())
            runs["PIL + ToTensor epoch"] = partial(pil_epoch, dataset, args.batch_size, args.pil_batches,
                                                   len(module.train_dataloader()))
        times = alternate(runs, args.rounds, log=False)
        megabytes = module.fit_set.x.element_size() * module.fit_set.x.nelement() / 2**20
        print(f"{name}: prepare_data {prepare_s:.3f} s, setup {setup_s:.2f} s ({len(module.fit_set)} fitted images, "
              f"{megabytes:.0f} MiB float32); " + ", ".join(f"{k} {median(v):.3f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()
