#!/usr/bin/env bash
# Does `--model.cuda_graph true` change where OT training ends? It replaces fit's Sinkhorn solved to a tolerance by
# the sync-free solve (3 iterations + 16 batched Newton trials over epsilon x 16, 4, 1, no stopping rule) so that a
# GPU can replay the step as one CUDA graph; on the CPU the same step runs eagerly. OT from scratch, 40 epochs (the
# recipe study's proxy), seeds 0-2, each seed with and without it, same code, paired by seed:
#   python -m lit_otclust.experiments compare --a results/study_cuda_graph:mnist_ot:cuda_graph=true \
#       --b results/study_cuda_graph:mnist_ot:cuda_graph=false
# Two lanes at one thread each; resumable like the others.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/study_cuda_graph
python -m lit_otclust.experiments run --out $OUT --jobs 2 --threads 1 --seeds ${SEEDS:-0 1 2} --configs mnist_ot \
    --grid model.cuda_graph=false,true --set trainer.max_epochs=40 data.data_dir=$DATA
python -m lit_otclust.experiments table --out $OUT
