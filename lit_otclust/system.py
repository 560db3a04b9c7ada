"""The deep-clustering system: an autoencoder, K learnable centers, and the OT clustering loss.

Training minimises (the paper's problem (P), Algorithm "OT-based Deep Clustering")

.. math::
    L(\\theta, \\phi, \\mu) = \\ell_r(\\theta, \\phi) + \\lambda\\, \\ell_c(\\theta, \\mu)

over the encoder f_theta, decoder g_phi and centers mu (K, p), where ``l_c`` is the entropic OT
loss between the batch embeddings (weights 1/m) and the centers (weights w), the soft k-means
(DKM) loss, or nothing (a plain autoencoder). Phases (autoencoder pre-training, then the joint
loss) are switched by :class:`lit_otclust.callbacks.PhaseSwitch`; this module only reads
``self.joint``. Each point is assigned to ``argmin_k ||f(x) - mu_k||^2``.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from lit_otclust.losses import ot_clustering_loss, soft_kmeans_loss
from lit_otclust.metrics import HungarianAccuracy
from lit_otclust.sinkhorn import NonFiniteCostError, squared_distances

Clustering = Literal["ot", "soft_kmeans", "none"]
EVAL_SETS = ("val", "heldout")  # dataloader 0: the fitted samples; 1: the held-out test split
BALANCED_TAU = 1e4  # reg_m annealing towards balanced ends at tau = BALANCED_TAU * epsilon


class DeepClustering(L.LightningModule):
    """Autoencoder + K centers trained with an entropic OT (or soft k-means) clustering loss.

    Args:
        autoencoder: a module with ``encoder``, ``decoder`` and ``latent_dim`` (see ``models.py``).
        num_clusters: K. Linked to the data module's ``num_classes`` by the CLI.
        clustering: ``"ot"`` (the paper's method), ``"soft_kmeans"`` (DKM, Prop. 2), or ``"none"``
            (autoencoder only, evaluated by k-means on the embeddings: the AE + k-means baseline).
        proportions: w, the prescribed cluster proportions (K,); uniform when None.
        epsilon: the entropic regularisation (the paper uses 1e-2 on unnormalised distances).
        clustering_weight: lambda in L = l_r + lambda * l_c (1 in the paper, with both terms batch
            means). The MNIST configs use 1/300 = 1/m, as if l_r were summed over the batch:
            measured better over long training (RESULTS.md). The CIFAR-10 configs keep 1: there 1/300
            ended 0.010 under it at 100 epochs (3 seeds, RESULTS.md).
        reconstruction: ``"sse"``: per-sample *sum* of squared pixel errors, averaged over the
            batch (the paper's l_r^ae up to the 1/m of a mini-batch mean, the same averaging as
            the OT term, whose plan carries weight 1/m per point); ``"mse"``: also averaged over
            pixels, which shrinks l_r by the input dimension d relative to l_c.
        gradient: ``"envelope"`` or ``"unrolled"`` (see :func:`lit_otclust.losses.ot_clustering_loss`).
        sinkhorn_max_iter / sinkhorn_tol: the Sinkhorn stopping rule.
        soft_kmeans_form: with ``clustering="soft_kmeans"``, ``"softmin"`` (default: the entropic value of Prop. 2,
            the OT loss without the size constraint) or ``"expected"`` (DKM's own loss, the expected distance under
            the soft assignment): see :func:`lit_otclust.losses.soft_kmeans_loss`.
        sinkhorn_solver: ``"fixed"``: ``sinkhorn_iters`` log-domain iterations warm-started from the previous batch's
            potential, ending on the column update (exact cluster sizes, loose rows), with no host read
            (:func:`lit_otclust.sinkhorn.sinkhorn_fixed`); its rows' error is logged as ``train/sinkhorn_error``.
            ``"solve"`` (default, as Table 1 was made; ``fixed`` ended at or above it on all ten 200-epoch pairs,
            RESULTS.md): log-domain Sinkhorn + Newton, warm-started from the previous batch's potential and solved
            to ``sinkhorn_tol`` (:func:`lit_otclust.sinkhorn.sinkhorn`). ``"algorithm1"``:
            the paper's Algorithm 1 as written, exactly ``sinkhorn_max_iter`` iterations from a cold start, so
            the cluster sizes of each batch's plan are exact and its rows loose
            (:func:`lit_otclust.sinkhorn.sinkhorn_algorithm1`); balanced and single-process only. Its rows' error is
            logged as ``train/sinkhorn_error`` and not warned about.
        ot_loss_form: ``"value"`` (default: the paper's loss, the entropic objective at the plan, with the
            ``gradient`` above) or ``"transport"`` (the "sharp" loss <pi, C> without the entropy term, pi after
            ``transport_iters`` log-domain Sinkhorn iterations warm-started from the solved g and differentiated by
            autograd; balanced and single-process only): see :func:`lit_otclust.losses.ot_clustering_loss`'s ``form``.
        transport_iters: the differentiable iterations of ``ot_loss_form="transport"``.
        reg_m: unbalanced OT strength tau (None: balanced, the paper).
        cost_scale: ``"none"`` (the paper: C_ik = ||z_i - mu_k||^2) or ``"batch_mean"``
            (C / mean(C) over the batch, so epsilon is relative to the typical distance). Our
            measurement: the unnormalised loss is lowered by shrinking the whole embedding (the
            decoder undoes any scale), which drifts epsilon = 1e-2 from "sharp" to "blurry" as
            training goes; the normalised cost removes that direction (but measured worse: see
            RESULTS.md). Under DDP each rank divides by its own batch's mean.
        assignment: ``"distance"`` (the paper: argmin_k ||z - mu_k||^2) or ``"potential"``
            (argmin_k ||z - mu_k||^2 - g_k with the cluster potential g averaged over training
            batches, which respects the prescribed proportions). Both are always logged; this
            picks the one behind ``val/acc``.
        anneal_epochs, epsilon_start, reg_m_start: anneal the problem over the first
            ``anneal_epochs`` epochs of the joint phase, geometrically (per epoch) from
            ``epsilon_start`` to ``epsilon`` (a soft, DKM-style start) and from ``reg_m_start`` to
            ``reg_m`` (a loose size constraint tightened towards balanced; with ``reg_m=None`` the
            end point is ``tau = 1e4 * epsilon``, where ``tau / (tau + epsilon) = 0.9999``, and
            the problem is balanced from ``anneal_epochs`` on). None: no annealing of that one.
            The paper holds epsilon and the constraint fixed; DKM anneals its inverse temperature.
        lr, lr_decay_epochs, lr_decay_gamma: Adam with step decay (the paper gives lr 1e-3 and
            "step decay" only): lr is multiplied by gamma every ``lr_decay_epochs`` epochs,
            counted from the start of the joint phase (``PhaseSwitch`` restarts the schedule).
        centers_lr_scale: the centers' learning rate is ``lr * centers_lr_scale`` (the paper: 1).
        seed: seeds the k-means runs.
        compile: ``False`` (default: eager), ``"default"`` or ``"reduce-overhead"`` (CUDA graphs, on a GPU): the
            ``torch.compile`` mode of the autoencoder's training forward and, with ``sinkhorn_solver="fixed"``, of the
            OT loss, compiled once in ``configure_model`` (the other solvers read the host as they iterate, which
            breaks a graph; evaluation's encoder stays eager). A changing epsilon (``anneal_epochs``) recompiles
            the loss each epoch.
    """

    def __init__(
        self,
        autoencoder: nn.Module,
        num_clusters: int = 10,
        clustering: Clustering = "ot",
        soft_kmeans_form: Literal["softmin", "expected"] = "softmin",
        proportions: list[float] | None = None,
        epsilon: float = 1e-2,
        clustering_weight: float = 1.0,
        reconstruction: Literal["sse", "mse"] = "sse",
        gradient: Literal["envelope", "unrolled"] = "envelope",
        sinkhorn_max_iter: int = 1000,
        sinkhorn_tol: float = 1e-5,
        sinkhorn_solver: Literal["fixed", "solve", "algorithm1"] = "solve",
        sinkhorn_iters: int = 10,
        ot_loss_form: Literal["value", "transport"] = "value",
        transport_iters: int = 20,
        reg_m: float | None = None,
        cost_scale: Literal["none", "batch_mean"] = "none",
        assignment: Literal["distance", "potential"] = "distance",
        anneal_epochs: int = 0,
        epsilon_start: float | None = None,
        reg_m_start: float | None = None,
        lr: float = 1e-3,
        centers_lr_scale: float = 1.0,
        lr_decay_epochs: int = 50,
        lr_decay_gamma: float = 0.5,
        seed: int = 0,
        compile: Literal[False, "default", "reduce-overhead"] = False,
    ) -> None:
        super().__init__()
        if clustering not in ("ot", "soft_kmeans", "none"):
            raise ValueError(f"clustering must be 'ot', 'soft_kmeans' or 'none', got {clustering!r}")
        if cost_scale not in ("none", "batch_mean"):
            raise ValueError(f"cost_scale must be 'none' or 'batch_mean', got {cost_scale!r}")
        if reconstruction not in ("sse", "mse"):
            raise ValueError(f"reconstruction must be 'sse' or 'mse', got {reconstruction!r}")
        if sinkhorn_solver not in ("fixed", "solve", "algorithm1"):
            raise ValueError(f"sinkhorn_solver must be 'fixed', 'solve' or 'algorithm1', got {sinkhorn_solver!r}")
        if sinkhorn_iters < 1:
            raise ValueError(f"sinkhorn_iters must be >= 1, got {sinkhorn_iters}")
        if ot_loss_form not in ("value", "transport"):
            raise ValueError(f"ot_loss_form must be 'value' or 'transport', got {ot_loss_form!r}")
        if transport_iters < 1:
            raise ValueError(f"transport_iters must be >= 1, got {transport_iters}")
        if ot_loss_form == "transport" and (reg_m is not None or reg_m_start is not None or gradient != "envelope"):
            raise ValueError("ot_loss_form='transport' is balanced and differentiates through its own transport_iters "
                             "iterations: it takes no reg_m or reg_m_start, and gradient must stay 'envelope'")
        if soft_kmeans_form not in ("softmin", "expected"):
            raise ValueError(f"soft_kmeans_form must be 'softmin' or 'expected', got {soft_kmeans_form!r}")
        if sinkhorn_solver == "algorithm1" and (reg_m is not None or reg_m_start is not None):
            raise ValueError("sinkhorn_solver='algorithm1' is the paper's balanced Sinkhorn: it takes no reg_m or reg_m_start")
        if assignment not in ("distance", "potential"):
            raise ValueError(f"assignment must be 'distance' or 'potential', got {assignment!r}")
        if compile not in (False, "default", "reduce-overhead"):
            raise ValueError(f"compile must be false, 'default' or 'reduce-overhead', got {compile!r}")
        if num_clusters < 2:
            raise ValueError(f"num_clusters must be >= 2, got {num_clusters}")
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if reg_m is not None and not reg_m > 0:
            raise ValueError(f"reg_m must be > 0 (or None: balanced OT), got {reg_m!r}")
        if not centers_lr_scale > 0:
            raise ValueError(f"centers_lr_scale must be > 0, got {centers_lr_scale!r}")
        if anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be >= 0, got {anneal_epochs}")
        for name, value in (("epsilon_start", epsilon_start), ("reg_m_start", reg_m_start)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (or None: no annealing), got {value!r}")
        if proportions is not None:
            # Checked here, not at the first joint step (after all of pre-training in the (p) configs).
            if len(proportions) != num_clusters:
                raise ValueError(f"proportions has {len(proportions)} entries but num_clusters is {num_clusters}")
            if not all(math.isfinite(p) and p >= 0 for p in proportions) or abs(sum(proportions) - 1.0) > 1e-6:
                raise ValueError(f"proportions must be finite, non-negative and sum to 1 (within 1e-6), got {list(proportions)}")
        # The autoencoder stays in hparams: under LightningCLI it is its class_path config, which
        # lets load_from_checkpoint rebuild it.
        self.save_hyperparameters()
        self.autoencoder = autoencoder
        p = autoencoder.latent_dim
        # In the optimizer from the first step, so that its state survives any resume; the
        # PhaseSwitch callback overwrites the values with k-means centers.
        self.centers = nn.Parameter(torch.zeros(num_clusters, p))
        w = torch.full((num_clusters,), 1.0 / num_clusters) if proportions is None else torch.tensor(proportions)
        self.register_buffer("proportions", w.float())
        # Cluster potential g: the last batch's (a warm start for the next Sinkhorn solve) and an
        # exponential average (for the potential-based assignment). Buffers, so checkpoints hold them.
        self.register_buffer("g_last", torch.zeros(num_clusters))
        self.register_buffer("g_avg", torch.zeros(num_clusters))
        self.register_buffer("g_count", torch.zeros((), dtype=torch.long))
        # The phase, set by PhaseSwitch; a buffer so that validate/test/predict from a checkpoint
        # (which restore the module but not the callbacks) evaluate as the run did.
        self.register_buffer("joint_phase", torch.tensor(False))
        # The epoch the joint phase began (set by PhaseSwitch), the origin of the annealing.
        self.register_buffer("joint_start_epoch", torch.tensor(0))
        # Host mirrors of joint_phase and g_count > 0, read every step: reading the buffers would stall a GPU
        # each time. Refreshed whenever a state dict (a checkpoint) is loaded.
        self._joint, self._warm = False, False
        self.register_load_state_dict_post_hook(DeepClustering._refresh_mirrors)
        self.metrics = nn.ModuleDict({
            f"{s}_{a}": HungarianAccuracy(num_clusters, num_clusters)
            for s in EVAL_SETS for a in ("distance", "potential")
        })
        # The training pass's own assignments (DKM's read-out): a per-epoch curve at no extra forward pass.
        # Its inputs are ours (argmin over K centers, the data module's labels), so no per-step checks.
        self.metrics[f"train_{assignment}"] = HungarianAccuracy(num_clusters, num_clusters, validate_args=False)
        # Unconverged Sinkhorn solves in the current epoch (logged per epoch, warned about once per run).
        self._unconverged, self._worst_error, self._warned_unconverged = 0, 0.0, False
        # Per-epoch sums of the training terms and statistics (logged at the epoch's end).
        self._train_sums: dict[str, Tensor | float] = {}
        self._train_steps = 0
        # The OT loss the step calls: its torch.compile once configure_model ran with `compile`.
        self._ot_loss, self._compiled = ot_clustering_loss, False
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
        module._joint, module._warm = bool(module.joint_phase), bool(module.g_count > 0)

    def schedule(self) -> tuple[float, float | None]:
        """(epsilon, reg_m) for the current epoch: the annealing of the class docstring."""
        hp = self.hparams
        t = (self.current_epoch - int(self.joint_start_epoch)) / hp.anneal_epochs if hp.anneal_epochs > 0 else 1.0
        if t >= 1.0:
            return hp.epsilon, hp.reg_m
        eps = hp.epsilon if hp.epsilon_start is None else hp.epsilon_start * (hp.epsilon / hp.epsilon_start) ** t
        reg_m = hp.reg_m
        if hp.reg_m_start is not None:
            end = hp.reg_m if hp.reg_m is not None else BALANCED_TAU * hp.epsilon
            reg_m = hp.reg_m_start * (end / hp.reg_m_start) ** t
        return eps, reg_m

    def setup(self, stage: str) -> None:
        if self.hparams.ot_loss_form == "transport" and self.trainer.world_size > 1:
            raise ValueError("model.ot_loss_form='transport' runs in one process (its differentiable Sinkhorn "
                             "iterations need the whole batch); use model.ot_loss_form='value' with several devices")
        if self.hparams.cost_scale == "batch_mean" and self.trainer.world_size > 1:
            raise ValueError("cost_scale='batch_mean' divides each rank's cost by its own batch mean, which makes the "
                             "ranks solve inconsistent problems under DDP; use cost_scale='none' with several devices")

    def configure_model(self) -> None:
        mode = self.hparams.compile
        if mode and not self._compiled:  # Lightning calls this hook at each fit, validate, test and predict
            self.autoencoder.compile(mode=mode)  # in place: the state dict keeps its keys
            if self.hparams.sinkhorn_solver == "fixed":
                self._ot_loss = torch.compile(ot_clustering_loss, mode=mode)
            self._compiled = True

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint of another configuration fails here, naming the setting, not in a tensor-shape traceback."""
        state = checkpoint.get("state_dict", {})
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

    # ---- losses -------------------------------------------------------------------------------
    def reconstruction_loss(self, x: Tensor, x_hat: Tensor) -> Tensor:
        err = (x_hat - x).pow(2).flatten(1)  # (B, d)
        return err.sum(1).mean() if self.hparams.reconstruction == "sse" else err.mean()

    def clustering_loss(self, z: Tensor, nearest: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
        """The clustering term and its statistics for embeddings ``z`` (m, p); ``nearest`` (m,), each point's
        nearest center (computed when not given), is only read for ``plan_moved``."""
        hp = self.hparams
        epsilon, reg_m = self.schedule()
        centers, scale = self.centers, None
        if hp.cost_scale == "batch_mean":
            # C / mean(C): dividing z and mu by s = sqrt(mean C) (with its gradient) makes the loss
            # invariant to the embedding's scale, which the unnormalised loss shrinks (class docstring).
            scale = squared_distances(z, centers).mean().sqrt()
            z, centers = z / scale, centers / scale
        # The embedding's scale against epsilon: mean squared distance to the nearest center over epsilon. Far below
        # 1 every assignment is soft and the clustering term barely shapes the embedding; far above, nearly hard.
        dist = squared_distances(z.detach(), centers.detach())  # (m, K), also each point's nearest center below
        scale_stat = dist.min(1).values.mean() / epsilon
        if hp.clustering == "soft_kmeans":
            loss = soft_kmeans_loss(z, centers, epsilon=epsilon, form=hp.soft_kmeans_form)
            return loss, {"epsilon": epsilon, "scale": scale_stat}
        world = self.trainer.world_size if self._trainer is not None else 1
        warm = self.g_last if self._warm else None
        loss, res = self._ot_loss(
            z, centers, self.proportions, epsilon=epsilon, gradient=hp.gradient,
            max_iter=hp.sinkhorn_iters if hp.sinkhorn_solver == "fixed" else hp.sinkhorn_max_iter,
            tol=hp.sinkhorn_tol, reg_m=reg_m, g_init=warm,
            distributed=world > 1, warn=False,  # counted per epoch and warned about once per run instead
            solver=hp.sinkhorn_solver, form=hp.ot_loss_form, transport_iters=hp.transport_iters,
        )
        if not res.converged and hp.sinkhorn_solver == "solve":  # Algorithm 1 stops at n_iter by design
            self._unconverged += 1
            self._worst_error = max(self._worst_error, float(res.marginal_error))
        g = res.g.detach()
        self.g_last.copy_(g)
        if scale is not None:
            g = g * scale.detach() ** 2  # back to the units of ||z - mu||^2, for the assignment
        self._average_potential(g)
        # Distributed Sinkhorn returns this rank's share of the global loss; DDP averages
        # gradients over ranks, so scale the share back up.
        loss = loss * world
        # The share of points the size constraint sends to another center than their nearest (0 for soft
        # k-means): the batch noise a balanced plan pushes into the embedding.
        if nearest is None:
            nearest = dist.argmin(1)
        moved = (res.plan.argmax(1) != nearest).float().mean()
        stats = {"plan_moved": moved, "sinkhorn_iters": float(res.n_iter), "sinkhorn_error": res.marginal_error}
        if hp.sinkhorn_solver != "fixed":  # the fixed solve checks nothing: its error stays a tensor on the device
            stats.update(sinkhorn_error=float(res.marginal_error), sinkhorn_converged=float(res.converged))
        return loss, {**stats, "epsilon": epsilon, "scale": scale_stat,
                      **({"reg_m": reg_m} if reg_m is not None else {})}

    def _average_potential(self, g: Tensor) -> None:
        """Fold this batch's cluster potential g (K,) into ``g_avg``."""
        # Fix the gauge (f + c, g - c) before averaging. A cluster of proportion 0 has g = -inf (it can
        # take no mass): it stays out of the mean, and its average stays -inf, so the potential rule
        # never assigns to it, instead of turning g_avg into NaN for good.
        finite = torch.isfinite(g)
        g = g - torch.where(finite, g, 0.0).sum() / finite.sum()
        self.g_count += 1
        self._warm = True
        # Running mean, then an EMA over ~100 batches; on the device, so a GPU step never waits on the host.
        rate = self.g_count.reciprocal().clamp_min(0.01)
        self.g_avg.mul_(1 - rate).add_(rate * g)

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        x = batch[0]
        z, x_hat = self.autoencoder(x)
        recon = self.reconstruction_loss(x, x_hat)
        if self.joint and self.hparams.clustering != "none":
            # Each point's nearest center before this step's update, read by train/plan_moved and train/acc.
            nearest = self.assign(z.detach(), "distance")
            try:
                clust, stats = self.clustering_loss(z, nearest)
            except NonFiniteCostError:  # the solver refuses a non-finite cost: name the term and the step
                self._non_finite({"cost ||f(x) - mu||^2 (embeddings or centers diverged)": torch.tensor(math.nan)})
            self._update_train_acc(nearest, z.detach(), batch[1])
        else:
            # Zero-weight use of the centers keeps DDP's every-parameter-gets-a-gradient rule.
            clust, stats = self.centers.sum() * 0.0, {}
        loss = recon + self.hparams.clustering_weight * clust
        return self._finish_step(loss, recon, clust, stats)

    def _update_train_acc(self, nearest: Tensor, z: Tensor, y: Tensor) -> None:
        """``train/acc``: this batch's assignments (``nearest`` (m,) or, by the potential rule, from ``z`` (m, p))
        against its labels ``y`` (m,)."""
        rule = self.hparams.assignment
        pred = nearest if rule == "distance" else self.assign(z, rule)
        labelled = y >= 0  # y = -1: no label, as in validation_step
        self.metrics[f"train_{rule}"].update(pred[labelled], y[labelled])

    def _finish_step(self, loss: Tensor, recon: Tensor, clust: Tensor, stats: dict) -> Tensor:
        if not torch.isfinite(loss):  # one host sync a step; the Sinkhorn loop already syncs more often
            self._non_finite({"reconstruction loss": recon, "clustering loss": clust})
        # Summed here and logged once an epoch: each self.log call costs Lightning ~1 ms (it moves its
        # result state with apply_to_collection), ~9 ms a step for these ten keys, 40% of an MNIST step.
        # The batches have equal sizes (drop_last), so the epoch mean is the mean over steps.
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
        if not torch.isfinite(self.g_last).any():
            bad += " (the Sinkhorn potentials are not finite)"
        raise FloatingPointError(
            f"epoch {self.current_epoch}, step {self.global_step}: {bad or 'the loss is not finite'}. Training "
            "stopped; the last checkpoint written holds the last good state. Lower model.lr, raise model.epsilon, "
            "or check the input data for NaN/inf.")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # The tensors this step writes: the optimizer's own list, not a walk of the module tree every step.
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        # A NaN or inf anywhere makes its tensor's sum non-finite: one read of the gradients and one host sync.
        # Only then the exact check, element by element (huge finite gradients can overflow a sum, not it).
        if grads and not torch.isfinite(torch.stack([g.sum() for g in grads]).sum()):
            names = [n for n, p in self.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            if not names:
                return
            raise FloatingPointError(
                f"epoch {self.current_epoch}, step {self.global_step}: the gradient of {', '.join(names[:3])}"
                f"{' and others' if len(names) > 3 else ''} is not finite. Training stopped; the last checkpoint "
                "written holds the last good state. Lower model.lr, or check the input data for NaN/inf.")

    def on_train_epoch_end(self) -> None:
        if self._train_steps:
            means = {f"train/{k}": torch.as_tensor(v / self._train_steps, dtype=torch.float32, device=self.device)
                     for k, v in self._train_sums.items()}
            self.log_dict(means, on_step=False, on_epoch=True, sync_dist=True)
        if self.joint and self.hparams.clustering != "none":
            self._log_metrics("train", "train", rules=(self.hparams.assignment,))
        if self.hparams.clustering != "ot" or not self.joint:
            return
        # Every rank solves the same global problem, so the counts agree without a reduction.
        self.log("train/sinkhorn_unconverged", float(self._unconverged), on_epoch=True)
        if self._unconverged and not self._warned_unconverged and self.trainer.is_global_zero:
            warnings.warn(
                f"epoch {self.current_epoch}: {self._unconverged} Sinkhorn solves did not reach tol "
                f"{self.hparams.sinkhorn_tol:g} within {self.hparams.sinkhorn_max_iter} iterations (worst column "
                f"marginal error {self._worst_error:.3g}); `train/sinkhorn_unconverged` counts them every epoch. "
                "Raise model.sinkhorn_max_iter or model.epsilon, or loosen model.sinkhorn_tol. (Warned once per run.)",
                RuntimeWarning, stacklevel=2)
            self._warned_unconverged = True
        self._unconverged, self._worst_error = 0, 0.0

    def configure_optimizers(self):
        hp = self.hparams
        groups = [{"params": list(self.autoencoder.parameters())},
                  {"params": [self.centers], "lr": hp.lr * hp.centers_lr_scale}]
        # The fused kernel updates all tensors in one pass: 3x faster than the per-tensor loop on CPU
        # (2.4 vs 7.6 ms an MNIST step), the same update up to rounding.
        opt = torch.optim.Adam(groups, lr=hp.lr, fused=self.device.type in ("cpu", "cuda"))
        sched = torch.optim.lr_scheduler.StepLR(opt, self.hparams.lr_decay_epochs, self.hparams.lr_decay_gamma)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

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
        if (rule or self.hparams.assignment) == "potential":
            cost = cost - self.g_avg
        return cost.argmin(1)

    # ---- evaluation ---------------------------------------------------------------------------
    _noted_unlabelled = False  # the one-time note that label-based metrics are skipped
    _heldout_offset: int | None = None  # see on_validation_epoch_start

    def on_validation_epoch_start(self) -> None:
        self._eval_sizes = {}
        self._eval_z = {}
        # Where the held-out set is the fitted set's tail from this index on, its scores come from the fitted
        # loader's pass (the data module then serves no second loader; ``heldout_offset``).
        self._heldout_offset = getattr(getattr(self.trainer, "datamodule", None), "heldout_offset", None)

    def validation_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Assigns by the centers; evaluation only reads them. While pre-training and for the AE + k-means
        baseline (``clustering="none"``) those are k-means centers, which ``PhaseSwitch`` fits on the
        embeddings before each evaluation of a ``fit`` (a step of that method, not of the evaluation)."""
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
            # Global already (the metric reduces its table over the ranks): no sync_dist (cli.quiet_third_party_notices).
            self.log_dict({f"{prefix}/{k}{suffix}": res[k] for k in ("acc", "nmi", "ari", "size_error")})

    def on_validation_epoch_end(self) -> None:
        # Every evaluation set the loaders have, not only those this rank saw a batch of: under DDP a
        # rank whose shard of a small set is empty must still join the collectives, or the others hang.
        num_sets = 2 if self._heldout_offset is not None else len(self.trainer.num_val_batches)
        for idx in range(num_sets):
            name = EVAL_SETS[idx]
            sizes = self._eval_sizes.get(idx, torch.zeros(len(self.centers), dtype=torch.long, device=self.device))
            sizes = self.trainer.strategy.reduce(sizes.float(), reduce_op="sum")
            if not sizes.sum():  # e.g. limit_val_batches stopped before the fitted set's held-out tail (every rank agrees)
                continue
            self._log_metrics(name, name)
            self._log_sizes(name, sizes)
        # What this rank embedded, kept for the pictures drawn right after (ClusterFigures), which otherwise embed
        # every sample again: as much as the evaluation itself (12.5 s an epoch on CIFAR-10 on 2 cores),
        # every `figures.every_n_epochs` and at the end.
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
