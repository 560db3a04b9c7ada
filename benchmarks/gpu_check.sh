#!/usr/bin/env bash
# Issue #10's GPU checks in one command, where a CUDA GPU is:
#
#     bash benchmarks/gpu_check.sh [DATA_DIR] [EPOCHS] 2>&1 | tee benchmarks/results/gpu_check.txt
#
# 1. tests/test_cuda.py: the Sinkhorn and its gradient on the GPU against the CPU, the distributed Sinkhorn under
#    NCCL (one rank a GPU, up to two), a fit with the data on the device that draws its pictures and predicts;
# 2. where a step's time goes (benchmarks/bench_gpu_step.py: launches and host syncs a step, profiler top operators),
#    what a sync-free step replayed as one CUDA graph costs (benchmarks/bench_gpu_graph.py), and whether
#    torch.compile of the Sinkhorn block cuts its launches (benchmarks/bench_sinkhorn_compile.py);
# 3. the time of `fit --config configs/mnist_ot.yaml` on one GPU, data on the device, EPOCHS epochs (default 10),
#    with the solved step and with `--model.cuda_graph true` (the joint step replayed as a CUDA graph):
#    per step, evaluation per epoch, and the 200-epoch estimate (issue #10's goal: under 2 minutes), and Lightning's
#    own cost a step on this host (benchmarks/bench_lightning_floor.py);
# 4. with two GPUs or more, the same fit under DDP on two of them.
# DATA_DIR (default ../shared/data) holds MNIST in torchvision's layout.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
EPOCHS=${2:-10}
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_SILENT=true PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
# A failing test does not skip the timings below (a device lease is short); the script exits non-zero at the end.
tests_rc=0
LIT_OTCLUST_DATA=$DATA python -m pytest -q -rs tests/test_cuda.py || tests_rc=$?
python -m benchmarks.bench_gpu_step --data-dir "$DATA" --steps 100 || echo "bench_gpu_step failed (rc $?)"
python -m benchmarks.bench_gpu_graph --data-dir "$DATA" || echo "bench_gpu_graph failed (rc $?)"
# The batched trials (5 dampings x 5 step lengths a trial; benchmarks/bench_sync_free_solve.py on the CPU): 12 of them
# left every column within 3e-14 over the first epoch (12 damped trials: 4e-2), within 1.5e-2 late in training;
# 16 split over an epsilon continuation (16, 4, 1): 1.6e-13 and 7.7e-11. On the H200 (gpu_check_2026-11-26b_h200.txt)
# the 16 took 6.27 ms a step replayed, with one Cholesky call a damping (now one batched call).
# --adam-outside: Adam's step eager after each replay, the form a graphed step keeps inside Lightning's loop.
for args in "--trials 16 --continuation 16 4 1" "--trials 16 --continuation 16 4 1 --adam-outside" "--trials 12"; do
    python -m benchmarks.bench_gpu_graph --data-dir "$DATA" --solver batched $args --epochs 3 \
        || echo "bench_gpu_graph --solver batched $args failed (rc $?)"
done
python -m benchmarks.bench_sinkhorn_compile --device cuda || echo "bench_sinkhorn_compile failed (rc $?)"
fit() {  # fit NAME EXTRA_ARGS...: time one fit on the GPU, data on the device (benchmarks/bench_fit.py --fit-only)
    echo "$1:"; shift
    python -m benchmarks.bench_fit --fit-only --pairs 1 --epochs "$EPOCHS" --data-dir "$DATA" \
        --trainer.enable_progress_bar false --data.init_args.on_device true --trainer.accelerator gpu "$@"
}
fit one_gpu --trainer.devices 1
fit one_gpu_cuda_graph --trainer.devices 1 --model.cuda_graph true
# Lightning's own cost a step on this host (a no-op model): the part of the 200-epoch estimate a graphed step keeps.
python -m benchmarks.bench_lightning_floor --epochs 2 --rounds 3 || echo "bench_lightning_floor failed (rc $?)"
if [ "$(python -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    fit ddp_two_gpus --trainer.devices 2 --trainer.strategy ddp
else
    echo "ddp_two_gpus: not run (one GPU; tests/test_cuda.py ran the distributed Sinkhorn under NCCL on it)"
fi
if [ "$tests_rc" -ne 0 ]; then echo "tests/test_cuda.py failed (rc $tests_rc)"; exit "$tests_rc"; fi
