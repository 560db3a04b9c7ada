"""A scikit-learn estimator around the deep-clustering system, for arrays in memory.

:class:`OTClustering` fits the same :class:`~lit_otclust.system.DeepClustering` as ``python -m lit_otclust fit``:

.. math::
    \\min_{\\theta, \\phi, \\mu}\\ \\ell_r(\\theta, \\phi) + \\lambda\\, \\mathrm{OT}_\\varepsilon\\Big(
    \\tfrac{1}{m} \\sum_{i=1}^m \\delta_{f_\\theta(x_i)},\\ \\sum_{k=1}^K w_k\\, \\delta_{\\mu_k}\\Big)

over an autoencoder (encoder f_theta, decoder g_phi, reconstruction loss l_r) and K centers mu (K, p), on
batches of m samples, where ``OT_eps`` is the entropic optimal transport cost with squared Euclidean
ground cost and w the prescribed cluster proportions (Genevay, Dulac-Arnold, Vert, 2020). Its data module
(:meth:`~lit_otclust.data.ArrayDataModule.from_arrays`), phases (:class:`~lit_otclust.phases.PhaseSwitch`:
pre-training, then the k-means initialisation of mu) and seeds are the command line's; only the loggers,
checkpoints, pictures and progress bar are left out. A sample's cluster is ``argmin_k ||f(x) - mu_k||^2``.

On features ((n, d) arrays) the default is no autoencoder: size-constrained k-means in the input space
(:func:`~lit_otclust.clustering.constrained_kmeans`, the same entropic OT assignment with the centers as the only
parameters), whose assignment ``argmin_k ||x - mu_k||^2 - g_k`` meets w: on features it is the better default of the
two (RESULTS.md, "Arrays and features: the estimator"). It runs in float32 with torch, on a GPU when ``accelerator``
allows one, takes ``sample_weight``, and learns from batches with ``partial_fit``; its speed against scikit-learn's
k-means is measured in benchmarks/README.md ("The estimator on features").
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import numbers
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils._available_if import available_if
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from torch import Tensor, nn

from lit_otclust.clustering import _scale, assign, constrained_kmeans, embed_samples, impose, kmeans, minibatch_step
from lit_otclust.data import ArrayDataModule
from lit_otclust.losses import ClusteringLoss, OTLoss, SoftKMeans
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.phases import PhaseSwitch
from lit_otclust.system import DeepClustering, adam, check_proportions

# Kept as they come (uint8 pixels are divided by 255, as the command line's ArrayDataModule does); any other
# dtype becomes float32, the autoencoder's.
_DTYPES = (np.float32, np.float64, np.uint8)
# Warnings about choices the caller of fit did not make and cannot change: the samples are in memory, where
# loader workers only cost (lit_otclust.data.base); the system keeps its autoencoder in its hyperparameters on
# purpose (lit_otclust.system); a deprecation inside Lightning's own code under this torch (as lit_otclust.__main__
# drops).
_NOT_THE_CALLERS = (r"The '\w+_dataloader' does not have many workers",
                    r"Attribute '(autoencoder|loss)' is an instance of `nn.Module`",
                    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                    # Lightning's hint wherever SLURM is installed: an in-process fit on one device is not a SLURM job
                    r"The `srun` command is available on your system but is not used")


# The recipe that each autoencoder's None settings take (measured on images: results/estimator_images.md). The MLP,
# trained from scratch, starts its centers from size-constrained k-means and refits them by it every quarter of the
# epochs (digits 0.797 against 0.740, 5k MNIST 0.641 against 0.570); the pre-trained conv autoencoder keeps k-means
# (digits 0.808 against 0.805, 5k CIFAR-10 0.224 against 0.231).
_RECIPES = {"mlp": {"max_epochs": 200, "pretrain_epochs": 0, "batch_size": 300, "center_init": "constrained",
                    "refit_every": 50},
            "conv": {"max_epochs": 50, "pretrain_epochs": 10, "batch_size": 64, "center_init": "kmeans",
                     "refit_every": 0}}
# On (n, d) features the MLP keeps k-means and no refit, as results/estimator_blobs.md measured it: the size-constrained
# recipe was measured on images only.
_FEATURES_MLP = {**_RECIPES["mlp"], "center_init": "kmeans", "refit_every": 0}


class OTClustering(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """Deep clustering with entropic OT and cluster-size constraints, as a scikit-learn clusterer and transformer.

    ``fit(X)`` trains an autoencoder and ``n_clusters`` centers in its embedding (the module docstring);
    ``transform(X)`` is the embedding f(x), (n, latent_dim); ``predict(X)`` the nearest center of each
    embedding. With ``proportions`` w, each training batch's transport plan gives cluster k the share w_k of the
    batch, so the clusters learn those sizes; ``clustering="soft_kmeans"`` drops the size constraint (the
    entropic soft k-means loss, the paper's Prop. 2). On features, ``fit`` takes ``sample_weight`` (counted in the
    sizes: cluster k holds the share w_k of the total weight), ``partial_fit`` learns batch by batch (mini-batch
    size-constrained k-means, as MiniBatchKMeans is to KMeans), and ``predict(X, impose_proportions=True)`` assigns
    a new batch so that it too holds the shares w.

    X is an (n, d) array of features (a pretrained network's embeddings), or images (n, H, W), (n, C, H, W) or
    (n, H, W, C) (layout as :class:`~lit_otclust.data.ArrayDataModule` reads it, ``channels_last``); uint8 values
    are divided by 255, any other dtype is taken as it is. By default ``fit`` is quiet: no logger, no checkpoint, no
    file written, no progress bar.

    Args:
        n_clusters: K.
        proportions: w, the prescribed cluster proportions (K,), non-negative, summing to 1; None: uniform.
            Center k carries w_k; the k-means centers that start training are ordered so that the largest
            k-means cluster carries the largest w_k (:func:`lit_otclust.clustering.match_sizes`).
        clustering: ``"ot"`` (the paper's loss), ``"soft_kmeans"`` (the same without the size constraint), or a
            :class:`~lit_otclust.losses.ClusteringLoss` instance (copied at each fit; without an autoencoder only
            its ``constrains_sizes`` counts: size-constrained k-means or k-means).
        epsilon: the entropic regularisation, in units of squared embedding distance.
        clustering_weight: lambda in l_r + lambda * l_c.
        sinkhorn_solver, sinkhorn_iters: the OT solve of each batch (:class:`~lit_otclust.losses.OTLoss`'s
            ``solver`` and ``iters``): ``"fixed"``, ``sinkhorn_iters`` warm-started iterations, is the fastest.
        autoencoder: ``"auto"`` (default): ``"none"`` for (n, d) features, ``"conv"`` for images whose height and
            width divide by 8, ``"mlp"`` for other images (results/estimator_images.md: on digits and 5k CIFAR-10
            the conv autoencoder with its schedule below scored 0.805 / 0.231, the MLP's 0.740 / 0.225). ``"none"``: no
            embedding, the centers live in X's space: size-constrained k-means (:func:`~lit_otclust.clustering.\
            constrained_kmeans`, with ``kmeans_n_init`` restarts and ``epsilon`` relative to the mean squared
            distance to the nearest center), or k-means with ``clustering="soft_kmeans"``; ``transform`` is then X
            itself and the training settings below are unused. ``"mlp"`` (:class:`~lit_otclust.models.MLPAutoencoder`,
            any sample shape, flattened; flattened images are better passed so, or as images) or ``"conv"``
            (:class:`~lit_otclust.models.ConvAutoencoder`, images whose sides divide by 8).
        hidden_dims: the MLP encoder's hidden widths (the decoder mirrors them).
        latent_dim: p, the embedding's size.
        weight_init: the autoencoder's initial weights, ``"torch"`` (PyTorch's defaults, the configs') or
            ``"glorot"`` (TensorFlow's). Without pre-training, k-means starts from the untrained embedding, so this
            decides where the centers start; neither was better on every data set measured (RESULTS.md, "Arrays
            and features: the estimator").
        max_epochs: training epochs in all, pre-training included.
        pretrain_epochs: reconstruction-only epochs before the centers are initialised (``center_init``) and the
            clustering loss starts (0: on the untrained encoder's embedding, the paper's Algorithm 2).
        batch_size: m, the samples of each OT problem; at most n (a smaller X trains on whole-set batches).
            None, for each of these three and the two below: the recipe measured for the autoencoder in use, for
            the MLP the MNIST configs' schedule (200 epochs, no pre-training, batch 300) with, on images, the
            size-constrained start and refits every quarter of the joint epochs; for the conv autoencoder
            configs/folder_example.yaml's (50 epochs, the first fifth of them pre-training, batch 64, k-means, no
            refit).
        lr: Adam's learning rate.
        kmeans_n_init: k-means++ restarts of the centers' initialisation (without an autoencoder: of the
            size-constrained k-means' search).
        center_init, refit_every: with an autoencoder, how the centers start the joint phase and how often they are
            fit again (:class:`~lit_otclust.phases.PhaseSwitch`): ``"kmeans"``, or ``"constrained"``, size-constrained
            k-means with w (equal sizes without ``proportions``); every ``refit_every`` joint epochs the centers are
            refit by size-constrained k-means (0: never). None: the autoencoder's recipe (above).
        channels_last: the layout of a 4-d X; None guesses it (:class:`~lit_otclust.data.ArrayDataModule`).
        accelerator: Lightning's accelerator (``"auto"``: a GPU if there is one); one device. Without an
            autoencoder: ``"auto"``, ``"gpu"`` or ``"cuda"`` run on CUDA where torch has it, anything else on the CPU.
        trainer_kwargs: more ``lightning.Trainer`` arguments, over the estimator's (e.g. ``{"logger": ...,
            "precision": "bf16-mixed"}``).
        verbose: Lightning's progress bar, model summary and info lines (which accelerator, why it stopped);
            False holds them back during ``fit``.
        random_state: seeds the autoencoder's initial weights, the batch order and k-means (an int seeds
            them as ``seed_everything`` does on the command line); None draws a seed from numpy's global state.

    Attributes:
        labels_: (n,) int64, each training sample's cluster.
        cluster_centers_: (K, latent_dim) float32, the centers mu in the embedding: ``predict(X)`` is the
            index of the row of ``cluster_centers_`` nearest each row of ``transform(X)`` (without an autoencoder,
            (K, d) in X's space, and the rule subtracts ``potentials_``).
        potentials_: (K,) float32, without an autoencoder: the plan's cluster potentials g, which make the
            nearest-center rule meet the proportions; zeros for k-means. After ``partial_fit``: the running mean
            of the batches' potentials.
        counts_: (K,) float64, after ``partial_fit``: the rows (weighted) counted on each center so far.
        module_: the trained :class:`~lit_otclust.system.DeepClustering` (on the CPU); None without an autoencoder.
        schedule_: with an autoencoder, the ``max_epochs``, ``pretrain_epochs``, ``batch_size``, ``center_init`` and
            ``refit_every`` the fit ran (None settings resolved).
        n_features_in_: X's second dimension seen by ``fit``.

    Example (the sizes as measured on a 2-core CPU; training's floating point differs between machines):
        >>> import numpy as np
        >>> from sklearn.datasets import make_blobs
        >>> X, _ = make_blobs([600, 300, 100], random_state=1)
        >>> model = OTClustering(3, proportions=[0.6, 0.3, 0.1], random_state=0).fit(X)  # features: no autoencoder
        >>> np.bincount(model.labels_)
        array([600, 300, 100])
        >>> model.cluster_centers_.shape
        (3, 2)
        >>> deep = OTClustering(3, proportions=[0.6, 0.3, 0.1], autoencoder="mlp", weight_init="glorot",
        ...                     max_epochs=20, random_state=0).fit(X)
        >>> deep.transform(X).shape, deep.cluster_centers_.shape
        ((1000, 10), (3, 10))
    """

    def __init__(
        self,
        n_clusters: int = 8,
        proportions: Sequence[float] | None = None,
        clustering: Literal["ot", "soft_kmeans"] | ClusteringLoss = "ot",
        epsilon: float = 0.01,
        clustering_weight: float = 0.1,
        sinkhorn_solver: Literal["fixed", "solve", "algorithm1"] = "fixed",
        sinkhorn_iters: int = 10,
        autoencoder: Literal["auto", "none", "mlp", "conv"] = "auto",
        hidden_dims: Sequence[int] = (500, 250),
        latent_dim: int = 10,
        weight_init: Literal["torch", "glorot"] = "torch",
        max_epochs: int | None = None,
        pretrain_epochs: int | None = None,
        batch_size: int | None = None,
        lr: float = 1e-3,
        kmeans_n_init: int = 20,
        center_init: Literal["kmeans", "constrained"] | None = None,
        refit_every: int | None = None,
        channels_last: bool | None = None,
        accelerator: str = "auto",
        trainer_kwargs: dict[str, Any] | None = None,
        verbose: bool = False,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.proportions = proportions
        self.clustering = clustering
        self.epsilon = epsilon
        self.clustering_weight = clustering_weight
        self.sinkhorn_solver = sinkhorn_solver
        self.sinkhorn_iters = sinkhorn_iters
        self.autoencoder = autoencoder
        self.hidden_dims = hidden_dims
        self.latent_dim = latent_dim
        self.weight_init = weight_init
        self.max_epochs = max_epochs
        self.pretrain_epochs = pretrain_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.kmeans_n_init = kmeans_n_init
        self.center_init = center_init
        self.refit_every = refit_every
        self.channels_last = channels_last
        self.accelerator = accelerator
        self.trainer_kwargs = trainer_kwargs
        self.verbose = verbose
        self.random_state = random_state

    def fit(self, X: Any, y: None = None, sample_weight: Any = None) -> OTClustering:
        """Train on X (n, d) or (n, *image_shape); ``y`` is ignored. ``sample_weight`` (n,), non-negative, without
        an autoencoder only: cluster k holds the share w_k of the total weight. Returns self."""
        X = validate_data(self, X, allow_nd=True, dtype=_DTYPES)
        self._check_params(len(X))
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        seed = self._seed()
        self.counts_ = None
        kind = self._autoencoder_kind(X)
        if kind == "none":
            return self._fit_centers(X, seed, sample_weight)
        schedule = self._schedule(kind, images=X.ndim > 2)
        if sample_weight is not None and not np.all(sample_weight == sample_weight[0]):
            raise ValueError("sample_weight needs autoencoder='none' (the training batches weigh every sample alike)")
        data = ArrayDataModule.from_arrays(X, num_classes=self.n_clusters, channels_last=self.channels_last,
                                           batch_size=min(schedule["batch_size"], len(X)), seed=seed)
        proportions = None if self.proportions is None else np.asarray(self.proportions, dtype=float).tolist()
        # The caller's torch RNG is left as it was; inside, the weights are drawn as the command line draws them
        # after seed_everything(seed).
        with torch.random.fork_rng(devices=[]), _quiet(self.verbose):
            torch.manual_seed(seed)
            system = DeepClustering(
                self._build_autoencoder(kind, data.input_shape), num_clusters=self.n_clusters, loss=self._build_loss(),
                proportions=proportions, clustering_weight=self.clustering_weight,
                optimizer=functools.partial(adam, lr=self.lr))
            phases = PhaseSwitch(pretrain_epochs=schedule["pretrain_epochs"], kmeans_n_init=self.kmeans_n_init,
                                 seed=seed, center_init=schedule["center_init"], refit_every=schedule["refit_every"])
            trainer = L.Trainer(callbacks=[phases], **self._trainer_settings(schedule["max_epochs"]))
            trainer.fit(system, datamodule=data)
        self.schedule_ = schedule
        system.trainer = None  # the trainer holds the data module and its copy of X
        system.eval()
        self.module_ = system
        self.cluster_centers_ = system.centers.detach().cpu().numpy()
        self.labels_ = self._assign(self._embed(data.fit_set.x))
        return self

    def transform(self, X: Any) -> np.ndarray:
        """The embeddings f(x) of X, (n, latent_dim) float32 (X itself, as float32, without an autoencoder)."""
        return self._embed(self._samples(X)).cpu().numpy()

    def predict(self, X: Any, impose_proportions: bool = False) -> np.ndarray:
        """The cluster of each sample of X, (n,) int64: its embedding's nearest center (without an autoencoder,
        ``argmin_k ||x - mu_k||^2 - g_k`` with the training plan's potentials g, the rule that met the proportions
        on the training set). ``impose_proportions=True``: X itself is split in the shares w (or equal shares
        without ``proportions``): the potentials are solved again on X, for a batch known to hold the same shares
        (:func:`lit_otclust.clustering.impose`); at least ``n_clusters`` samples."""
        z = self._embed(self._samples(X))
        if not impose_proportions:
            return self._assign(z)
        if len(z) < self.n_clusters:
            raise ValueError(f"impose_proportions needs at least n_clusters={self.n_clusters} samples, got {len(z)}")
        g = None if self.module_ is not None else torch.as_tensor(self.potentials_)
        labels, _ = impose(z.to(self._device()), torch.as_tensor(self.cluster_centers_), self._proportions(),
                           float(self.epsilon), g)
        return labels.cpu().numpy()

    @available_if(lambda self: self.autoencoder in ("auto", "none"))  # features only: no training by batch here
    def partial_fit(self, X: Any, y: None = None, sample_weight: Any = None) -> OTClustering:
        """One mini-batch step on features (n, d), without an autoencoder: the first batch (at least
        ``n_clusters`` rows) is clustered by ``fit``'s size-constrained k-means; each later batch's plan is solved at
        the current centers, which move towards its plan means by a per-center step 1 / rows counted
        (:func:`lit_otclust.clustering.minibatch_step`), and ``potentials_`` is the running mean of the batches'
        potentials. ``labels_`` is the batch's clusters. Returns self."""
        first = getattr(self, "counts_", None) is None
        X = validate_data(self, X, reset=first, dtype=_DTYPES)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if first:
            self._check_params(len(X))
            if self._autoencoder_kind(X) != "none":
                raise ValueError("partial_fit needs features without an autoencoder (autoencoder='none' or 'auto')")
            self._fit_centers(X, self._seed(), sample_weight)
            rows = np.ones(len(X)) if sample_weight is None else sample_weight
            self.counts_ = np.bincount(self.labels_, weights=rows, minlength=self.n_clusters).astype(np.float64)
            x = _features(X).to(self._device())
            a = torch.as_tensor(rows / rows.sum(), dtype=x.dtype, device=x.device)
            self.scale_ = _scale(x, x.pow(2).sum(1), a, torch.as_tensor(self.cluster_centers_).to(x))
            return self
        x = _features(X).to(self._device())
        weights = None if sample_weight is None else torch.as_tensor(sample_weight)
        before = float(self.counts_.sum())
        centers, g, counts = minibatch_step(x, self._proportions(), torch.as_tensor(self.cluster_centers_),
                                            torch.as_tensor(self.potentials_), torch.as_tensor(self.counts_),
                                            float(self.epsilon) * self.scale_, weights)
        share = 1.0 - before / float(counts.sum())  # this batch's share of the rows counted
        self.cluster_centers_ = centers.float().cpu().numpy()
        self.potentials_ = ((1 - share) * self.potentials_ + share * g.cpu().numpy()).astype(np.float32)
        self.counts_ = counts.cpu().numpy()
        self.labels_ = self._assign(x)
        return self

    def _fit_centers(self, X: np.ndarray, seed: int, sample_weight: np.ndarray | None = None) -> OTClustering:
        """``autoencoder="none"``: the centers in X's space, by size-constrained k-means (or k-means)."""
        x = _features(X).to(self._device())
        K = self.n_clusters
        weights = None if sample_weight is None else torch.as_tensor(sample_weight, device=x.device)
        if self._build_loss().constrains_sizes:
            centers, g, _ = constrained_kmeans(x, self._proportions(), self.kmeans_n_init, seed,
                                               epsilon=float(self.epsilon), sample_weight=weights)
        else:  # no size constraint: k-means, and no potential
            centers, g = kmeans(x, K, self.kmeans_n_init, seed, sample_weight=sample_weight), torch.zeros(K)
        self.module_ = None
        self.cluster_centers_ = centers.float().cpu().numpy()
        self.potentials_ = g.float().cpu().numpy()
        self.labels_ = self._assign(x)
        return self

    def _proportions(self) -> Tensor:
        """w (K,) float64: ``proportions``, or equal shares."""
        K = self.n_clusters
        if self.proportions is None:
            return torch.full((K,), 1.0 / K, dtype=torch.float64)
        return torch.as_tensor(np.asarray(self.proportions, dtype=np.float64))

    def _device(self) -> torch.device:
        """Where the path without an autoencoder computes: CUDA where ``accelerator`` allows it and torch has it."""
        if self.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")

    @property
    def _n_features_out(self) -> int:
        """Columns of ``transform``'s output, for ``get_feature_names_out``."""
        return self.cluster_centers_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True  # (n, H, W) images
        tags.transformer_tags.preserves_dtype = ["float32"]  # the embedding is float32 whatever X was
        return tags

    # ---- helpers ------------------------------------------------------------------------------------------------
    def _check_params(self, num_samples: int) -> None:
        """What DeepClustering, PhaseSwitch and the data module do not check themselves, or check under other names."""
        if not isinstance(self.clustering, ClusteringLoss) and self.clustering not in ("ot", "soft_kmeans"):
            raise ValueError(f"clustering must be 'ot', 'soft_kmeans' or a ClusteringLoss, got {self.clustering!r}")
        if self.autoencoder not in ("auto", "none", "mlp", "conv"):
            raise ValueError(f"autoencoder must be 'auto', 'none', 'mlp' or 'conv', got {self.autoencoder!r}")
        if self.center_init not in (None, "kmeans", "constrained"):
            raise ValueError(f"center_init must be None, 'kmeans' or 'constrained', got {self.center_init!r}")
        refit_every = self.refit_every
        if refit_every is not None and (not isinstance(refit_every, numbers.Integral) or refit_every < 0):
            raise ValueError(f"refit_every must be None or an integer >= 0 (0: never), got {refit_every!r}")
        if self.proportions is not None:  # the path without an autoencoder builds no DeepClustering, which checks it
            check_proportions(np.asarray(self.proportions, dtype=float).tolist(), self.n_clusters, "n_clusters")
        for name in ("n_clusters", "max_epochs", "batch_size", "latent_dim"):
            value = getattr(self, name)
            if value is None and name in ("max_epochs", "batch_size"):  # the autoencoder's schedule (fit)
                continue
            if not isinstance(value, numbers.Integral) or value < (2 if name == "n_clusters" else 1):
                raise ValueError(f"{name} must be an integer >= {2 if name == 'n_clusters' else 1}, got {value!r}")
        if num_samples < self.n_clusters:
            raise ValueError(f"n_samples={num_samples} should be >= n_clusters={self.n_clusters}.")

    def _autoencoder_kind(self, X: np.ndarray) -> str:
        """``autoencoder`` with ``"auto"`` resolved: none on (n, d) features, conv on images whose sides divide by 8,
        else the MLP."""
        if self.autoencoder != "auto":
            return self.autoencoder
        if X.ndim == 2:
            return "none"
        probe = ArrayDataModule.from_arrays(X, channels_last=self.channels_last, num_classes=self.n_clusters,
                                            batch_size=1)  # reads the layout as fit will, copies nothing
        height, width = probe.input_shape[-2:]
        return "conv" if height % 8 == 0 and width % 8 == 0 else "mlp"

    def _schedule(self, kind: str, images: bool = True) -> dict[str, Any]:
        """The recipe for the autoencoder ``kind`` on images or features: each None setting takes the recipe's; a None
        ``pretrain_epochs`` the recipe's share of the epochs that will run, a None ``refit_every`` its share of the
        joint epochs."""
        recipe = _FEATURES_MLP if kind == "mlp" and not images else _RECIPES[kind]
        schedule = {name: recipe[name] if getattr(self, name) is None else getattr(self, name) for name in recipe}
        if self.pretrain_epochs is None:
            schedule["pretrain_epochs"] = recipe["pretrain_epochs"] * schedule["max_epochs"] // recipe["max_epochs"]
        if self.refit_every is None and recipe["refit_every"]:
            joint, recipe_joint = (schedule["max_epochs"] - schedule["pretrain_epochs"],
                                   recipe["max_epochs"] - recipe["pretrain_epochs"])
            schedule["refit_every"] = max(1, recipe["refit_every"] * joint // recipe_joint)
        return schedule

    def _seed(self) -> int:
        random_state = check_random_state(self.random_state)  # validates it, whatever it is
        if isinstance(self.random_state, numbers.Integral):
            return int(self.random_state)
        return int(random_state.randint(np.iinfo(np.int32).max))

    def _build_loss(self) -> ClusteringLoss:
        if isinstance(self.clustering, ClusteringLoss):
            return copy.deepcopy(self.clustering)  # the parameter stays as the caller passed it (sklearn's rule)
        if self.clustering == "soft_kmeans":
            return SoftKMeans(self.epsilon)
        return OTLoss(self.epsilon, solver=self.sinkhorn_solver, iters=self.sinkhorn_iters)

    def _build_autoencoder(self, kind: str, input_shape: tuple[int, ...]) -> nn.Module:
        if kind == "conv":
            return ConvAutoencoder(input_shape, latent_dim=self.latent_dim, weight_init=self.weight_init)
        return MLPAutoencoder(input_shape, hidden_dims=tuple(self.hidden_dims), latent_dim=self.latent_dim,
                              weight_init=self.weight_init)

    def _trainer_settings(self, max_epochs: int) -> dict[str, Any]:
        quiet = dict(max_epochs=max_epochs, accelerator=self.accelerator, devices=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=self.verbose, enable_model_summary=self.verbose,
                     # labels_ and predict score after fit; no evaluation while training
                     limit_val_batches=0, num_sanity_val_steps=0)
        return {**quiet, **(self.trainer_kwargs or {})}

    def _samples(self, X: Any) -> Tensor:
        """X validated against the fitted shape and read as the data module reads it: float32 (n, *input_shape)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, allow_nd=True, dtype=_DTYPES)
        if self.module_ is None:  # centers in X's space
            return _features(X)
        input_shape = self.module_.autoencoder.input_shape
        data = ArrayDataModule.from_arrays(X, num_classes=len(self.cluster_centers_), channels_last=self.channels_last,
                                           batch_size=1, drop_last=False)
        if data.input_shape != input_shape:
            raise ValueError(f"X holds samples of shape {data.input_shape}; {type(self).__name__} was fitted on "
                             f"{input_shape}")
        data.setup()
        return data.fit_set.x

    def _embed(self, x: Tensor) -> Tensor:
        if self.module_ is None:
            return x
        return embed_samples(self.module_, x, ArrayDataModule.default_eval_batch_size)  # (n, p)

    def _assign(self, z: Tensor) -> np.ndarray:
        if self.module_ is None:
            centers, g = torch.as_tensor(self.cluster_centers_), torch.as_tensor(self.potentials_)
            return assign(z.to(self._device()), centers, g).cpu().numpy()  # (n,)
        return self.module_.assign(z).cpu().numpy()  # (n,)


def _features(X: np.ndarray) -> Tensor:
    """X as the path without an autoencoder reads it: (n, d) float32, each sample flattened."""
    return torch.as_tensor(np.asarray(X, dtype=np.float32).reshape(len(X), -1))


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Within: the warnings of ``_NOT_THE_CALLERS`` ignored and, unless ``verbose``, Lightning's INFO lines held back;
    the caller's warning filters and logger level come back on exit."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    with warnings.catch_warnings():
        for message in _NOT_THE_CALLERS:
            warnings.filterwarnings("ignore", message=message)
        if not verbose:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            logger.setLevel(level)
