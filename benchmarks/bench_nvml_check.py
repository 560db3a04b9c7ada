"""What Lightning's ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` costs an Adam step on a machine without a GPU.

    python -m benchmarks.bench_nvml_check [--repeats 5]

``torch.optim.Adam`` asks ``torch.cuda.is_available()`` on every step (its CUDA-graph capture check); with
the setting, torch loads NVML for each answer until CUDA is initialised, which on a machine without a GPU
is never. Prints the best-of-``repeats`` time of a fused Adam step on 10 floats (the step's fixed cost)
and of the check itself, alternately with and without the setting, in one process at 1 thread.
``lit_otclust.cli.skip_nvml_check_without_gpus`` drops the setting where NVML counts no GPU.
"""

from __future__ import annotations

import argparse
import os
import timeit

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, GPUs counted by NVML: {torch.cuda.device_count()}")
    weight = torch.nn.Parameter(torch.zeros(10))
    weight.grad = torch.ones(10)
    opt = torch.optim.Adam([weight], fused=True)
    for setting in ("1", None, "1", None):
        if setting is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = setting
        step = min(timeit.repeat(opt.step, number=300, repeat=args.repeats)) / 300
        check = min(timeit.repeat(lambda: torch.accelerator.current_accelerator(check_available=True),
                                  number=300, repeat=args.repeats)) / 300
        print(f"PYTORCH_NVML_BASED_CUDA_CHECK={setting or 'unset':5s}: Adam step {step * 1e6:6.1f} us, "
              f"the availability check {check * 1e6:5.1f} us")


if __name__ == "__main__":
    main()
