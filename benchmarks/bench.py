"""Every speed and memory figure of mha, measured side by side in one process.

    python benchmarks/bench.py            # all figures (a few minutes on 2 cores)
    python benchmarks/bench.py --quick    # fewer repeats
    python benchmarks/bench.py --against OTHER_CHECKOUT   # each part run on both, in turn

The reference is PyTorch's torch.nn.functional.multi_head_attention_forward on the CPU
when torch is importable, else a plain NumPy implementation (one einsum per stage).
Each time is the median of repeated runs; the two sides alternate within each round.
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
from typing import Callable

import numpy as np

import mhacli

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

N, D, H = 4096, 512, 8


def problem(n: int, d: int, dtype: type, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(dtype)
    ws = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(dtype) for _ in range(4)]
    return dict(x=x, w_q=ws[0], w_k=ws[1], w_v=ws[2], w_o=ws[3])


def numpy_baseline(p: dict, heads: int, causal: bool = False) -> np.ndarray:
    """The straightforward NumPy version: every stage whole, as a tutorial writes it."""
    x = p["x"]
    n, d = x.shape
    dk = d // heads
    q, k, v = (x @ p[w] for w in ("w_q", "w_k", "w_v"))
    split = lambda a: a.reshape(n, heads, dk).transpose(1, 0, 2)  # noqa: E731
    z = split(q) @ split(k).transpose(0, 2, 1) / np.sqrt(dk)
    if causal:
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
    a = np.exp(z - z.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return (a @ split(v)).transpose(1, 0, 2).reshape(n, d) @ p["w_o"]


def torch_reference(p: dict, heads: int, causal: bool = False) -> Callable[[], object]:
    """A closure running PyTorch's own multi-head attention on the same numbers."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    x = t(p["x"])[:, None, :]
    d = p["x"].shape[1]
    w_in = t(np.vstack([p["w_q"].T, p["w_k"].T, p["w_v"].T]))
    w_o = t(p["w_o"].T)
    mask = t(np.triu(np.ones((len(p["x"]),) * 2, dtype=bool), k=1)) if causal else None

    def run() -> object:
        with torch.no_grad():
            return F.multi_head_attention_forward(
                x, x, x, d, heads, w_in, None, None, None, False, 0.0, w_o, None,
                training=False, need_weights=False, attn_mask=mask, is_causal=causal)[0]
    return run


def median_pair(a: Callable[[], object], b: Callable[[], object],
                repeats: int) -> tuple[float, float]:
    a(), b()  # warm up
    ta, tb = [], []
    for _ in range(repeats):
        for fn, acc in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    return statistics.median(ta), statistics.median(tb)


def machine() -> str:
    """The CPU, its widest SIMD, the cores this process may use, and the libraries: what
    a reader needs to tell why figures differ between machines."""
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else \
        "below AVX2" if flags else "unknown SIMD"
    blas = "BLAS unknown"
    try:
        from threadpoolctl import threadpool_info

        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                blas = f"{lib.get('internal_api')} {lib.get('version')} " \
                       f"({lib.get('architecture')})"
                break
    except ImportError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{model}, {simd}, {cores} core{'' if cores == 1 else 's'}; Python {sys.version.split()[0]}, "
            f"NumPy {np.__version__}, {blas}, "
            f"PyTorch {torch.__version__ if torch else 'not installed'}")


