"""The paper's algorithm as a training schedule: autoencoder pre-training, then k-means initialisation of the
centers, then the joint loss (:class:`PhaseSwitch`, configured under ``phases:``)."""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from lit_otclust.clustering import constrained_kmeans, embed_samples, kmeans, match_sizes
from lit_otclust.data import eval_batch_size
from lit_otclust.sinkhorn import squared_distances

MATCHINGS = ("none", "sizes")


def sized(pl_module: L.LightningModule) -> bool:
    """Whether the module's loss constrains the cluster sizes to a non-uniform w: where the defaults of
    ``center_init`` and ``refit_epochs`` use w."""
    w = getattr(pl_module, "proportions", None)
    uniform = w is None or torch.allclose(w, torch.full_like(w, 1 / len(w)))
    return getattr(getattr(pl_module, "loss", None), "constrains_sizes", False) and not uniform


class PhaseSwitch(L.Callback):
    """Autoencoder pre-training for ``pretrain_epochs``, then k-means init of mu, then the joint loss.

    With ``pretrain_epochs = 0`` this is the paper's Algorithm 2 as written: k-means on the embeddings of the
    *untrained* encoder, before the first step. The phase lives in this callback's ``state_dict``, so a resumed run
    continues where it was and never re-initialises the centers.

    The OT loss gives center k the mass ``model.proportions[k]``, and k-means returns its centers in no particular
    order: ``match_proportions="sizes"`` (default) matches the k-means cluster sizes to w (Hungarian algorithm, the
    largest cluster carries the largest w), needing no labels; ``"none"`` keeps the k-means order.

    Args:
        pretrain_epochs: epochs of reconstruction-only training before the joint phase.
        kmeans_n_init: k-means++ restarts for the centers' initialisation.
        seed: seeds that k-means.
        match_proportions: ``"sizes"`` or ``"none"`` (above).
        kmeans_at: when the centers are initialised. ``"switch"`` (default): on the pre-trained embedding when the
            joint phase starts (the DKM/DEC practice; while pre-training, evaluation refits k-means every epoch).
            ``"start"``: the paper's Algorithm read literally, on the *untrained* encoder's embedding before the first
            step, kept through pre-training and into the joint phase. The same with ``pretrain_epochs=0``.
        center_init: what that initialisation draws. ``"kmeans"``: k-means on the embeddings. ``"uniform"``:
            uniform in [-1, 1]^p, seeded by ``seed`` (DKM's initialisation without pre-training), then ordered by
            ``match_proportions``. ``"constrained"``: size-constrained k-means with the model's proportions
            (:func:`lit_otclust.clustering.constrained_kmeans`), center k carrying w_k. Evaluation while pre-training
            still scores k-means centers; without a loss every evaluation scores size-constrained k-means (the
            AE + size-constrained k-means baseline). Default (None): ``"constrained"`` where the loss constrains
            the sizes to a non-uniform w, ``"kmeans"`` otherwise. Why: k-means matched to w by size puts shares on
            the wrong centers (at a ratio of 10 the joint phase from the sized start ends +0.039 higher over 10
            seeds; on digits 1 and 2 at 20% / 80% k-means' start is a split of the 2s on every seed; RESULTS.md,
            "Known cluster proportions").
        refit_epochs: joint epochs (0: the first after the switch) at whose start the centers are fit again to the
            current embedding by the ``"constrained"`` initialisation and their Adam state is dropped (the loss's
            potentials follow over the epoch's batches). Default (None): the last joint epoch where the loss
            constrains the sizes to a non-uniform w, none otherwise; ``[]``: never. Why: RESULTS.md, "Known cluster
            proportions".
        refit_every: also refit at the start of every ``refit_every``-th joint epoch (joint epochs refit_every - 1,
            2 refit_every - 1, ... up to trainer.max_epochs; 0: none): with 100 joint epochs, 25 adds [24, 49, 74,
            99]. Why: each refit gives the loss the size-constrained partition of the current embedding to train
            towards, so training with w shapes the embedding (RESULTS.md, "When does the joint phase help?").
        warmup_steps: optimizer steps over which the joint phase's learning rates ramp linearly from 1/warmup_steps
            of their value up to it (0: none). Why: the switch restarts the optimisation, and a restarted Adam's first
            steps move every weight by about the learning rate whatever its gradient (its second moments start at
            zero), which can undo a pre-trained autoencoder before the clustering term has shaped anything. A ramp
            over about 10 epochs of the data (200 steps on 5,000 images at batch 300, 2000 on full MNIST) keeps the
            first joint epoch within 0.005 of the start on every set measured; the lowest epoch averages 0.01-0.02
            under it (RESULTS.md, "When does the joint phase help?"). Keep it shorter than the step decay's
            first step: it sets the rates from those at the switch.
    """

    def __init__(self, pretrain_epochs: int = 0, kmeans_n_init: int = 10, seed: int = 0,
                 match_proportions: Literal["none", "sizes"] = "sizes",
                 kmeans_at: Literal["switch", "start"] = "switch",
                 center_init: Literal["kmeans", "uniform", "constrained"] | None = None,
                 refit_epochs: list[int] | None = None, refit_every: int = 0, warmup_steps: int = 0) -> None:
        if pretrain_epochs < 0:
            raise ValueError(f"pretrain_epochs must be >= 0, got {pretrain_epochs}")
        if kmeans_n_init < 1:
            raise ValueError(f"kmeans_n_init must be >= 1, got {kmeans_n_init}")
        if match_proportions not in MATCHINGS:
            raise ValueError(f"match_proportions must be one of {MATCHINGS}, got {match_proportions!r}")
        if kmeans_at not in ("switch", "start"):
            raise ValueError(f"kmeans_at must be 'switch' or 'start', got {kmeans_at!r}")
        if center_init not in (None, "kmeans", "uniform", "constrained"):
            raise ValueError(f"phases.center_init must be 'kmeans', 'uniform', 'constrained' or None (by w), "
                             f"got {center_init!r}")
        if warmup_steps < 0:
            raise ValueError(f"phases.warmup_steps must be >= 0, got {warmup_steps}")
        if any(epoch < 0 for epoch in refit_epochs or ()):
            raise ValueError(f"phases.refit_epochs counts joint epochs from 0, got {refit_epochs}")
        if refit_every < 0:
            raise ValueError(f"phases.refit_every must be >= 0 (0: no periodic refit), got {refit_every}")
        self.pretrain_epochs = pretrain_epochs
        self.kmeans_n_init = kmeans_n_init
        self.seed = seed
        self.match_proportions = match_proportions
        self.kmeans_at = kmeans_at
        self.center_init = center_init
        self.refit_epochs = None if refit_epochs is None else sorted(set(refit_epochs))
        self.refit_every = refit_every
        self.refitted: list[int] = []  # epochs whose refit is done: a run resumed mid-epoch does not refit again
        self.phase = "pretrain"
        self.switch_epoch: int | None = None
        self.initialised = False  # kmeans_at="start": the centers were set before the first step
        self.warmup_steps = warmup_steps
        self.warmup: tuple[int, list[float]] | None = None  # (global step at the switch, each group's full lr)

    def state_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "switch_epoch": self.switch_epoch, "initialised": self.initialised,
                "refitted": list(self.refitted), "warmup": self.warmup}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.phase = state_dict["phase"]
        self.switch_epoch = state_dict["switch_epoch"]
        self.initialised = state_dict.get("initialised", False)  # absent from checkpoints written before it
        self.refitted = list(state_dict.get("refitted", []))
        self.warmup = state_dict.get("warmup")

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for attr in ("centers", "embed", "joint"):
            if not hasattr(pl_module, attr):
                raise AttributeError(f"PhaseSwitch needs a module with `{attr}` (a DeepClustering); "
                                     f"{type(pl_module).__name__} has none")
        if stage != "fit" or self.phase == "joint":
            return
        # Checked before the first step, not when the switch comes (after all of pre-training).
        if getattr(trainer.datamodule, "fit_set", None) is None:
            raise ValueError("PhaseSwitch initialises the centers by k-means on every fitted image and reads them from "
                             "the data module's `fit_set`; pass a data module that has one (e.g. MNISTDataModule) "
                             "instead of bare dataloaders")
        loss = getattr(pl_module, "loss", None)
        constrained = getattr(loss, "constrains_sizes", False)
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        if loss is not None and max_epochs is not None and self.pretrain_epochs >= max_epochs:
            if not trainer.fast_dev_run:  # Lightning's one-epoch check of the code, whatever max_epochs says
                raise ValueError(f"phases.pretrain_epochs ({self.pretrain_epochs}) must be below trainer.max_epochs "
                                 f"({max_epochs}), or the clustering loss never trains")
            rank_zero_info(f"trainer.fast_dev_run runs one epoch, so only pre-training (phases.pretrain_epochs = "
                           f"{self.pretrain_epochs}); --phases.pretrain_epochs 0 runs the clustering loss instead")
        batch_size = getattr(trainer.datamodule, "batch_size", None)
        if constrained and batch_size is not None and batch_size < len(pl_module.centers):
            raise ValueError(f"data batch_size ({batch_size}) is below the number of clusters "
                             f"({len(pl_module.centers)}): a batch cannot fill every cluster's share")
        wanted = getattr(trainer.datamodule, "class_proportions", None)
        proportions = getattr(pl_module, "proportions", None)
        if constrained and wanted is not None and proportions is not None and not torch.allclose(
                torch.tensor(wanted, dtype=torch.float64), proportions.detach().double().cpu(), atol=1e-6):
            # A warning, not an error: a misspecified w is a legitimate experiment.
            rank_zero_warn(f"the data are subsampled to class_proportions {list(wanted)} but the loss prescribes "
                           f"proportions {proportions.tolist()}; pass the same values as --model.proportions "
                           f"unless the mismatch is the point")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Runs after a checkpoint's callback state is restored, so `phase` is already the resumed one.
        pl_module.joint = self.phase == "joint"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.kmeans_at == "start" and not self.initialised and self.phase == "pretrain":
            self.init_centers(trainer, pl_module)
            self.initialised = True
        if self.phase == "pretrain" and trainer.current_epoch >= self.pretrain_epochs:
            if self.kmeans_at == "switch":
                self.init_centers(trainer, pl_module)
            self.restart_optimization(trainer, pl_module)
            if self.warmup_steps:
                lrs = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
                self.warmup = (trainer.global_step, lrs)
            self.phase, self.switch_epoch = "joint", trainer.current_epoch
        epoch = trainer.current_epoch
        if (self.phase == "joint" and self.switch_epoch is not None and epoch not in self.refitted
                and epoch - self.switch_epoch in self.refits(trainer, pl_module)):
            self.init_centers(trainer, pl_module, "constrained")
            for opt in trainer.optimizers:
                opt.state.pop(pl_module.centers, None)
            self.refitted.append(epoch)
        pl_module.joint = self.phase == "joint"

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.warmup is None or not self.warmup_steps:  # a checkpoint's ramp, resumed with warm-up off, ends it
            self.warmup = None
            return
        start, lrs = self.warmup
        factor = min(1.0, (trainer.global_step - start + 1) / self.warmup_steps)
        groups = [group for opt in trainer.optimizers for group in opt.param_groups]
        for group, lr in zip(groups, lrs):
            group["lr"] = lr * factor
        if factor == 1.0:
            self.warmup = None

    def refits(self, trainer: L.Trainer, pl_module: L.LightningModule) -> list[int]:
        """The joint epochs that start with a refit of the centers: ``refit_epochs`` (or its default, above) and every
        ``refit_every``-th."""
        loss = getattr(pl_module, "loss", None)
        if loss is None:
            return []
        last = trainer.max_epochs
        known = last is not None and last >= 0 and self.switch_epoch is not None  # the joint epochs are countable
        every = range(self.refit_every - 1, last - self.switch_epoch, self.refit_every) if (
            known and self.refit_every) else []
        if self.refit_epochs is not None:
            return sorted(set(self.refit_epochs) | set(every))
        if not sized(pl_module) or not known:
            return sorted(every)
        return sorted(set(every) | {last - 1 - self.switch_epoch})

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Pre-training, and the AE + k-means baseline throughout, are scored by k-means on the current embeddings:
        # fit here, as a step of training, so evaluation (and validate/test/predict from a checkpoint) only reads them.
        baseline = getattr(pl_module, "loss", None) is None
        refit = (self.phase == "pretrain" and self.kmeans_at == "switch") or baseline
        if trainer.state.fn == "fit" and refit:
            # The baseline with center_init="constrained" is AE + size-constrained k-means with the model's w.
            self.init_centers(trainer, pl_module, "constrained" if baseline and self.center_init == "constrained"
                              else "kmeans")

    @staticmethod
    def restart_optimization(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The joint phase starts its own optimisation, as the paper's Algorithm has two loops.

        - The centers' Adam state is dropped. While pre-training they get zero gradients but Adam still counts steps,
          so at the switch its second moments ~0 would make the centers' first joint updates ~3x the learning rate.
        - Each epoch-interval scheduler restarts at epoch 0 with the initial learning rates: the decay counts joint
          epochs.
        """
        for opt in trainer.optimizers:
            opt.state.pop(pl_module.centers, None)
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            sched.last_epoch = 0
            for group, lr in zip(sched.optimizer.param_groups, sched.base_lrs):
                group["lr"] = lr

    @torch.no_grad()
    def init_centers(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     method: Literal["kmeans", "uniform", "constrained"] | None = None) -> None:
        """mu <- k-means on the embeddings of all fitted samples (every rank embeds them all), or uniform draws
        (``method``, default ``center_init``), in the order ``match_proportions`` gives; rank 0 computes them
        and broadcasts, so every rank has the same."""
        was_training = pl_module.training
        pl_module.eval()
        x = trainer.datamodule.fit_set.x  # (N, *input_shape): the fitted samples, in memory
        z = embed_samples(pl_module, x, eval_batch_size(trainer.datamodule))
        pl_module.train(was_training)
        if trainer.is_global_zero:
            K, p = pl_module.centers.shape
            method = method or self.center_init or ("constrained" if sized(pl_module) else "kmeans")
            if method == "uniform":
                centers = 2 * torch.rand(K, p, generator=torch.Generator().manual_seed(self.seed)) - 1  # (K, p), CPU
            elif method == "constrained":  # center k carries w_k already: no reordering
                centers, _, _ = constrained_kmeans(z, pl_module.proportions, self.kmeans_n_init, self.seed)
            else:
                centers = kmeans(z, K, self.kmeans_n_init, self.seed)  # (K, p), CPU
            centers = centers.to(z.dtype)  # float32 either way; z has the module's dtype (float64 at precision 64)
            if method != "constrained":
                centers = centers[self.center_order(z.cpu(), centers, pl_module.proportions.cpu())]
            centers = centers.to(pl_module.centers)
        else:
            centers = torch.empty_like(pl_module.centers)
        centers = trainer.strategy.broadcast(centers, src=0)
        pl_module.centers.data.copy_(centers)

    def center_order(self, z: Tensor, centers: Tensor, proportions: Tensor) -> Tensor:
        """The order of the k-means centers (K,) that ``match_proportions`` asks for, from the embeddings z (N, p)."""
        K = len(centers)
        if self.match_proportions == "sizes":
            nearest = squared_distances(z, centers).argmin(1)  # (N,)
            return match_sizes(torch.bincount(nearest, minlength=K) / len(z), proportions)
        return torch.arange(K)
