#!/usr/bin/env bash
# Longer single-seed runs (100 epochs; the default step decay halves lr at epoch 50), to see how
# far the 15-epoch numbers are from convergence. Resumable like the others.
# model.clustering_weight=1: these runs used the paper's lambda = 1, the configs' default when
# they ran (the MNIST configs now default to 1/300, see RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
python -m lit_otclust.experiments run --out results/long --seeds 0 --jobs 2 --threads 1 \
    --configs mnist_ot mnist_ae_kmeans --set trainer.max_epochs=100 model.clustering_weight=1 data.data_dir=$DATA
python -m lit_otclust.experiments table --out results/long
python -m lit_otclust.experiments figures --out results/long
