"""W&B's offline run file (``offline-run-*/run-*.wandb``) read back, for tests that check what a run wrote: the
package's reader (:func:`lit_otclust.wandb_run.read_run_file`), which a resumed run uses to learn what W&B holds, and
a wait for the service to finish writing."""

from __future__ import annotations

import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2

from lit_otclust.wandb_run import history_rows, read_run_file

def read_records(path: str | Path) -> list[wandb_internal_pb2.Record]:
    """Every record of a run file; a file that is not one is an error (the package's reader returns [] for a file
    its service never wrote)."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B" and data:
        raise ValueError(f"{path} is not a W&B run file (header {data[:7]!r})")
    return read_run_file(path)


def wait_for_exit(path: str | Path, timeout: float = 300.0) -> list[wandb_internal_pb2.Record]:
    """The records of a run file once it holds the run's ``exit`` record. W&B's service writes the file in its own
    process, which can still be flushing after the fit's process ended (seen on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path) if Path(path).is_file() else []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(1.0)


history = history_rows
