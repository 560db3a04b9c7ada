"""What the entry module (:mod:`lit_otclust.__main__`) does before it imports torch and Lightning; so nothing here
may import either."""

from __future__ import annotations


def uses_default_logger(argv: list[str]) -> bool:
    """Whether this command will start W&B: not for ``--help`` or ``--print_config``, nor when the last
    ``--trainer.logger`` or ``--config`` file that sets ``trainer.logger`` sets it false or to loggers none of which
    is W&B's (the CLI's default, ``true``, ``null`` or unset, logs to W&B). A guess read from argv and the config
    files alone (the CLI's parser is not imported yet); a wrong guess costs time only."""
    import yaml  # PyYAML, a dependency of jsonargparse: ~10 ms, no torch

    wanted = True
    for i, arg in enumerate(argv):
        if arg in ("-h", "--help") or arg.startswith("--print_config"):
            return False
        key, _, value = arg.partition("=")
        if not value and i + 1 < len(argv):
            value = argv[i + 1]
        if key == "--trainer.logger":
            wanted = value.strip().lower() in ("true", "null", "none") or "wandb" in value.lower()
        elif key in ("-c", "--config"):
            try:
                with open(value) as f:
                    trainer = (yaml.safe_load(f) or {}).get("trainer") or {}
            except (OSError, yaml.YAMLError, AttributeError):
                continue  # the CLI reports a bad config file itself
            if isinstance(trainer, dict) and "logger" in trainer:
                wanted = trainer["logger"] in (True, None) or "wandb" in str(trainer["logger"]).lower()
    return wanted


def import_wandb_launch_early(argv: list[str]) -> None:
    """Import W&B's Launch module now, before torch, if this command will start W&B.

    Every ``wandb.init`` imports it (``Run._detect_and_apply_job_inputs``), and its pydantic models read their
    docstrings from source: one ``inspect.getmodule`` scan of every loaded module per stack frame, so the import costs
    more the more is loaded (~4,500 modules with torch and Lightning, ~700 before them). Inside ``wandb.init`` it took
    1.26 s on 2 cores; the fit's imports plus one ``wandb.init`` took 10.62 s, 9.12 s with this import first
    (``python -m benchmarks.bench_startup``, ``benchmarks/results/bench_startup_wandb_first.txt``). A command without
    W&B does not import W&B."""
    if uses_default_logger(argv):
        try:
            import wandb.sdk.launch.inputs.internal  # noqa: F401
        except ImportError:  # a W&B without Launch: nothing to do early
            pass
