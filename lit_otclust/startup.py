"""What the entry module (:mod:`lit_otclust.__main__`) does before it imports torch and Lightning; so nothing here
may import either."""

from __future__ import annotations

import netrc
import os
import threading


def uses_default_logger(argv: list[str], default_only: bool = False) -> bool:
    """Whether this command will start W&B: not for ``--help`` or ``--print_config``, nor when the last
    ``--trainer.logger`` or ``--config`` file that sets ``trainer.logger`` sets it false or to loggers none of which
    is W&B's (the CLI's default, ``true``, ``null`` or unset, logs to W&B). With ``default_only``, only the CLI's
    default counts, not a W&B logger the command configures itself. A guess read from argv and the config files
    alone (the CLI's parser is not imported yet); a wrong guess costs time only."""
    import yaml  # PyYAML, a dependency of jsonargparse: ~10 ms, no torch

    wanted = True
    for i, arg in enumerate(argv):
        if arg in ("-h", "--help") or arg.startswith("--print_config"):
            return False
        key, _, value = arg.partition("=")
        if not value and i + 1 < len(argv):
            value = argv[i + 1]
        if key == "--trainer.logger":
            default = value.strip().lower() in ("true", "null", "none")
            wanted = default or (not default_only and "wandb" in value.lower())
        elif key.startswith("--trainer.logger.") and default_only:  # a logger's own settings: not the default
            wanted = False
        elif key in ("-c", "--config"):
            try:
                with open(value) as f:
                    trainer = (yaml.safe_load(f) or {}).get("trainer") or {}
            except (OSError, yaml.YAMLError, AttributeError):
                continue  # the CLI reports a bad config file itself
            if isinstance(trainer, dict) and "logger" in trainer:
                default = trainer["logger"] in (True, None)
                wanted = default or (not default_only and "wandb" in str(trainer["logger"]).lower())
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


def wandb_credentials_found() -> bool:
    """True if W&B can authenticate without asking: an API key in the environment or ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "api.wandb.ai").split("//")[-1]
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode() -> str | None:
    """Set ``WANDB_MODE`` as this run's W&B will use it, and return it: an empty value (``WANDB_MODE= lit-otclust
    fit ...``, which W&B rejects with a validation traceback) reads as unset, and unset without credentials is
    ``offline`` (online W&B would prompt for a key, or hang without network). Idempotent."""
    if os.environ.get("WANDB_MODE") == "":
        del os.environ["WANDB_MODE"]
    if "WANDB_MODE" not in os.environ and not wandb_credentials_found():
        os.environ["WANDB_MODE"] = "offline"
    return os.environ.get("WANDB_MODE")


def start_wandb_service_early(argv: list[str]) -> threading.Thread | None:
    """Start W&B's service process (``wandb.setup()``) in a thread, if this command logs to W&B through the CLI's
    default logger, so that it boots on another core while torch and Lightning import, instead of inside the run's
    ``wandb.init``.

    ``wandb.init`` takes the same lock the thread holds while the service starts, so it waits for it if it comes
    first. W&B reads its environment variables here, once: the mode is settled first (:func:`resolve_wandb_mode`), and
    anything that changes a ``WANDB_*`` variable later makes ``wandb.init`` warn that the change is ignored. Only
    the process of global rank 0 starts one, where the launcher says (``LOCAL_RANK``, ``RANK``, ``SLURM_PROCID``):
    the W&B run is rank 0's, and the processes Lightning launches beside it inherit the service's address through
    the environment ``wandb.setup`` sets. A failure here is left for ``wandb.init`` to report. Returns the thread,
    or None."""
    if any(os.environ.get(rank, "0") != "0" for rank in ("LOCAL_RANK", "RANK", "SLURM_PROCID")):
        return None
    # Only for the CLI's default logger, whose WandbLogger is built to leave W&B's variables as they are here; a W&B
    # logger configured by the command may change them (WandbLogger's offline=True sets WANDB_MODE=dryrun), which
    # a service started before would ignore: with credentials, such a run went online instead of offline.
    if not uses_default_logger(argv, default_only=True):
        return None
    if resolve_wandb_mode() == "disabled":
        return None

    def start() -> None:
        try:
            import wandb

            wandb.setup()
        except Exception:  # noqa: BLE001 - wandb.init starts it again and says what is wrong
            pass

    thread = threading.Thread(target=start, name="wandb-service-start", daemon=True)
    thread.start()
    return thread
