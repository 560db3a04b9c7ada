"""Run a function in several processes joined by a process group (for tests): gloo on CPU, NCCL on GPUs."""

from __future__ import annotations

import pickle
import queue
import socket
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    # The OS picks a free port; another process could take it before the group binds it,
    # which is rare enough for tests.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, results: Any, fn: Callable[..., Any], args: tuple,
            backend: str) -> None:
    try:
        if backend == "nccl":  # one GPU a rank, as DDP places them
            import torch

            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=60),
        )
        try:
            # Plain pickle copies tensors by value; torch's queue would share them by file
            # descriptor, which breaks when this process exits before the parent reads them.
            results.put((rank, True, pickle.dumps(fn(rank, world_size, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException:  # the parent re-raises it with the child's traceback
        results.put((rank, False, traceback.format_exc()))


def run_in_processes(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0,
                     backend: str = "gloo") -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes sharing a ``backend`` group
    (``"nccl"``: rank r on GPU r, which must exist).

    ``fn`` must be importable (defined at module level) and return something picklable;
    plain Python values are safest. Returns the results ordered by rank, or raises
    ``RuntimeError`` with the child's traceback if any process failed or timed out.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    processes = [
        ctx.Process(target=_worker, args=(rank, world_size, port, results, fn, args, backend))
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    outputs: dict[int, Any] = {}
    try:
        for _ in range(world_size):
            try:
                rank, ok, value = results.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"no result from a process within {timeout} s") from None
            if not ok:
                raise RuntimeError(f"process {rank} failed:\n{value}")
            outputs[rank] = pickle.loads(value)
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
    return [outputs[rank] for rank in range(world_size)]
