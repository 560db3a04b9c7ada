"""Which operators of ``bench_gpu_graph.batched_solve`` a CUDA graph capture refuses: each captured alone, float64,
K = 10, after a warm-up on a side stream (as ``bench_gpu_graph`` captures its step).

    python benchmarks/probe_graph_capture.py        (needs a CUDA GPU)

On the H200 of 2026-11-26 (``benchmarks/results/gpu_check_2026-11-26b_h200.txt``) only the element fills
(``out[i] = 0.5`` on a CUDA tensor: a copy from a host scalar) were refused; batched Cholesky and its solve captured.
"""
import torch
torch.backends.cuda.preferred_linalg_library("cusolver")
dev, K, D = "cuda", 10, 5
a = torch.randn(D, K, K, dtype=torch.float64, device=dev)
spd = a @ a.transpose(1, 2) + torch.eye(K, dtype=torch.float64, device=dev)
rhs = torch.randn(D, K, 1, dtype=torch.float64, device=dev)
chol0 = torch.linalg.cholesky(spd)
v = torch.randn(25, dtype=torch.float64, device=dev)
def fills():
    out = torch.empty(3, dtype=torch.float64, device=dev)
    for i, x in enumerate((1.0, 0.5, 0.25)):
        out[i] = x
    return out
probes = {  # the suspects last: a refused capture may leave the stream unusable for the next
    "cholesky_ex single (10,10)": lambda: torch.linalg.cholesky_ex(spd[0]),
    "cholesky_solve single": lambda: torch.cholesky_solve(rhs[0], chol0[0]),
    "element fills": fills,
    "where with inf": lambda: torch.where(v > 0, v, torch.inf),
    "argmin + index_select": lambda: v.index_select(0, v.argmin().reshape(1)),
    "cholesky_solve batched": lambda: torch.cholesky_solve(rhs, chol0),
    "cholesky_ex batched (5,10,10)": lambda: torch.linalg.cholesky_ex(spd),
}
for name, fn in probes.items():
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay(); torch.cuda.synchronize()
        print(f"{name}: captured")
    except RuntimeError as err:
        print(f"{name}: refused: {str(err).splitlines()[0][:150]}")
        torch.cuda.synchronize()
