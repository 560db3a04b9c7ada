"""Committed studies name flags of before the clustering loss became ``model.loss``: :func:`translate` rewrites them into
today's (``--model.clustering soft_kmeans --model.epsilon 0.05`` into ``--model.loss.class_path
lit_otclust.losses.SoftKMeans --model.loss.init_args.epsilon 0.05``), so such a study builds runnable commands; an
option since retired fails with :class:`RetiredOption`, naming where its result is. The tables are
:mod:`lit_otclust.legacy`'s, which the command line checks against.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lit_otclust.legacy import LOSSES, MOVED, MOVED_OT, OPTIMIZATION, RETIRED, retired_message


class RetiredOption(ValueError):
    """A flag names an option that measurement showed no help; the message says where its result is."""


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
    new |= _optimization(config, settings)
    return {**new, **{key: value for key, value in out.items() if key not in OPTIMIZATION}}


def _optimization(config: str, settings: dict[str, str]) -> dict[str, str]:
    """The optimizer and schedule of before ``model.optimizer`` took a class (``--model.optimizer sgd --model.lr 0.1
    --model.momentum 0.9 --model.lr_decay_epochs 50 --model.lr_decay_gamma 0.5``) as today's overrides: the class
    and every argument the old flags set, the values the flags left out from the config or the old defaults."""
    model = (yaml.safe_load(Path(config).read_text()) or {}).get("model") or {}
    new = {}
    if {"model.optimizer", "model.lr", "model.momentum"} & set(settings):
        current = model.get("optimizer") if isinstance(model.get("optimizer"), dict) else {}
        kind = settings.get("model.optimizer")
        if kind is None and current:  # the config's class, which the old flags only tuned
            args = {"lr": settings.get("model.lr"), "momentum": settings.get("model.momentum")}
            return {**{f"model.optimizer.init_args.{k}": v for k, v in args.items() if v is not None},
                    **_schedule(model, settings)}
        args = current.get("init_args") or {}
        lr = settings.get("model.lr", _text(args.get("lr", 1e-3)))
        if (kind or "adam") == "sgd":
            new = {"model.optimizer.class_path": "torch.optim.SGD", "model.optimizer.init_args.lr": lr,
                   "model.optimizer.init_args.momentum": settings.get("model.momentum", "0.9")}
        else:  # lit_otclust.system.adam at another lr: the same fused Adam
            new = {"model.optimizer.class_path": "torch.optim.Adam", "model.optimizer.init_args.lr": lr,
                   "model.optimizer.init_args.fused": "true"}
    return new | _schedule(model, settings)


def _schedule(model: dict, settings: dict[str, str]) -> dict[str, str]:
    if not {"model.lr_decay_epochs", "model.lr_decay_gamma"} & set(settings):
        return {}
    current = model.get("lr_scheduler") if isinstance(model.get("lr_scheduler"), dict) else {}
    args = current.get("init_args") or {}
    return {"model.lr_scheduler.class_path": "torch.optim.lr_scheduler.StepLR",
            "model.lr_scheduler.init_args.step_size": settings.get("model.lr_decay_epochs",
                                                                   _text(args.get("step_size", 50))),
            "model.lr_scheduler.init_args.gamma": settings.get("model.lr_decay_gamma", _text(args.get("gamma", 0.5)))}


def _text(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _config_loss(config: str) -> str | None:
    """The loss class a config file names (None: AE + k-means)."""
    loss = ((yaml.safe_load(Path(config).read_text()) or {}).get("model") or {}).get("loss")
    return loss.get("class_path") if isinstance(loss, dict) else None
