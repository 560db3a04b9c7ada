"""The command-line flags of before the clustering loss became ``model.loss``, for the records and studies that name them.

Commit :data:`LAST_FLAT_COMMIT` is the last whose ``DeepClustering`` took the loss's settings flat
(``--model.clustering soft_kmeans --model.epsilon 0.05``). On the command line such a flag fails naming its
replacement (:func:`check_argv`); an option since retired (:data:`RETIRED`) names where its result is and the commit
that reruns it. The lab rewrites them in committed studies (:mod:`lit_otclust.lab.legacy`).
"""

from __future__ import annotations

LAST_FLAT_COMMIT = "093e9ce14ebf2c3c2bc704e36be30bb721c5276e"
LOSSES = {"ot": "lit_otclust.losses.OTLoss", "soft_kmeans": "lit_otclust.losses.SoftKMeans"}
# Old key -> the loss's argument; the OT solve's ones mean nothing to soft k-means, which ignored them.
MOVED = {"model.epsilon": "epsilon", "model.soft_kmeans_form": "form"}
MOVED_OT = {"model.sinkhorn_solver": "solver", "model.sinkhorn_iters": "iters", "model.sinkhorn_max_iter": "max_iter",
            "model.sinkhorn_tol": "tol", "model.gradient": "gradient", "model.reg_m": "reg_m"}
# The optimizer and schedule of before ``model.optimizer`` took a class (OptimizerCallable): the flag, its replacement.
OPTIMIZATION = {"model.optimizer": "--model.optimizer torch.optim.SGD (or torch.optim.Adam), with its own arguments",
                "model.lr": "--model.optimizer.init_args.lr (with --model.optimizer torch.optim.Adam or SGD)",
                "model.momentum": "--model.optimizer.init_args.momentum (with --model.optimizer torch.optim.SGD)",
                "model.lr_decay_epochs": "--model.lr_scheduler.init_args.step_size (torch.optim.lr_scheduler.StepLR)",
                "model.lr_decay_gamma": "--model.lr_scheduler.init_args.gamma (torch.optim.lr_scheduler.StepLR)"}
_RECIPE = 'RESULTS.md, "The choices the paper leaves open"'
# Options that measurement showed no help, and where that measurement is.
RETIRED = {"model.ot_loss_form": _RECIPE, "model.transport_iters": _RECIPE, "model.cost_scale": _RECIPE,
           "model.anneal_epochs": _RECIPE, "model.epsilon_start": _RECIPE, "model.reg_m_start": _RECIPE,
           "model.centers_lr_scale": _RECIPE, "model.reconstruction": "no run (no config used 'mse')",
           "model.seed": "no run (it was never read)", "phases.labelled_per_class": "no run (no study used it)"}


def retired_message(key: str) -> str:
    return (f"--{key} was removed (measured no help: {RETIRED[key]}); commit {LAST_FLAT_COMMIT[:7]} "
            f"(git checkout {LAST_FLAT_COMMIT[:7]}) still runs it")


def check_argv(argv: list[str]) -> None:
    """Raise ValueError on a retired or renamed flag among ``argv``, with the replacement or the result's place."""
    for i, arg in enumerate(argv):
        key = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1] if i + 1 < len(argv) else ""
        if key in RETIRED or (key == "phases.match_proportions" and arg.endswith("labels")):
            raise ValueError(retired_message(key if key in RETIRED else "phases.labelled_per_class"))
        if key == "model.clustering":
            raise ValueError("--model.clustering became --model.loss: --model.loss.class_path "
                             f"{' or '.join(LOSSES.values())}, or --model.loss null for AE + k-means")
        if key in OPTIMIZATION and (key != "model.optimizer" or value in ("adam", "sgd")):
            raise ValueError(f"--{key} became {OPTIMIZATION[key]}")
        if key in MOVED or key in MOVED_OT:
            raise ValueError(f"--{key} became --model.loss.init_args.{(MOVED | MOVED_OT)[key]}")
