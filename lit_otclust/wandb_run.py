"""The loggers of a fit (:func:`default_loggers`: CSV and W&B; :class:`RunConfig`: the W&B run's config, tags and
axes), and W&B logging that survives pre-emption: one W&B run per training run, whatever stops and resumes it.

SLURM pre-empts a job by sending SIGTERM to every process of the job, W&B's service included, which exits on it. The
fit holds SIGTERM until a batch boundary (:class:`lit_otclust.checkpointing.SignalCheckpoint`), but the logging in
between then meets a closed socket; the service cannot be shielded, so the logging is what must not fail:

- :class:`ResumableWandbLogger` catches the errors of a gone service, warns once, and logs nothing more to W&B in
  this process; the CSV log and the checkpoints go on, and the run stops, saves and exits 143 as it would.
- It keeps the W&B run's id in ``<root>/wandb/resume.json``: a resumed fit continues the same W&B run, and its first
  log sends W&B the earlier attempts' CSV rows that W&B does not hold. What W&B holds is read, not assumed (a killed
  service loses what it had not written): offline, from the earlier run files (:func:`read_run_file`); online, from
  the resumed run's summary (its last ``trainer/global_step``).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import secrets
import string
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lightning as L
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from lit_otclust.runfiles import csv_logs
from lit_otclust.startup import resolve_wandb_mode

if TYPE_CHECKING:
    from lit_otclust.losses import ClusteringLoss

STATE = "resume.json"
_AXES = {"epoch", "step", "trainer/global_step", "_step", "_runtime", "_timestamp"}  # not a row's own metrics


def _new_id() -> str:
    """A W&B run id as W&B makes them: 8 characters of [a-z0-9]."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _service_gone(error: BaseException) -> bool:
    """Whether ``error`` says W&B's service is unreachable (its process died): a socket error, or W&B's own."""
    import wandb

    return isinstance(error, (OSError, wandb.Error))


def close_after_stop(exit_code: int) -> None:
    """Finish this process's W&B run as a stopped fit exits (``exit_code``), so that a caller that goes on (a
    notebook, a test) can start another. Where the SIGTERM also ended W&B's service, W&B is torn down quietly."""
    if "wandb" not in sys.modules:
        return
    import wandb

    if wandb.run is None:
        return
    try:
        wandb.run.finish(exit_code=exit_code)
    except Exception as error:  # noqa: BLE001 - re-raised unless it says the service is gone
        if not _service_gone(error):
            raise
        with contextlib.suppress(Exception):  # frees the exit hook, which would fail the same way
            wandb.teardown()
        print("lit_otclust: W&B's service had stopped (the same SIGTERM reached it); the resumed run continues its "
              "W&B run and sends it the rows it lacks", file=sys.stderr)


