"""The command-line flags of before the clustering loss became ``model.loss``, for the records and studies that name them.

Commit :data:`LAST_FLAT_COMMIT` is the last whose ``DeepClustering`` took the loss's settings flat
(``--model.clustering soft_kmeans --model.epsilon 0.05``). :func:`translate` rewrites such overrides into today's
(``--model.loss.class_path lit_otclust.losses.SoftKMeans --model.loss.init_args.epsilon 0.05``), so a committed
study builds runnable commands; an option since retired (:data:`RETIRED`) fails, naming where its result is and the
commit that reruns it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

LAST_FLAT_COMMIT = "093e9ce14ebf2c3c2bc704e36be30bb721c5276e"
LOSSES = {"ot": "lit_otclust.losses.OTLoss", "soft_kmeans": "lit_otclust.losses.SoftKMeans"}
# Old key -> the loss's argument; the OT solve's ones mean nothing to soft k-means, which ignored them.
MOVED = {"model.epsilon": "epsilon", "model.soft_kmeans_form": "form"}
MOVED_OT = {"model.sinkhorn_solver": "solver", "model.sinkhorn_iters": "iters", "model.sinkhorn_max_iter": "max_iter",
            "model.sinkhorn_tol": "tol", "model.gradient": "gradient", "model.reg_m": "reg_m"}
_RECIPE = 'RESULTS.md, "The choices the paper leaves open"'
# Options that measurement showed no help, and where that measurement is.
RETIRED = {"model.ot_loss_form": _RECIPE, "model.transport_iters": _RECIPE, "model.cost_scale": _RECIPE,
           "model.anneal_epochs": _RECIPE, "model.epsilon_start": _RECIPE, "model.reg_m_start": _RECIPE,
           "model.centers_lr_scale": _RECIPE, "model.reconstruction": "no run (no config used 'mse')",
           "model.seed": "no run (it was never read)", "phases.labelled_per_class": "no run (no study used it)"}


class RetiredOption(ValueError):
    """A flag names an option that measurement showed no help; the message says where its result is."""


def retired_message(key: str) -> str:
    return (f"--{key} was removed (measured no help: {RETIRED[key]}); commit {LAST_FLAT_COMMIT[:7]} "
            f"(git checkout {LAST_FLAT_COMMIT[:7]}) still runs it")


def check_argv(argv: list[str]) -> None:
    """Raise ValueError on a retired or renamed flag among ``argv``, with the replacement or the result's place."""
    for arg in argv:
        key = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if key in RETIRED or (key == "phases.match_proportions" and arg.endswith("labels")):
            raise ValueError(retired_message(key if key in RETIRED else "phases.labelled_per_class"))
        if key == "model.clustering":
            raise ValueError("--model.clustering became --model.loss: --model.loss.class_path "
                             f"{' or '.join(LOSSES.values())}, or --model.loss null for AE + k-means")
        if key in MOVED or key in MOVED_OT:
            raise ValueError(f"--{key} became --model.loss.init_args.{(MOVED | MOVED_OT)[key]}")


def translate(config: str, settings: dict[str, str]) -> dict[str, str]:
    """``settings`` (overrides ``{key: value}`` of a fit of ``config``) with the old keys replaced by today's, in order,
    the loss's class first. Raises ValueError on a retired option."""
    if retired := [key for key in settings if key in RETIRED]:
        raise RetiredOption(f"{config}: {retired_message(retired[0])}")
    out = {key: value for key, value in settings.items() if key not in MOVED and key not in MOVED_OT}
    kind = settings.get("model.clustering")
    if kind is not None:
        out.pop("model.clustering")
    moved = {key: name for key, name in (MOVED | MOVED_OT).items() if key in settings}
    if kind is not None:
        loss = LOSSES.get(kind)  # None: "none"
    else:
        loss = _config_loss(config) if moved else None
    if loss != LOSSES["ot"]:
        moved = {key: name for key, name in moved.items() if key in MOVED}
    new = {}
    if kind is not None:
        new = {"model.loss": "null"} if loss is None else {"model.loss.class_path": loss}
    if loss is not None:
        new |= {f"model.loss.init_args.{name}": settings[key] for key, name in moved.items()}
    return {**new, **out}


def _config_loss(config: str) -> str | None:
    """The loss class a config file names (None: AE + k-means)."""
    loss = ((yaml.safe_load(Path(config).read_text()) or {}).get("model") or {}).get("loss")
    return loss.get("class_path") if isinstance(loss, dict) else None
