"""What Lightning's training loop costs per step by itself: a no-op model on the MNIST-sized loader.

    python -m benchmarks.bench_lightning_floor [--epochs 2] [--threads 1]

The model's step does no work, so each figure is the loop's own time per batch of 300 from 70,000
in-memory samples (the loader of ``lit_otclust.data``): a plain ``for batch in loader``, then
``Trainer.fit`` without callbacks, with the progress bar as the CLI sets it (every 10th step), and
with the checkpoint callbacks the CLI adds; last, the no-op under manual optimisation. It is the floor under ``benchmarks/bench_fit.py``'s per-step ratio: Lightning's part of a
~20 ms MNIST step.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar

from lit_otclust.checkpointing import SignalCheckpoint
from lit_otclust.data import EpochShuffleSampler, InMemoryDataset, ResumableLoader, passthrough


class NoOp(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return self.w.sum() * 0.0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class ManualNoOp(NoOp):
    """The same no-op step under manual optimisation (the step calls backward and the optimizer itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self.w.sum() * 0.0)
        opt.step()


class EpochTimer(L.Callback):
    def __init__(self) -> None:
        self.ms: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._t = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.ms.append(1e3 * (time.perf_counter() - self._t) / trainer.num_training_batches)


def loader(ds: InMemoryDataset) -> ResumableLoader:
    return ResumableLoader(ds, batch_size=300, sampler=EpochShuffleSampler(ds, 0), drop_last=True, collate_fn=passthrough)


def fit_ms(module: L.LightningModule, ds: InMemoryDataset, epochs: int, root: str,
           callbacks: list[L.Callback] = ()) -> float:
    """Best epoch's ms per step of ``Trainer.fit`` with no logger, and checkpoints or a progress bar only if given."""
    timer = EpochTimer()
    trainer = L.Trainer(max_epochs=epochs, logger=False, default_root_dir=root, num_sanity_val_steps=0,
                        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
                        enable_progress_bar=any(isinstance(c, TQDMProgressBar) for c in callbacks),
                        enable_model_summary=False, callbacks=[timer, *callbacks])
    trainer.fit(module, loader(ds))
    return min(timer.ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ds = InMemoryDataset(torch.rand(70_000, 784), torch.zeros(70_000, dtype=torch.long))
    start = time.perf_counter()
    batches = sum(1 for _ in loader(ds))
    print(f"plain loop over the loader:          {1e3 * (time.perf_counter() - start) / batches:.2f} ms/step")
    with tempfile.TemporaryDirectory() as root:
        for name, callbacks in (("Trainer.fit, no callbacks", []),
                                ("+ progress bar (every 10th step)", [TQDMProgressBar(refresh_rate=10)]),
                                ("+ ModelCheckpoint + SignalCheckpoint", [ModelCheckpoint(dirpath=root, save_last=True),
                                                                         SignalCheckpoint()])):
            print(f"{name + ':':36s} {fit_ms(NoOp(), ds, args.epochs, root, callbacks):.2f} ms/step (best of {args.epochs} epochs)")
        # What automatic optimisation (closure, backward and optimizer hooks) costs: the lever a manual loop
        # would pull, at the price of Trainer features it disables (gradient_clip_val, accumulate_grad_batches).
        ms = fit_ms(ManualNoOp(), ds, args.epochs, root)
        print(f"{'Trainer.fit, manual optimisation:':36s} {ms:.2f} ms/step (best of {args.epochs} epochs)")


if __name__ == "__main__":
    main()
