#!/usr/bin/env bash
# OT with lambda = 1/300, i.e. the reconstruction summed over the batch of 300 while the OT term
# is a mean (one reading of the paper's loss), 60 epochs, seeds 0-2. Compare with results/long.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
python -m lit_otclust.experiments run --out results/long_lambda --seeds 0 1 2 --jobs 2 --threads 1 \
    --configs mnist_ot --grid model.clustering_weight=0.003333 \
    --set trainer.max_epochs=60 data.data_dir=$DATA
python -m lit_otclust.experiments table --out results/long_lambda
python -m lit_otclust.experiments figures --out results/long_lambda
