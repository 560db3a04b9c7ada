"""Where the whole-process time of ``fit`` goes, phase by phase, against the bare loop's: the fixed costs behind
``bench_fit``'s "rest" column.

    python -m benchmarks.bench_timeline --data-dir ../shared/data [--dataset mnist] [--epochs 3] [--pairs 3]

Runs ``python -m lit_otclust fit --config configs/<dataset>_ot.yaml`` (with :class:`Stamps` added) and
``python -m benchmarks.bare_loop`` alternately, as ``bench_fit`` does, each stamping seconds since the parent
spawned it (``BENCH_T0``) at its phase boundaries; the last phase ends at the parent's clock. Prints the median
of each phase over the pairs, and the fit's excess over the bare loop's. The phases:

- start-up: the interpreter, the imports, the command line (fit: until the CLI builds its callbacks);
- set-up: fit: the Trainer and model, the loggers (``wandb.init``), ``prepare_data`` and the data module's set-up;
  bare: reading the data;
- k-means: the centers' initialisation (fit: with the sanity check, if any, up to the first training batch);
- training steps, evaluation: as ``bench_fit`` times them;
- between epochs: fit: checkpoints, epoch-end logging and hooks; bare: the accuracy bookkeeping;
- final pictures: fit's ``ClusterFigures`` at the end of fit (the bare loop draws none);
- shut-down: fit: teardown, W&B's finish and the interpreter's exit; bare: the exit.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L

from benchmarks.bench_fit import alternate, child_env, commands, pair_parser, timed

PHASES = ("start-up", "set-up", "k-means", "training steps", "evaluation", "between epochs", "final pictures",
          "shut-down")


class Stamps(L.Callback):
    """Seconds since ``BENCH_T0`` at a fit's phase boundaries, written as JSON to ``path`` at teardown."""

    def __init__(self, path: str) -> None:
        self.t0 = float(os.environ["BENCH_T0"])
        self.path = path
        self.marks: dict[str, float] = {"cli": self._now()}
        self.first_batches: list[float] = []
        self.evals: list[tuple[float, float]] = []

    def _now(self) -> float:
        return time.time() - self.t0

    def setup(self, trainer, pl_module, stage) -> None:
        self.marks["setup"] = self._now()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.first_batches.append(self._now())

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._eval_start = self._now()

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.evals.append((self._eval_start, self._now()))

    def on_fit_end(self, trainer, pl_module) -> None:
        # The CLI appends ClusterFigures after the callbacks given on the command line, so this runs before it draws.
        self.marks["fit_end"] = self._now()

    def teardown(self, trainer, pl_module, stage) -> None:
        self.marks["teardown"] = self._now()
        Path(self.path).write_text(json.dumps({"marks": self.marks, "first_batches": self.first_batches,
                                               "evals": self.evals}))


def fit_phases(s: dict, wall: float) -> dict[str, float]:
    m, firsts, evals = s["marks"], s["first_batches"], s["evals"]
    train = sum(e[0] - b for b, e in zip(firsts, evals))
    evaluation = sum(end - start for start, end in evals)
    return {"start-up": m["cli"], "set-up": m["setup"] - m["cli"], "k-means": firsts[0] - m["setup"],
            "training steps": train, "evaluation": evaluation,
            "between epochs": m["fit_end"] - firsts[0] - train - evaluation,
            "final pictures": m["teardown"] - m["fit_end"], "shut-down": wall - m["teardown"]}


def bare_phases(info: dict, wall: float) -> dict[str, float]:
    st = info["stamps"]
    return {"start-up": st["imports"], "set-up": st["data"] - st["imports"], "k-means": st["kmeans"] - st["data"],
            "training steps": info["train_s"], "evaluation": info["eval_s"],
            "between epochs": st["end"] - st["kmeans"] - info["train_s"] - info["eval_s"],
            "final pictures": 0.0, "shut-down": wall - st["end"]}


def main() -> None:
    args, fit_args = pair_parser(__doc__).parse_known_args()  # any other argument is an override for the fit
    env = child_env()
    data_dir = str(Path(args.data_dir).resolve())
    rows: dict[str, list[dict[str, float]]] = {"fit": [], "bare": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            stamps = Path(tmp) / f"stamps{pair}.json"
            fit, bare = commands(args.dataset, args.epochs, data_dir, f"{tmp}/run{pair}",
                                 "benchmarks.bench_timeline.Stamps", stamps, fit_args)
            for name, cmd in alternate(pair, fit, bare):
                env["BENCH_T0"] = repr(time.time())
                wall, _, out = timed(cmd, env)
                phases = (fit_phases(json.loads(stamps.read_text()), wall) if name == "fit"
                          else bare_phases(json.loads(out.strip().splitlines()[-1]), wall))
                rows[name].append({**phases, "wall": wall})
                print(f"pair {pair} {name:4s}: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
                      + f"; wall {wall:.1f} s", flush=True)
    print(f"\n{args.dataset}, {args.epochs} epochs, seconds, median of {args.pairs} (run alternately):")
    print(f"  {'phase':16s} |    fit |   bare | fit - bare")
    for phase in (*PHASES, "wall"):
        f, b = (statistics.median(r[phase] for r in rows[name]) for name in ("fit", "bare"))
        print(f"  {phase:16s} | {f:6.2f} | {b:6.2f} | {f - b:+6.2f}")


if __name__ == "__main__":
    main()
