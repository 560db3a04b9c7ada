#!/usr/bin/env bash
# Issue #10's GPU checks in one command, where a CUDA GPU is:
#
#     bash benchmarks/gpu_check.sh [DATA_DIR] [EPOCHS] 2>&1 | tee benchmarks/results/gpu_check.txt
#
# 1. tests/test_cuda.py: the Sinkhorn and its gradient on the GPU against the CPU, the distributed Sinkhorn under
#    NCCL (one rank a GPU, up to two), a fit with the data on the device that draws its pictures and predicts;
# 2. where a step's time goes (benchmarks/bench_gpu_step.py: launches and host syncs a step, profiler top operators),
#    and whether torch.compile of the Sinkhorn block cuts its launches (benchmarks/bench_sinkhorn_compile.py);
# 3. the time of `fit --config configs/mnist_ot.yaml` on one GPU, data on the device, EPOCHS epochs (default 10),
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
python -m benchmarks.bench_sinkhorn_compile --device cuda || echo "bench_sinkhorn_compile failed (rc $?)"
fit() {  # fit NAME EXTRA_ARGS...: time one fit on the GPU, data on the device (benchmarks/bench_fit.py --fit-only)
    echo "$1:"; shift
    python -m benchmarks.bench_fit --fit-only --pairs 1 --epochs "$EPOCHS" --data-dir "$DATA" \
        --trainer.enable_progress_bar false --data.init_args.on_device true --trainer.accelerator gpu "$@"
}
fit one_gpu --trainer.devices 1
# Lightning's own cost a step on this host (a no-op model).
python -m benchmarks.bench_lightning_floor --epochs 2 || echo "bench_lightning_floor failed (rc $?)"
if [ "$(python -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    fit ddp_two_gpus --trainer.devices 2 --trainer.strategy ddp
else
    echo "ddp_two_gpus: not run (one GPU; tests/test_cuda.py ran the distributed Sinkhorn under NCCL on it)"
fi
if [ "$tests_rc" -ne 0 ]; then echo "tests/test_cuda.py failed (rc $tests_rc)"; exit "$tests_rc"; fi
