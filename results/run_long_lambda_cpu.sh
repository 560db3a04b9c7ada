#!/usr/bin/env bash
# Table 1 at 60 epochs with lambda = 1/300 (the reconstruction summed over the batch of 300 while
# the OT / soft k-means term is a mean; one reading of the paper's loss), full MNIST, seeds 0-2.
# The (p) variants pre-train 20 of the 60 epochs. Two lanes of one run each (2 cores); rerunning
# skips finished runs and resumes interrupted ones. Compare with results/table1 (15 epochs, lambda 1)
# and results/long (100 epochs, lambda 1, seed 0).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUN="python -m lit_otclust.experiments run --out results/long_lambda --seeds 0 1 2 --jobs 1 --threads 1"
LAMBDA=model.clustering_weight=0.003333
(   $RUN --configs mnist_ot mnist_soft_kmeans --grid $LAMBDA --set trainer.max_epochs=60 data.data_dir=$DATA
    $RUN --configs mnist_soft_kmeans_p --grid $LAMBDA \
        --set trainer.max_epochs=60 phases.pretrain_epochs=20 data.data_dir=$DATA ) &
(   $RUN --configs mnist_ae_kmeans --set trainer.max_epochs=60 data.data_dir=$DATA
    $RUN --configs mnist_ot_p --grid $LAMBDA \
        --set trainer.max_epochs=60 phases.pretrain_epochs=20 data.data_dir=$DATA ) &
wait
python -m lit_otclust.experiments table --out results/long_lambda
python -m lit_otclust.experiments figures --out results/long_lambda
