"""Entry point of ``python -m lit_otclust`` and of the ``lit-otclust`` script: SIGTERM held, the process's warning
filters, a word when other work holds the cores, then :func:`lit_otclust.cli.main`."""

import sys

from lit_otclust.startup import hold_sigterm

if sys.argv[1:2] == ["fit"]:
    # First, before any thread exists: SIGTERM waits, pending, until the fit takes it at a batch boundary all DDP
    # ranks agree on (lit_otclust.checkpointing.SignalCheckpoint); a SIGTERM at start-up or during the exit is held.
    hold_sigterm()

import os  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
from lightning_utilities.core import rank_zero  # noqa: E402

from lit_otclust.cli import SIGTERM_EXIT, main  # noqa: E402


def console() -> None:
    """The process's entry point: :func:`main` without its return value, which ``sys.exit(...)`` would print."""
    quiet_third_party_notices()
    # This process owns its W&B service: a token inherited from the process that started it would attach it to
    # that one's, where its run would never finish.
    os.environ.pop("WANDB_SERVICE", None)
    if not {"-h", "--help", "--print_config"} & set(sys.argv[1:]):  # help trains nothing: no word on the cores
        warn_if_cores_are_busy()
    try:
        main()
    except SystemExit as stop:
        if stop.code == SIGTERM_EXIT and os.environ.get("LOCAL_RANK", "0") != "0" and "SLURM_PROCID" not in os.environ:
            # A rank that Lightning's launcher started: its launcher kills every process, rank 0 included, when one
            # exits non-zero; rank 0, still writing its logs, reports the stop for the run.
            raise SystemExit(0) from None
        raise


def cores_oversubscribed(load: float, cores: int, threads: int) -> bool:
    """Whether ``threads`` intra-op threads would share ``cores`` with other runnable work, judged from the
    1-minute ``load`` average, which counts this process too (up to 1 while it imports)."""
    return threads > 1 and max(load - 1.0, 0.0) + threads > cores + 0.5


def warn_if_cores_are_busy() -> None:
    """Warn when other work seems to hold the cores torch's threads will run on, unless the thread settings are the
    user's. torch's OpenMP threads spin-wait for each other at every parallel region; when another process holds a core,
    each wait lasts a scheduler time slice, and a step takes several times as long as at one thread per free core."""
    if not hasattr(os, "getloadavg") or {"OMP_NUM_THREADS", "OMP_WAIT_POLICY"} & set(os.environ):
        return
    if os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("SLURM_PROCID", "0") != "0":  # DDP's other ranks
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load, threads = os.getloadavg()[0], torch.get_num_threads()
    if cores_oversubscribed(load, cores, threads):
        free = max(1, cores - round(max(load - 1.0, 0.0)))
        # One line on stderr, without the warning's source line, which tells a user nothing.
        print(
            f"lit_otclust: warning: the load average is {load:.1f} on the {cores} cores this run may use, and torch will run {threads} "
            f"threads: if other work is still running, they will wait on each other (a step several times slower). "
            f"Set OMP_NUM_THREADS={free} (or OMP_WAIT_POLICY=PASSIVE) in the run's environment; setting either "
            "silences this.", file=sys.stderr)


def quiet_third_party_notices() -> None:
    """Drop lines a user can do nothing about (Lightning's advertisements, a deprecation inside its own code). Only
    at the process's entry point: a library must not change a caller's warning filters or logging."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # Under DDP Lightning recommends sync_dist for every epoch-level value logged without it; these are global
    # already (DeepClustering._log_metrics, _log_sizes, on_train_epoch_end). Only their warnings are dropped.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(train|val|heldout)/(acc|nmi|ari|"
                            r"size_min|size_max|size_entropy|size_error|sinkhorn_unconverged)(_distance|_potential)?', \.\.\., "
                            r"sync_dist=True\)`")
    # rank_zero_info logs through this module attribute, which Lightning's import replaces with its own logger.
    rank_zero.log.addFilter(lambda record: not any(ad in record.getMessage() for ad in ("litlogger", "litmodels")))


if __name__ == "__main__":
    console()
