"""The deep-clustering system: an autoencoder, K learnable centers, and a clustering loss (:mod:`lit_otclust.losses`).

Training minimises (the paper's problem (P), Algorithm "OT-based Deep Clustering")

.. math::
    L(\\theta, \\phi, \\mu) = \\ell_r(\\theta, \\phi) + \\lambda\\, \\ell_c(\\theta, \\mu)

over the encoder f_theta, decoder g_phi and centers mu (K, p), where ``l_c`` is the entropic OT loss between the batch
embeddings (weights 1/m) and the centers (weights w), the soft k-means (DKM) loss, or nothing (a plain autoencoder).
:class:`lit_otclust.phases.PhaseSwitch` switches the phases; this module only reads ``self.joint``. Each point is
assigned to ``argmin_k ||f(x) - mu_k||^2``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from lit_otclust.legacy import LAST_FLAT_COMMIT
from lit_otclust.losses import ClusteringLoss
from lit_otclust.metrics import HungarianAccuracy
from lit_otclust.sinkhorn import NonFiniteCostError, squared_distances

EVAL_SETS = ("val", "heldout")  # dataloader 0: the fitted samples; 1: the held-out test split


def check_proportions(proportions: Sequence[float], num_clusters: int, clusters_name: str = "num_clusters") -> None:
    """Raise ValueError unless ``proportions`` has ``num_clusters`` entries, finite, non-negative, summing to 1 (within
    1e-6); ``clusters_name`` is how the caller names K (the estimator's ``n_clusters``)."""
    if len(proportions) != num_clusters:
        raise ValueError(f"proportions has {len(proportions)} entries but {clusters_name} is {num_clusters}")
    if not all(math.isfinite(p) and p >= 0 for p in proportions) or abs(sum(proportions) - 1.0) > 1e-6:
        raise ValueError(f"proportions must be finite, non-negative and sum to 1 (within 1e-6), got {list(proportions)}")


def adam(params: Iterable, lr: float = 1e-3) -> torch.optim.Adam:
    """The paper's optimizer: Adam at ``lr`` (1e-3). Fused where the parameters live on a CPU or a CUDA device: one
    kernel updates every tensor in one pass instead of a loop of small kernels per tensor, the same update up to
    rounding."""
    params = list(params)
    first = next(iter(params[0]["params"] if isinstance(params[0], dict) else params))
    return torch.optim.Adam(params, lr=lr, fused=first.device.type in ("cpu", "cuda"))


def halve_every_50(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.StepLR:
    """The configs' step decay: the learning rates halved every 50 epochs."""
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)


class DeepClustering(L.LightningModule):
    """Autoencoder + K centers trained with a clustering loss (the paper's entropic OT, soft k-means, or none).

    Args:
        autoencoder: a module with ``encoder``, ``decoder`` and ``latent_dim`` (see ``models.py``).
        num_clusters: K. Linked to the data module's ``num_classes`` by the CLI.
        loss: the clustering term l_c, a :class:`lit_otclust.losses.ClusteringLoss` (``OTLoss``, ``SoftKMeans``), or
            None (the AE + k-means baseline).
        proportions: w, the prescribed cluster proportions (K,); uniform when None.
        clustering_weight: lambda in L = l_r + lambda * l_c (1 in the paper), with l_r each sample's *sum* of
            squared pixel errors averaged over the batch, as the OT plan weighs each point 1/m. The configs' value:
            RESULTS.md, "The loss weight lambda and the training solve".
        assignment: ``"distance"`` (the paper: argmin_k ||z - mu_k||^2) or ``"potential"`` (minus g_k, the loss's
            averaged cluster potential, which respects the proportions). Both are logged; this one is ``val/acc``.
        optimizer: builds the optimizer from two parameter groups, the autoencoder's and the centers' (Lightning's
            ``OptimizerCallable``; any ``torch.optim`` class by ``class_path`` from a config). Default :func:`adam`:
            the paper's Adam at lr 1e-3 (DEC's SGD recipe: configs/mnist_ae_kmeans_dec.yaml).
        lr_scheduler: builds the epoch-interval schedule from the optimizer (``LRSchedulerCallable``). Default
            :func:`halve_every_50` (the paper gives "step decay" only); ``PhaseSwitch`` restarts it at the joint phase.
        compile: ``False`` (default: eager), ``"default"`` or ``"reduce-overhead"`` (CUDA graphs): the
            ``torch.compile`` mode of the autoencoder's training forward and of what the loss allows
            (:meth:`~lit_otclust.losses.ClusteringLoss.compile_solver`), compiled once in ``configure_model``.
    """

    def __init__(
        self,
        autoencoder: nn.Module,
        num_clusters: int = 10,
        loss: ClusteringLoss | None = None,
        proportions: list[float] | None = None,
        clustering_weight: float = 1.0,
        assignment: Literal["distance", "potential"] = "distance",
        optimizer: OptimizerCallable = adam,
        lr_scheduler: LRSchedulerCallable = halve_every_50,
        compile: Literal[False, "default", "reduce-overhead"] = False,
    ) -> None:
        super().__init__()
        if assignment not in ("distance", "potential"):
            raise ValueError(f"assignment must be 'distance' or 'potential', got {assignment!r}")
        if compile not in (False, "default", "reduce-overhead"):
            raise ValueError(f"compile must be false, 'default' or 'reduce-overhead', got {compile!r}")
        if num_clusters < 2:
            raise ValueError(f"num_clusters must be >= 2, got {num_clusters}")
        if proportions is not None:
            # Checked here, not at the first joint step (after all of pre-training in the (p) configs).
            check_proportions(proportions, num_clusters)
        # hparams keep the autoencoder and the loss as their class_path configs: load_from_checkpoint rebuilds them.
        self.save_hyperparameters()
        self.autoencoder = autoencoder
        self.loss = loss
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        if loss is not None:
            loss.bind(num_clusters)
        p = autoencoder.latent_dim
        # In the optimizer from the first step, so that its state survives any resume; PhaseSwitch sets the values.
        self.centers = nn.Parameter(torch.zeros(num_clusters, p))
        w = torch.full((num_clusters,), 1.0 / num_clusters) if proportions is None else torch.tensor(proportions)
        self.register_buffer("proportions", w.float())
        # The phase, set by PhaseSwitch; a buffer so that validate/test/predict from a checkpoint evaluate as the run did.
        self.register_buffer("joint_phase", torch.tensor(False))
        # Host mirror of joint_phase, read every step (reading the buffer would stall a GPU); refreshed on each load.
        self._joint = False
        self.register_load_state_dict_post_hook(DeepClustering._refresh_mirrors)
        self.metrics = nn.ModuleDict({
            f"{s}_{a}": HungarianAccuracy(num_clusters, num_clusters)
            for s in EVAL_SETS for a in ("distance", "potential")
        })
        # The training pass's own assignments (DKM's read-out); its inputs are ours, so no per-step checks.
        self.metrics[f"train_{assignment}"] = HungarianAccuracy(num_clusters, num_clusters, validate_args=False)
        # Per-epoch sums of the training terms and statistics (logged at the epoch's end).
        self._train_sums: dict[str, Tensor | float] = {}
        self._train_steps = 0
        self._compiled = False
        # Per evaluation set: the cluster sizes of the assignments, and the (index, z) batches this rank embedded.
        self._eval_sizes: dict[int, Tensor] = {}
        self._eval_z: dict[int, list[tuple[Tensor, Tensor]]] = {}
        # The last evaluation's embeddings: set name -> (global step, (N,) sample indices, (N, p) embeddings).
        self.eval_embeddings: dict[str, tuple[int, Tensor, Tensor]] = {}

    @property
    def joint(self) -> bool:
        """True in the joint phase (reconstruction + clustering), False while pre-training."""
        return self._joint

    @joint.setter
    def joint(self, value: bool) -> None:
        self.joint_phase.fill_(value)
        self._joint = bool(value)

    @staticmethod
    def _refresh_mirrors(module: DeepClustering, incompatible_keys) -> None:
        module._joint = bool(module.joint_phase)

    def setup(self, stage: str) -> None:
        if self.loss is not None:
            self.loss.check_world(self.trainer.world_size)

    def configure_model(self) -> None:
        mode = self.hparams.compile
        if mode and not self._compiled:  # Lightning calls this hook at each fit, validate, test and predict
            self.autoencoder.compile(mode=mode)  # in place: the state dict keeps its keys
            if self.loss is not None:
                self.loss.compile_solver(mode)
            self._compiled = True

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint of another configuration fails here, naming the setting, not in a tensor-shape traceback."""
        state = checkpoint.get("state_dict", {})
        if "g_avg" in state or "clustering" in checkpoint.get("hyper_parameters", {}):
            raise ValueError(f"this checkpoint was written before the clustering loss became `model.loss`; commit "
                             f"{LAST_FLAT_COMMIT} reads it (git checkout {LAST_FLAT_COMMIT[:7]})")
        if "centers" in state and state["centers"].shape != self.centers.shape:
            (k, p), (k_now, p_now) = state["centers"].shape, self.centers.shape
            setting = "num_clusters (the data's num_classes)" if k != k_now else "the autoencoder's latent_dim"
            raise ValueError(f"checkpoint has {k} centers of dimension {p}, this model {k_now} of dimension {p_now}: "
                             f"{setting} differs from the run that wrote it")
        mine = self.state_dict()
        for name, value in state.items():
            if name in mine and mine[name].shape != value.shape:
                raise ValueError(f"checkpoint's {name} has shape {tuple(value.shape)}, this model's "
                                 f"{tuple(mine[name].shape)}: the autoencoder settings differ from the run that wrote it")
        if "joint_phase" in state and not bool(state["joint_phase"]):
            # A shared pre-training (lit_otclust.pretrain_cache) has no loss buffers or proportions: take this run's.
            for name, value in mine.items():
                if (name.startswith("loss.") or name == "proportions") and name not in state:
                    state[name] = value

    # ---- losses -------------------------------------------------------------------------------
    @staticmethod
    def reconstruction_loss(x: Tensor, x_hat: Tensor) -> Tensor:
        """l_r: each sample's sum of squared errors (B, d) -> (B,), averaged over the batch."""
        return (x_hat - x).pow(2).flatten(1).sum(1).mean()

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        x = batch[0]
        z, x_hat = self.autoencoder(x)
        recon = self.reconstruction_loss(x, x_hat)
        if self.joint and self.loss is not None:
            # Each point's nearest center before this step's update, read by train/acc.
            nearest = self.assign(z.detach(), "distance")
            try:
                clust, stats = self.loss(z, self.centers, self.proportions)
            except NonFiniteCostError:  # the solver refuses a non-finite cost: name the term and the step
                self._non_finite({"cost ||f(x) - mu||^2 (embeddings or centers diverged)": torch.tensor(math.nan)})
            rule, y = self.hparams.assignment, batch[1]  # train/acc: this batch's assignments against its labels
            pred = nearest if rule == "distance" else self.assign(z.detach(), rule)
            self.metrics[f"train_{rule}"].update(pred[y >= 0], y[y >= 0])  # y = -1: no label
        else:
            # Zero-weight use of the centers keeps DDP's every-parameter-gets-a-gradient rule.
            clust, stats = self.centers.sum() * 0.0, {}
        loss = recon + self.hparams.clustering_weight * clust
        return self._finish_step(loss, recon, clust, stats)

    def _finish_step(self, loss: Tensor, recon: Tensor, clust: Tensor, stats: dict) -> Tensor:
        if not torch.isfinite(loss):  # one host sync a step; the Sinkhorn loop already syncs more often
            self._non_finite({"reconstruction loss": recon, "clustering loss": clust})
        # Summed here, logged once an epoch (a self.log call costs about a small model's step); equal batches.
        for name, value in {"loss": loss, "recon": recon, "cluster": clust, **stats}.items():
            value = value.detach() if isinstance(value, Tensor) else value
            self._train_sums[name] = self._train_sums.get(name, 0.0) + value
        self._train_steps += 1
        return loss

    def on_train_epoch_start(self) -> None:
        self._train_sums, self._train_steps = {}, 0
        self.metrics[f"train_{self.hparams.assignment}"].reset()

    def _non_finite(self, terms: dict[str, Tensor]) -> None:
        bad = ", ".join(f"{name} = {float(value):g}" for name, value in terms.items() if not torch.isfinite(value))
        raise FloatingPointError(
            f"epoch {self.current_epoch}, step {self.global_step}: {bad or 'the loss is not finite'}. Training "
            "stopped; the last checkpoint written holds the last good state. Lower the optimizer's lr, raise the loss's epsilon, "
            "or check the input data for NaN/inf.")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # The tensors this step writes: the optimizer's own list, not a walk of the module tree every step.
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        # A NaN or inf makes its tensor's sum non-finite: one host sync. Only then the exact check, element by element.
        if grads and not torch.isfinite(torch.stack([g.sum() for g in grads]).sum()):
            names = [n for n, p in self.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            if not names:
                return
            raise FloatingPointError(
                f"epoch {self.current_epoch}, step {self.global_step}: the gradient of {', '.join(names[:3])}"
                f"{' and others' if len(names) > 3 else ''} is not finite. Training stopped; the last checkpoint "
                "written holds the last good state. Lower the optimizer's lr, or check the input data for NaN/inf.")

    def on_train_epoch_end(self) -> None:
        if self._train_steps:
            means = {f"train/{k}": torch.as_tensor(v / self._train_steps, dtype=torch.float32, device=self.device)
                     for k, v in self._train_sums.items()}
            self.log_dict(means, on_step=False, on_epoch=True, sync_dist=True)
        if self.joint and self.loss is not None:
            self._log_metrics("train", "train", rules=(self.hparams.assignment,))
            for name, value in self.loss.epoch_stats().items():  # global already: every rank solves one problem
                self.log(f"train/{name}", value, on_epoch=True)

    def configure_optimizers(self):
        # Two groups: PhaseSwitch drops the centers' state at the switch, and a config may give them their own lr.
        opt = self.optimizer([{"params": list(self.autoencoder.parameters())}, {"params": [self.centers]}])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.lr_scheduler(opt), "interval": "epoch"}}

    # ---- assignments --------------------------------------------------------------------------
    @torch.no_grad()
    def embed(self, x: Tensor) -> Tensor:
        """(B, p) embeddings of ``x``, in float32 at least: under ``trainer.precision=bf16-mixed`` the encoder runs in
        bfloat16, and what evaluation, the pictures and k-means read of them is computed in full precision."""
        z = self.autoencoder.encoder(x)
        return z.to(torch.promote_types(z.dtype, torch.float32))

    def assign(self, z: Tensor, rule: Literal["distance", "potential"] | None = None) -> Tensor:
        """Cluster of each embedding, (B,): argmin_k ||z - mu_k||^2 (minus g_k for ``potential``)."""
        cost = squared_distances(z, self.centers.detach())  # (B, K)
        potential = self.loss.potential() if self.loss is not None else None
        if (rule or self.hparams.assignment) == "potential" and potential is not None:
            cost = cost - potential
        return cost.argmin(1)

    # ---- evaluation ---------------------------------------------------------------------------
    _noted_unlabelled = False  # the one-time note that label-based metrics are skipped
    _heldout_offset: int | None = None  # see on_validation_epoch_start

    def on_validation_epoch_start(self) -> None:
        self._eval_sizes = {}
        self._eval_z = {}
        # Where the held-out set is the fitted set's tail from this index on, the fitted loader's pass scores it.
        self._heldout_offset = getattr(getattr(self.trainer, "datamodule", None), "heldout_offset", None)

    def validation_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Assigns by the centers; evaluation only reads them (``PhaseSwitch`` fits k-means centers before each
        evaluation while pre-training and for the AE + k-means baseline)."""
        x, y, index = batch
        z = self.embed(x)
        pred = {rule: self.assign(z, rule) for rule in ("distance", "potential")}
        self._score(dataloader_idx, index, z, y, pred)
        if dataloader_idx == 0 and self._heldout_offset is not None:
            tail = index >= self._heldout_offset
            self._score(1, index[tail] - self._heldout_offset, z[tail], y[tail], {r: p[tail] for r, p in pred.items()})

    def _score(self, idx: int, index: Tensor, z: Tensor, y: Tensor, pred: dict[str, Tensor]) -> None:
        """Accumulate one batch of evaluation set ``idx`` (0: fitted, 1: held-out): metrics, sizes, embeddings."""
        self._eval_z.setdefault(idx, []).append((index, z))
        labelled = y >= 0  # y = -1: a sample without a label (a user's images), left out of acc/NMI/ARI
        for rule, p in pred.items():
            self.metrics[f"{EVAL_SETS[idx]}_{rule}"].update(p[labelled], y[labelled])
        sizes = torch.bincount(pred[self.hparams.assignment], minlength=len(self.centers))
        self._eval_sizes[idx] = self._eval_sizes.get(idx, 0) + sizes

    def _log_metrics(self, name: str, prefix: str, rules: tuple[str, ...] = ("distance", "potential")) -> None:
        """Compute, log as ``prefix/acc`` etc. (``_potential``/``_distance`` for the other rule), reset."""
        for rule in rules:
            metric = self.metrics[f"{name}_{rule}"]
            res = metric.compute()
            metric.reset()
            if torch.isnan(res["acc"]):  # 0 / 0: no labelled sample in this set (on any rank)
                if not self._noted_unlabelled:
                    rank_zero_info(f"{prefix}: the samples have no labels (y = -1), so acc, NMI and ARI are not "
                                   f"logged; the cluster sizes still are")
                    self._noted_unlabelled = True
                continue
            suffix = "" if rule == self.hparams.assignment else f"_{rule}"
            # Global already (the metric reduces its table over the ranks): no sync_dist (__main__.quiet_third_party_notices).
            self.log_dict({f"{prefix}/{k}{suffix}": res[k] for k in ("acc", "nmi", "ari", "size_error")})

    def on_validation_epoch_end(self) -> None:
        # Every set the loaders have: under DDP a rank with an empty shard must still join the collectives.
        num_sets = 2 if self._heldout_offset is not None else len(self.trainer.num_val_batches)
        for idx in range(num_sets):
            name = EVAL_SETS[idx]
            sizes = self._eval_sizes.get(idx, torch.zeros(len(self.centers), dtype=torch.long, device=self.device))
            sizes = self.trainer.strategy.reduce(sizes.float(), reduce_op="sum")
            if not sizes.sum():  # e.g. limit_val_batches stopped before the fitted set's held-out tail (every rank agrees)
                continue
            self._log_metrics(name, name)
            self._log_sizes(name, sizes)
        # What this rank embedded, kept for the pictures drawn right after (ClusterFigures), which need not embed again.
        self.eval_embeddings = {EVAL_SETS[idx]: (self.global_step, torch.cat([i for i, _ in parts]),
                                                 torch.cat([z for _, z in parts]))
                                for idx, parts in self._eval_z.items()}
        self._eval_z = {}

    def _log_sizes(self, name: str, sizes: Tensor) -> None:
        """The cluster-size histogram, summarised as scalars (its pictures: :class:`lit_otclust.figures.ClusterFigures`)."""
        frac = sizes / sizes.sum().clamp_min(1)
        ent = -(frac * frac.clamp_min(1e-12).log()).sum() / np.log(len(frac))
        self.log_dict({f"{name}/size_min": frac.min(), f"{name}/size_max": frac.max(), f"{name}/size_entropy": ent})

    # ---- test and predict ---------------------------------------------------------------------
    def test_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> None:
        x, y, _ = batch
        z = self.embed(x)
        labelled = y >= 0  # as in validation_step
        for rule in ("distance", "potential"):
            self.metrics[f"heldout_{rule}"].update(self.assign(z, rule)[labelled], y[labelled])

    def on_test_epoch_end(self) -> None:
        # The same quantity as the validation loop's heldout/*, so the same name.
        self._log_metrics("heldout", "heldout")

    def predict_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        x, y, index = batch
        z = self.embed(x)
        return {"index": index, "cluster": self.assign(z), "label": y,
                "distance": squared_distances(z, self.centers.detach()).min(1).values}
