"""The fast path's building blocks on one core: NumPy's BLAS against PyTorch's, side by side.

    python benchmarks/products.py

Each block of the fast path is two products with an inner or outer dimension of
d_k = 64 and one exponential per score; this prints what one core makes of each, in
GFLOP/s (or ns a number for exp), for NumPy (the BLAS it was built with, OpenBLAS in the
PyPI wheels) the way the fast path makes them (float32's turned: K·Qᵀ, then
[V | 1]ᵀ·(K·Qᵀ), its row of ones giving the row sums), and for PyTorch (MKL on x86)
when it is installed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

ROWS, KEYS, D_K = 256, 4096, 64  # one block of queries against every key, one head


def medians(fns: list[Callable[[], object]], repeats: int = 9) -> list[float]:
    """Each function's median time, the functions taking turns in every round (the
    machine's speed drifts: side by side, the ratios hold)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, acc in zip(fns, times):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    return [statistics.median(acc) for acc in times]


def main() -> None:
    if hasattr(os, "sched_setaffinity"):  # one core, and every library on it alone
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if torch is not None:
        torch.set_num_threads(1)
    print(machine())
    print(f"One core; a block of {ROWS} queries, {KEYS} keys, d_k = {D_K}")
    flops = 2 * ROWS * KEYS * D_K
    for dtype in (np.float64, np.float32):
        rng = np.random.default_rng(0)
        q = rng.standard_normal((ROWS, D_K)).astype(dtype)
        k_t = rng.standard_normal((D_K, KEYS)).astype(dtype)
        v = rng.standard_normal((KEYS, D_K)).astype(dtype)
        z = np.empty((ROWS, KEYS), dtype=dtype)
        o = np.empty((ROWS, D_K), dtype=dtype)
        small = (z * 0.01).astype(dtype)
        # NumPy as the fast path makes them: float32 turned, K·Qᵀ and [V | 1]ᵀ·(K·Qᵀ)
        k, q_t, z_t = (np.ascontiguousarray(a.T) for a in (k_t, q, z))
        v1_t = np.vstack((v.T, np.ones((1, KEYS), dtype=dtype)))  # (d_k + 1, keys)
        o1_t = np.empty((D_K + 1, ROWS), dtype=dtype)
        sides: dict[str, list[Callable[[], object]]] = {
            "NumPy": [lambda: np.matmul(k, q_t, out=z_t), lambda: np.matmul(v1_t, z_t, out=o1_t),
                      lambda: np.exp(small, out=z)] if dtype == np.float32 else
                     [lambda: np.matmul(q, k_t, out=z), lambda: np.matmul(z, v, out=o),
                      lambda: np.exp(small, out=z)]}
        if torch is not None:
            tq, tk, tv, tz, to, ts = (torch.from_numpy(a) for a in (q, k_t, v, z.copy(),
                                                                   o.copy(), small))
            sides["PyTorch"] = [lambda: torch.matmul(tq, tk, out=tz),
                                lambda: torch.matmul(tz, tv, out=to),
                                lambda: torch.exp(ts, out=tz)]
        names = list(sides)
        timed = medians([fn for side in names for fn in sides[side]])
        for i, side in enumerate(names):
            scores, output, exp = timed[3 * i:3 * i + 3]
            print(f"  {np.dtype(dtype).name:7} {side:8} Q·Kᵀ {flops / scores / 1e9:5.0f} "
                  f"GFLOP/s   A·V {flops / output / 1e9:5.0f} GFLOP/s   "
                  f"exp {exp / z.size * 1e9:.2f} ns a number")

if __name__ == "__main__":
    main()
