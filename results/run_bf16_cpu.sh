#!/usr/bin/env bash
# Does bfloat16 mixed precision change where OT training ends? `--trainer.precision bf16-mixed` runs the autoencoder's
# matrix products in bfloat16 (the OT loss, evaluation and pictures stay in float32: lit_otclust/ot.py's
# _full_precision): on this project's CPUs, which have AMX, fit's MNIST steps are 1.24x and CIFAR-10 steps 1.52x faster
# (benchmarks/bench_bf16.py). Before README recommends it: OT from scratch, 40 epochs (the recipe study's proxy),
# seeds 0-2, each seed in float32 and in bfloat16 with the same code, paired by seed:
#   python -m lit_otclust.experiments compare --a results/study_bf16:mnist_ot:precision=bf16-mixed \
#       --b results/study_bf16:mnist_ot:precision=32-true
# One lane, seed-major (a seed's pair lands together); resumable like the others.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/study_bf16
for seed in ${SEEDS:-0 1 2}; do
    python -m lit_otclust.experiments run --out $OUT --jobs 1 --threads 1 --seeds "$seed" --configs mnist_ot \
        --grid trainer.precision=32-true,bf16-mixed --set trainer.max_epochs=40 data.data_dir=$DATA
done
python -m lit_otclust.experiments table --out $OUT
