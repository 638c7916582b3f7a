"""Sparse attention (the indexer's top-k, DeepSeek-V3.2's DSA) against the same multi-head
latent attention without it, as a person runs `mha run`, and in this process.

    python benchmarks/sparse.py                    # n = 1024 and 4096
    python benchmarks/sparse.py --n 2048 --repeats 9
    python benchmarks/sparse.py --against ../other # the in-process times of another checkout

The problem is MLA of DeepSeek's shape scaled down (d_model 256, 8 heads of d_k 32 + 16
turned by RoPE, d_v 32, latents of 64, causal) with an indexer of 8 heads of 32 and
top_k 256; its arrays in an .npz beside two YAML files, one with the indexer and one
without, so both read alike. `mha run` on each, alternating within each round, in
subprocesses (start-up and reading included); then in this process
`mhacli.attention` on the same arrays (the indexer's scores and keep mask timed apart).
Medians over the rounds, with the CPU: these machines are shared, and only ratios
measured side by side are worth comparing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402  (the CPU, its SIMD, the libraries)

D, H, D_NOPE, D_R, D_V, R_Q, R_KV, E, D_I, TOP_K = 256, 8, 32, 16, 32, 64, 64, 8, 32, 256


def arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The problem's arrays (MLA's, then the indexer's under index_*), scaled so the
    scores stay of order one."""
    rng = np.random.default_rng(seed)

    def w(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols)) / np.sqrt(rows)

    return {"x": rng.standard_normal((n, D)), "w_dq": w(D, R_Q),
            "w_uq": w(R_Q, H * (D_NOPE + D_R)), "w_dkv": w(D, R_KV + D_R),
            "w_uk": w(R_KV, H * D_NOPE), "w_uv": w(R_KV, H * D_V), "w_o": w(H * D_V, D),
            "q_latent_norm": rng.uniform(0.5, 1.5, R_Q),
            "kv_latent_norm": rng.uniform(0.5, 1.5, R_KV),
            "index_w_q": w(R_Q, E * D_I), "index_w_k": w(D, D_I),
            "index_w_weights": w(D, E), "index_k_norm": rng.uniform(0.5, 1.5, D_I),
            "index_k_norm_bias": rng.standard_normal(D_I) * 0.1}


def indexer(a: dict[str, np.ndarray], named: bool) -> dict:
    """The indexer setting: arrays named in big.npz (for a file) or the arrays."""
    out: dict = {"top_k": TOP_K, "rope": "half", "eps": 1e-6}
    for key in ("w_q", "w_k", "w_weights", "k_norm", "k_norm_bias"):
        out[key] = f"big.npz:index_{key}" if named else a[f"index_{key}"]
    return out


def files(folder: Path, n: int) -> tuple[Path, Path]:
    """Two problem files beside big.npz: MLA with the indexer, and without."""
    a = arrays(n)
    np.savez(folder / "big.npz", **a)
    base = {key: f"big.npz:{key}" for key in a if not key.startswith("index_")}
    base.update(heads=H, mask="causal", rope="interleaved")
    dense, sparse = folder / "dense.yaml", folder / "sparse.yaml"
    dense.write_text(yaml.safe_dump(base))
    sparse.write_text(yaml.safe_dump({**base, "indexer": indexer(a, True)}))
    return sparse, dense


def mha_run(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mhacli", "run", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


IN_PROCESS = r"""
import json, statistics, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import mhacli
from mhacli.engine.validate import prepare
from mhacli.engine.sparse import keep_of
sys.path.insert(0, sys.argv[2])
from sparse import arrays, indexer, H
n, repeats = int(sys.argv[3]), int(sys.argv[4])
a = arrays(n)
kw = {k: v for k, v in a.items() if not k.startswith("index_")}
kw.update(heads=H, mask="causal", rope="interleaved")
ix = indexer(a, False)
p = prepare(**kw, indexer=ix)
allowed = np.tril(np.ones((n, n), dtype=bool))
sides = {"sparse": lambda: mhacli.attention(**kw, indexer=ix),
         "dense": lambda: mhacli.attention(**kw),
         "indexer": lambda: keep_of(p, allowed)}
times = {k: [] for k in sides}
for fn in sides.values():
    fn()
for _ in range(repeats):
    for k, fn in sides.items():
        t = time.perf_counter(); fn(); times[k].append(time.perf_counter() - t)
print(json.dumps({k: statistics.median(v) for k, v in times.items()}))
"""


def in_process(checkout: Path, n: int, repeats: int) -> dict[str, float]:
    """mhacli.attention with and without the indexer, and the indexer's scores and keep
    mask alone, in a fresh process importing ``checkout``'s mhacli."""
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(checkout),
                          str(Path(__file__).parent), str(n), str(repeats)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="*", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout, in-process times")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    print(machine())
    print(f"MLA d_model {D}, {H} heads of d_k {D_NOPE} + {D_R} (RoPE), d_v {D_V}, latents "
          f"{R_Q}/{R_KV}, causal; indexer {E} heads of {D_I}, top_k {TOP_K}; "
          f"median of {args.repeats}")
    for n in args.n:
        with tempfile.TemporaryDirectory() as tmp:
            sparse, dense = files(Path(tmp), n)
            mha_run(sparse), mha_run(dense)  # warm the file cache
            ts, td = [], []
            for _ in range(args.repeats):
                ts.append(mha_run(sparse))
                td.append(mha_run(dense))
        s, d = statistics.median(ts), statistics.median(td)
        print(f"n = {n}: mha run, sparse {s:.3f} s / dense {d:.3f} s = {s / d:.2f}")
        sides = [("this checkout", here)] + ([("--against", args.against.resolve())]
                                             if args.against else [])
        for name, checkout in sides:
            t = in_process(checkout, n, args.repeats)
            print(f"n = {n}: in process ({name}): attention sparse {t['sparse']:.3f} s / "
                  f"dense {t['dense']:.3f} s = {t['sparse'] / t['dense']:.2f}; the "
                  f"indexer's scores and keep mask {t['indexer']:.3f} s")


if __name__ == "__main__":
    main()