def read_run_file(path: str | Path) -> list[Any]:
    """The records (``wandb_internal_pb2.Record``) of an offline W&B run file, ``offline-run-*/run-*.wandb``.

    wandb ships no reader of it. It is LevelDB's log format: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
    then 32 KiB blocks of chunks, each a 7-byte header (CRC-32 4 bytes, length 2, type 1: full, first, middle,
    last) and its bytes; a block's tail shorter than a header is padding. A record is its chunks' bytes joined. A
    file cut short (its service killed) gives the records written before the cut."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if len(data) < 7 or struct.unpack("<4sHB", data[:7]) != (b":W&B", 0xBEE1, 0):
        return []  # empty: the service died before writing its header
    block, header = 32 * 1024, 7
    records, parts, pos = [], [], 7
    while pos + header <= len(data):
        if block - pos % block < header:  # padding to the next block
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + header])
        chunk = data[pos + header:pos + header + length]
        if kind == 0 or len(chunk) < length:  # zeros past the end of what was written, or a chunk cut short
            break
        pos += header + length
        parts = [chunk] if kind in (1, 2) else parts + [chunk]
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def history_rows(records: list[Any]) -> list[dict[str, Any]]:
    """The logged rows of a run file's records: one dict per ``log`` call, key -> value (JSON-decoded)."""
    return [{"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
            for record in records if record.WhichOneof("record_type") == "history"]


def _row_key(step: Any, row: Mapping[str, Any]) -> tuple[int, frozenset[str]]:
    """A logged row's identity across the CSV log and W&B: its step and the names of its metrics."""
    return int(float(step)), frozenset(k for k in row if k not in _AXES)


class ResumableWandbLogger(WandbLogger):
    """Lightning's :class:`~lightning.pytorch.loggers.WandbLogger` that a dead W&B service cannot crash, and that
    continues one W&B run across resumes (the module docstring).

    Args:
        root: the run's folder; its ``wandb/`` holds W&B's files and ``resume.json``.
        csv_logger: the run's CSV logger, whose earlier attempts' logs a resumed attempt sends W&B where W&B lost them.
        resume: this fit resumes from a checkpoint: continue the W&B run that ``resume.json`` names, if any.
        kwargs: :class:`~lightning.pytorch.loggers.WandbLogger`'s arguments (``id`` and ``resume`` are set here).
    """

    def __init__(self, root: Path, csv_logger: CSVLogger, resume: bool, **kwargs: Any) -> None:
        self._state_path = Path(root) / "wandb" / STATE
        state = json.loads(self._state_path.read_text()) if resume and self._state_path.is_file() else {}
        self._run_id, self._resumed = state.get("id") or _new_id(), bool(state)
        super().__init__(id=self._run_id, resume="allow" if self._resumed else None, **kwargs)
        self._csv_logger = csv_logger
        self._gone = False
        # A resumed fit sends W&B its earlier attempts' rows, also where it starts a new W&B run (none recorded, or a
        # shared pre-training's rows: lit_otclust.pretrain_cache).
        self._replayed = not resume

    @property
    def service_gone(self) -> bool:
        """W&B's service stopped answering in this process: nothing more goes to W&B until a resumed attempt."""
        return self._gone

    def give_up(self, error: BaseException) -> None:
        """Re-raise ``error`` unless it says W&B's service is gone; if it does, warn once and log nothing more."""
        if not _service_gone(error):
            raise error
        if not self._gone:
            import wandb

            with contextlib.suppress(Exception):  # frees W&B's exit hook, which would print the same error again
                wandb.teardown()
            rank_zero_warn(f"W&B's service is gone ({type(error).__name__}: {error}): W&B logging stops for this "
                           "attempt; the CSV log and checkpoints go on, and a resumed run (--ckpt_path last) "
                           f"continues W&B run {self._run_id} and sends it the rows it lacks")
        self._gone = True

    def _held(self) -> tuple[set[tuple[int, frozenset[str]]], int]:
        """What W&B holds of the earlier attempts: offline, the rows of their run files, by :func:`_row_key`; online,
        every row up to the resumed run's last ``trainer/global_step`` (the second value; -1: none)."""
        run = self.experiment
        if run.offline:
            rows = [row for path in Path(run.dir).parents[1].glob(f"offline-run-*-{self._run_id}/run-*.wandb")
                    if path.parent != Path(run.dir).parent for row in history_rows(read_run_file(path))]
            return {_row_key(row["trainer/global_step"], row) for row in rows if "trainer/global_step" in row}, -1
        return set(), int(run.summary.get("trainer/global_step", -1))

    def _replay(self, step: int | None) -> None:
        """Send W&B the rows of the earlier attempts' CSV logs that it does not hold, those before ``step`` (rows at or
        after it, written past the checkpoint this attempt resumed from, this attempt logs again)."""
        held, held_up_to = self._held()
        current = Path(self._csv_logger.log_dir)
        for path in csv_logs(self._csv_logger.root_dir):
            if path.parent == current:
                continue
            with open(path, newline="") as fh:
                for row in csv.DictReader(fh):
                    metrics = {k: float(v) for k, v in row.items() if v != "" and k != "step"}
                    if not row.get("step") or (step is not None and int(float(row["step"])) >= step):
                        continue
                    if int(float(row["step"])) <= held_up_to or _row_key(row["step"], metrics) in held:
                        continue
                    super().log_metrics(metrics, step=int(float(row["step"])))

    def _save_state(self) -> None:
        self._state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": self._run_id}) + "\n")
        tmp.replace(self._state_path)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not self._replayed and self._guarded(self._replay, step):
            self._replayed = True
        self._guarded(super().log_metrics, metrics, step)

    def _guarded(self, call: Any, *args: Any) -> bool:
        """``call(*args)`` unless the service is gone; its errors go to :meth:`give_up`. Returns whether it ran."""
        if self._gone:
            return False
        try:
            call(*args)
        except Exception as error:  # noqa: BLE001 - re-raised unless it says the service is gone
            self.give_up(error)
            return False
        return True

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        if not self._gone:
            self._save_state()  # the run's id, before anything can stop it: a resume continues this W&B run
        self._guarded(super().log_hyperparams, params)

    @rank_zero_only
    def log_media(self, record: dict[str, Any]) -> None:
        """Log pictures and histograms (``record``, with its ``epoch`` and ``trainer/global_step``): not rows of the
        CSV log, so a resumed attempt does not send them again."""
        self._guarded(lambda: self.experiment.log(record))

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self._guarded(super().after_save_checkpoint, checkpoint_callback)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self._guarded(super().finalize, status)


def default_loggers(root: Path, name: str, log_model: bool | Literal["all"] = False, group: str | None = None,
                    job_type: str | None = None, tags: list[str] | None = None, resume: bool = False) -> list:
    """CSV and W&B under ``root``; ``group``, ``job_type`` and ``tags`` place the W&B run among others. ``resume``:
    the fit continues the W&B run of the attempts before. Without the wandb package, CSV alone, with a warning."""
    csv_logger = CSVLogger(save_dir=str(root), name="csv")
    if importlib.util.find_spec("wandb") is None:
        rank_zero_warn("the wandb package is not installed: this fit logs to CSV alone, under "
                       f"{root / 'csv'} (pip install wandb for the W&B run)")
        return [csv_logger]
    offline = resolve_wandb_mode() in ("offline", "dryrun")
    if offline and log_model:
        # WandbLogger refuses the combination (an offline run cannot upload artifacts): keep the run going.
        rank_zero_warn(f"wandb.log_model={log_model!r} is ignored: W&B runs offline (no credentials, or WANDB_MODE="
                       "offline), where checkpoints cannot be logged as artifacts; they stay in checkpoints/")
        log_model = False
    wandb_dir = root / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    # Not offline=True: W&B reads WANDB_MODE=offline itself, and WandbLogger's offline=True would rewrite it after
    # the service (started early, startup.py) read it, which wandb.init warns about.
    wandb_logger = ResumableWandbLogger(root, csv_logger, resume, project=os.environ.get("WANDB_PROJECT", "lit_otclust"),
                                        name=name, save_dir=str(root), log_model=log_model, group=group,
                                        job_type=job_type, tags=tags or None)
    # WandbLogger always hands wandb.init `anonymous=None`, which W&B (>= 0.19) answers on every run with "The
    # anonymous setting has no effect"; the key does nothing else, so it is dropped.
    getattr(wandb_logger, "_wandb_init", {}).pop("anonymous", None)
    return [csv_logger, wandb_logger]


def run_tags(config: dict, loss: ClusteringLoss | None) -> list[str]:
    """The method (the loss's ``tag``, ``_p`` when pre-trained; ``ae_kmeans`` without a loss) and the data module."""
    method = "ae_kmeans" if loss is None else loss.tag
    if (config.get("phases") or {}).get("pretrain_epochs", 0) > 0:
        method += "_p"
    data = config.get("data") or {}
    data_class = data.get("class_path", "") if isinstance(data, dict) else ""
    return [method, data_class.rsplit(".", 1)[-1]] if data_class else [method]


class RunConfig(SaveConfigCallback):
    """Saves ``config.yaml`` (as Lightning does) and sets up each W&B run: the resolved config as the run's config,
    its tags (:func:`run_tags`), every metric plotted against ``epoch`` (``trainer/global_step`` still logged), and
    the best and the last ``val/acc`` in the summary. Global rank 0 only, as the loggers."""

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not loggers:
            return
        config = json.loads(self.parser.dump(self.config, format="json", skip_none=False))
        config.pop("config", None)  # the paths of the config files, whose content is the rest
        tags = run_tags(config, getattr(pl_module, "loss", None))
        for logger in loggers:
            try:
                run = logger.experiment
                run.config.update(config, allow_val_change=True)
                run.tags = tuple(dict.fromkeys([*(run.tags or ()), *tags]))
                # Lightning adds `epoch` to every metric it logs; step_sync fills it in for the others.
                run.define_metric("epoch")
                run.define_metric("*", step_metric="epoch", step_sync=True)
                run.define_metric("val/acc", step_metric="epoch", summary="max,last")
            except Exception as error:  # noqa: BLE001 - a pre-emption can end W&B's service at any moment
                if not isinstance(logger, ResumableWandbLogger):
                    raise
                logger.give_up(error)
