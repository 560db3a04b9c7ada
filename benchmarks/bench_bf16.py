"""``fit`` in float32 against ``--trainer.precision bf16-mixed``: the time of a step and of an evaluation.

    python -m benchmarks.bench_bf16 --data-dir ../shared/data [--dataset mnist] [--epochs 2] [--pairs 3] [OVERRIDES]

bfloat16 mixed precision runs the autoencoder's matrix products and convolutions in bfloat16 (the OT loss, the
evaluation's assignments and the pictures stay in float32: ``lit_otclust.sinkhorn._full_precision``). CPUs with AMX or
AVX512-BF16 (Intel Sapphire Rapids and later) and GPUs with tensor cores run those several times faster. This runs
``python -m lit_otclust fit --config configs/<dataset>_ot.yaml`` as a user runs it (loggers, checkpoints, pictures),
once in each precision per pair, alternating which goes first, and prints per run and as medians: ms a training step
and s an evaluation (``bench_fit.StepTimer``), the wall time, and the last epoch's ``val/acc`` (whether bfloat16
changes where a long run ends is ``results/run_bf16_cpu.sh``'s question, not this one's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_fit import timed
from lit_otclust.experiments import read_curves

PRECISIONS = ("32-true", "bf16-mixed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["mnist", "cifar10"], default="mnist")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    args, overrides = parser.parse_known_args()  # the rest: overrides for both fits
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}
    rows: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for precision in PRECISIONS if pair % 2 == 0 else PRECISIONS[::-1]:
                root, timer = Path(tmp) / f"{precision}{pair}", Path(tmp) / f"timer_{precision}{pair}.json"
                wall, _, _ = timed([sys.executable, "-m", "lit_otclust", "fit", "--config",
                                    f"configs/{args.dataset}_ot.yaml", "--trainer.max_epochs", str(args.epochs),
                                    "--data.data_dir", str(Path(args.data_dir).resolve()),
                                    "--trainer.default_root_dir", str(root), "--trainer.precision", precision,
                                    "--trainer.enable_progress_bar", "false",
                                    "--trainer.callbacks+=benchmarks.bench_fit.StepTimer",
                                    f"--trainer.callbacks.init_args.path={timer}", *overrides], env)
                info = json.loads(timer.read_text())
                curves = read_curves(sorted(root.glob("csv/version_*/metrics.csv"))[-1])
                row = {"wall": wall, "step": info["ms_per_step"], "eval": info["eval_s"] / args.epochs,
                       "acc": curves[max(curves)].get("val/acc", float("nan"))}
                rows[precision].append(row)
                print(f"pair {pair} {precision:10s}: wall {wall:6.1f} s  {row['step']:6.1f} ms/step  "
                      f"eval {row['eval']:5.2f} s/epoch  val/acc {row['acc']:.3f}", flush=True)
    print(f"\n{args.dataset}, {args.epochs} epochs, medians of {args.pairs} (run alternately):")
    med = {p: {k: statistics.median(r[k] for r in rs) for k in ("wall", "step", "eval")} for p, rs in rows.items()}
    for p, m in med.items():
        print(f"  {p:10s}: wall {m['wall']:6.1f} s  {m['step']:6.1f} ms/step  eval {m['eval']:5.2f} s/epoch")
    full, half = med["32-true"], med["bf16-mixed"]
    print(f"  float32 / bf16-mixed: step {full['step'] / half['step']:.2f}x, evaluation "
          f"{full['eval'] / half['eval']:.2f}x, wall {full['wall'] / half['wall']:.2f}x")


if __name__ == "__main__":
    main()
