"""W&B's offline run file (``offline-run-*/run-*.wandb``) read back, for tests that check what a run wrote: the
package's reader (:func:`lit_otclust.wandb_run.read_run_file`), which a resumed run uses to learn what W&B holds, and
a wait for the service to finish writing."""

from __future__ import annotations

import csv
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


def assert_one_wandb_run_with_the_whole_curve(root: Path) -> None:
    """Every attempt's offline W&B run has the same id (one run once synced), and their histories together hold
    each epoch's val/acc as the CSV logs do, each epoch once."""
    runs = sorted((root / "wandb").glob("offline-run-*"))
    assert len(runs) > 1 and len({run.name.rsplit("-", 1)[1] for run in runs}) == 1, [run.name for run in runs]
    logged: dict[int, list[str]] = {}
    for run in runs:  # the stopped attempts' files as their services left them; the last one's once it is complete
        file = next(run.glob("run-*.wandb"))
        for row in history(wait_for_exit(file, timeout=120) if run == runs[-1] else read_records(file)):
            if "val/acc" in row:
                logged.setdefault(int(row["epoch"]), []).append(f"{row['val/acc']:.6f}")
    expected: dict[int, str] = {}
    for log in (root / "csv").glob("version_*/metrics.csv"):
        for row in csv.DictReader(log.open()):
            if row.get("val/acc"):
                expected[int(row["epoch"])] = f"{float(row['val/acc']):.6f}"
    assert sorted(logged) == sorted(expected), f"epochs missing from W&B: {sorted(set(expected) - set(logged))}"
    assert all(logged[epoch] == [value] for epoch, value in expected.items()), {
        e: (logged[e], v) for e, v in expected.items() if logged[e] != [v]}