def speed(repeats: int) -> None:
    name = "PyTorch" if torch is not None else "NumPy baseline"
    print(f"Attention, n = {N}, d_model = {D}, H = {H} (reference: {name})")
    results = {}
    for dtype, target in ((np.float64, 1.2), (np.float32, 1.2)):
        p = problem(N, D, dtype)
        ours = lambda: mhacli.attention(**p, heads=H, dtype=dtype)  # noqa: E731
        ref = torch_reference(p, H) if torch is not None else \
            (lambda: numpy_baseline(p, H))
        t_ours, t_ref = median_pair(ours, ref, repeats)
        results[dtype] = t_ours
        print(f"  {np.dtype(dtype).name}: mha {t_ours:.3f} s, {name} {t_ref:.3f} s, "
              f"ratio {t_ours / t_ref:.2f} (target ≤ {target})")
    p = problem(N, D, np.float64)
    causal = lambda: mhacli.attention(**p, heads=H, mask="causal")  # noqa: E731
    plain = lambda: mhacli.attention(**p, heads=H)  # noqa: E731
    t_causal, t_plain = median_pair(causal, plain, repeats)
    print(f"  causal / unmasked, float64: {t_causal:.3f} s / {t_plain:.3f} s = "
          f"{t_causal / t_plain:.2f} (target ≤ 0.6)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if cores > 1:  # the same work on every core, then pinned to one (BLAS included)
        child = ("import os, sys, time; one = sys.argv[1] == '1'\n"
                 "if one: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
                 "import numpy as np, mhacli; sys.path.insert(0, %r)\n"
                 "from bench import problem, N, D, H; p = problem(N, D, np.float64)\n"
                 "mhacli.attention(**p, heads=H); t = []\n"
                 "for _ in range(%d):\n s = time.perf_counter(); mhacli.attention(**p, heads=H)\n"
                 " t.append(time.perf_counter() - s)\n"
                 "print(sorted(t)[len(t) // 2])") % (str(Path(__file__).parent), max(3, repeats // 2))
        runs: dict[str, list[float]] = {"all": [], "1": []}
        for _ in range(3):  # the two children take turns, as the machine's speed drifts
            for which, acc in runs.items():
                out = subprocess.run([sys.executable, "-c", child, which], check=True,
                                     capture_output=True, text=True).stdout
                acc.append(float(out.split()[-1]))
        times = {which: statistics.median(acc) for which, acc in runs.items()}
        print(f"  {cores} cores / 1 core, float64: {times['all']:.3f} s / {times['1']:.3f} s "
              f"= {times['all'] / times['1']:.2f} (target ≤ 0.6)")


MEMORY_CHILD = """
import numpy as np, mhacli

def peak_kib():  # the high-water mark of resident memory (VmHWM), in KiB
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

with open("/proc/self/clear_refs", "w") as f:  # a child may inherit its parent's mark
    f.write("5")
import sys, time
n, d, h = 16384, 256, int(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.standard_normal((n, d), dtype=np.float32)
variants = eval(sys.argv[2])  # the variants, as keyword arguments
g = variants.get("kv_heads", h)
ws = [rng.standard_normal(shape, dtype=np.float32) / 16
      for shape in ((d, d), (d, d * g // h), (d, d * g // h), (d, d))]
before = peak_kib()
start = time.perf_counter()
out = mhacli.attention(x, *ws[:3], w_o=ws[3], heads=h, mask="causal", dtype=np.float32,
                       **variants)
print(before, peak_kib(), bool(np.isfinite(out).all()), time.perf_counter() - start)
"""
VARIANT_RUNS = (  # heads, variants: the contract's plain case, then issue 12's Llama-like one
    (4, "{}"),
    (8, "{'kv_heads': 2, 'rope': 'half', 'window': 1024}"),
)


def memory() -> None:
    for heads, variants in VARIANT_RUNS:
        out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(heads), variants],
                             capture_output=True, text=True, check=True).stdout.split()
        before, peak = int(out[0]) / 2**20, int(out[1]) / 2**20  # KiB -> GiB
        print(f"Memory, n = 16384, d_model = 256, H = {heads}, causal, float32, {variants}: "
              f"peak resident {peak:.2f} GiB ({before:.2f} GiB with the inputs, before the "
              f"call; target ≤ 1 GiB; the whole score tensor would be "
              f"{16384 * 16384 * heads * 4 / 2**30:.0f} GiB); {float(out[3]):.2f} s")


def wall(cmd: list[str], repeats: int, env: dict | None = None) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def startup(repeats: int) -> None:
    script = Path(sys.executable).parent / "mha"  # the console script, as a user runs it
    mha = [str(script)] if script.exists() else [sys.executable, "-m", "mhacli"]
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "two.yaml"
        small.write_text("x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\n"
                         "w_v: [[1, 0], [0, 1]]\n")
        # as installed: bytecode cached (pip compiles it at install), no forced colour
        env = {k: v for k, v in os.environ.items()
               if k not in ("FORCE_COLOR", "PYTHONDONTWRITEBYTECODE")}
        pairs = [
            ("mha run on a 2-token problem", mha + ["run", str(small)],
             "import numpy, yaml, typer", 1.10),
            ("mha explain on the built-in example", mha + ["explain"],
             "import numpy, yaml, typer, rich.console, rich.table", 1.25),
        ]
        for label, cmd, imports, target in pairs:
            base = [sys.executable, "-c", imports]
            wall(cmd, 2, env), wall(base, 2, env)  # warm the file cache
            ours, ref = [], []
            for _ in range(repeats):
                ours.append(wall(cmd, 1, env))
                ref.append(wall(base, 1, env))
            a, b = statistics.median(ours), statistics.median(ref)
            print(f"Start-up, {label}: {a:.3f} s vs `python -c \"{imports}\"` {b:.3f} s, "
                  f"ratio {a / b:.2f} (target ≤ {target})")
        stream = Path(tmp) / "many.jsonl"
        one = '{"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]], ' \
              '"w_v": [[1, 0], [0, 1]]}\n'
        stream.write_text(one * 1000)
        many = statistics.median(wall(mha + ["run", "--jsonl", str(stream)], 1, env)
                                 for _ in range(repeats))
        single = statistics.median(wall(mha + ["run", str(small)], 1, env)
                                   for _ in range(repeats))
        print(f"mha run --jsonl over 1000 small problems: {many:.3f} s, {many / single:.2f} × "
              f"one mha run ({single:.3f} s; target < 3)")
        big = mha + ["explain", "--random", "--seed", "1", "--tokens", "128", "--d-model", "64",
                     "--heads", "4", "--format"]
        for fmt in ("plain", "json"):
            t = statistics.median(wall(big + [fmt], 1, env) for _ in range(repeats))
            print(f"mha explain, 128 tokens, d_model 64, 4 heads, --format {fmt}: {t:.3f} s "
                  "(target ≤ 0.4)")
        t = statistics.median(in_terminal(mha + ["explain", "--sample", "hopkins"], env)
                              for _ in range(repeats))
        print(f"mha explain --sample hopkins in a terminal (pty, 120 columns): {t:.3f} s "
              "(target ≤ 0.6)")


def in_terminal(cmd: list[str], env: dict) -> float:
    """Seconds until ``cmd`` has finished writing to a 120 × 50 pseudo-terminal."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave,
                            env=dict(env, TERM="xterm-256color", PAGER="cat"), close_fds=True)
    os.close(slave)
    while True:
        try:
            if not os.read(master, 1 << 16):
                break
        except OSError:  # the other side closed
            break
    proc.wait()
    os.close(master)
    return time.perf_counter() - start


def reading(repeats: int) -> None:
    p = problem(N, D, np.float64)
    t_attn = statistics.median(_times(lambda: mhacli.attention(**p, heads=H), repeats))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        np.savez(base / "p.npz", heads=H, **p)
        doc = {k: v.tolist() for k, v in p.items()} | {"heads": H}
        (base / "p.json").write_text(json.dumps(doc))
        (base / "p.yaml").write_text(
            "heads: 8\n" + "".join(f"{k}:\n" + "".join(f"  - [{', '.join(map(repr, r))}]\n"
                                                      for r in v.tolist())
                                   for k, v in p.items()))
        print(f"Reading a {N} × {D} problem (attention itself: {t_attn:.3f} s):")
        for name in ("p.npz", "p.json", "p.yaml"):
            path = base / name
            reps = repeats if name != "p.yaml" else 1
            t = statistics.median(_times(lambda: mhacli.load(path), reps))
            size = path.stat().st_size / 2**20
            print(f"  {name:7} {size:6.1f} MiB  {t:.3f} s  ({t / t_attn:.2f} × the attention)")


def _times(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--only", choices=["speed", "memory", "startup", "reading"])
    ap.add_argument("--against", type=Path, help="another checkout of mha: each part is "
                    "run on this one and on that one in turn, in one run of the script")
    ap.add_argument("--quiet-machine", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    reps = 3 if args.quick else 7
    if args.against is not None:
        print(machine())
        here = Path(__file__).resolve().parent.parent
        for part in ("speed", "memory", "startup", "reading"):
            if args.only not in (None, part):
                continue
            for where in (here, args.against.resolve()):  # side by side, the same minute
                env = dict(os.environ, PYTHONPATH=str(where))
                cmd = [sys.executable, __file__, "--only", part, "--quiet-machine",
                       *(["--quick"] if args.quick else [])]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                      cwd=tempfile.gettempdir())  # not "" = a checkout
                if done.returncode:
                    sys.exit(f"{part} with mha from {where} failed:\n{done.stderr[-3000:]}")
                out = done.stdout
                print(f"[{part}, mha from {where}]")
                print(out.rstrip())
        sys.exit(0)
    if not args.quiet_machine:
        print(machine())
    elif Path(mhacli.__file__).resolve().parent.parent != Path(os.environ["PYTHONPATH"]):
        sys.exit(f"mha was imported from {mhacli.__file__}, not from $PYTHONPATH")
    for part, fn in (("speed", lambda: speed(reps)), ("memory", memory),
                     ("startup", lambda: startup(reps * 2)), ("reading", lambda: reading(reps))):
        if args.only in (None, part):
            fn()
