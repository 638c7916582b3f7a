"""One layer of an 8B model, end to end as a person runs it: time and peak memory.

    python benchmarks/layer_memory.py                       # this checkout
    python benchmarks/layer_memory.py --against ../old      # and another, side by side

Builds, in a temporary folder removed afterwards, the sparse Llama-3-8B-shaped bfloat16
checkpoint of ``checkpoint_read.py`` (four shards, 16 GB as files, a few hundred MB on
disk: only layer 2's attention is written). Then runs, each in a fresh process and
alternating between the checkouts compared, the commands a person types:

    mha run --checkpoint DIR --layer 2 --random --tokens 8 --format json
    mha run ... --dtype float32
    mha explain --checkpoint DIR --layer 2 --random --tokens 8 --stage output --format json
    mha check FILE --checkpoint DIR --layer 2       (a file of 8 tokens' x and its output)

and reports, for each, the best wall time of the repeats (the page cache warm) and the
peak resident memory of the process (its VmHWM, start-up and imports included), beside
the layer's own weights: 80 MiB as stored, 320 MiB as float64, 160 MiB as float32.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402
from checkpoint_read import ATTENTION, build, tensors  # noqa: E402

LAYER = 2
ROOT = Path(__file__).resolve().parent.parent
# each command runs under a small wrapper that reports its own peak (the kernel's VmHWM,
# reset as the interpreter starts) and its time
WRAP = r"""
import sys, time
with open("/proc/self/clear_refs", "w") as f:  # the high-water mark from here: not a
    f.write("5")  # parent's pages that a fork may have counted before the exec
sys.argv = ["mha"] + sys.argv[1:]
start = time.perf_counter()
code = 0
try:
    from mhacli.cli import entry
    entry()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
took = time.perf_counter() - start
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))  # KiB
sys.stderr.write(f"\n@@ {took} {peak} {code}\n")
"""


def run(source: Path, args: list[str]) -> tuple[float, float, int]:
    """One command in a fresh interpreter importing mhacli from ``source``: (seconds,
    peak MiB, exit code)."""
    env = dict(os.environ, PYTHONPATH=str(source))  # (run from there: "" on the path first)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled once, as an installed package is
    r = subprocess.run([sys.executable, "-c", WRAP, *args], env=env, capture_output=True,
                       text=True, cwd=source)
    tail = r.stderr.strip().splitlines()[-1]
    if not tail.startswith("@@"):
        raise SystemExit(f"{source}: mha {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    _, took, peak, code = tail.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"{source}: mha {' '.join(args)} exited {code}:\n{r.stderr[-2000:]}")
    return float(took), int(peak) / 1024, int(code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, action="append", default=[],
                    help="another checkout to measure side by side (repeatable)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sources = [ROOT] + [p.resolve() for p in args.against]
    print(machine())
    shapes = dict(tensors())
    own = sum(int(np.prod(shapes[f"model.layers.{LAYER}.self_attn.{p}.weight"]))
              for p in ATTENTION)
    mib = own / 2**20
    print(f"Layer {LAYER}'s q/k/v/o_proj: {own:,} numbers: {mib * 2:.0f} MiB as stored, "
          f"{mib * 8:.0f} MiB as float64, {mib * 4:.0f} MiB as float32")
    print(f"Goals: float64 ≤ {1.25 * mib * 8 + 100:.0f} MiB, float32 ≤ "
          f"{1.25 * mib * 4 + 100:.0f} MiB (1.25 × the weights + 100 MiB); ≤ 1.5 s warm")
    with tempfile.TemporaryDirectory(prefix="mha-layer-") as tmp:
        folder = Path(tmp) / "llama-8b"
        folder.mkdir()
        build(folder, LAYER)
        problem = Path(tmp) / "eight.json"  # 8 tokens and their output, for check
        x = np.round(np.random.default_rng(0).standard_normal((8, 4096)), 2)
        r = subprocess.run([sys.executable, "-m", "mhacli", "run", "-", "--checkpoint",
                            str(folder), "--layer", str(LAYER), "--format", "json"],
                           input=json.dumps({"x": x.tolist()}), capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
        out = json.loads(r.stdout)["output"]
        problem.write_text(json.dumps({"x": x.tolist(), "answers": {"output": out}}))
        base = ["--checkpoint", str(folder), "--layer", str(LAYER)]
        random = base + ["--random", "--tokens", "8", "--seed", "1"]
        commands = {
            "run, float64": ["run", *random, "--format", "json"],
            "run, float32": ["run", *random, "--format", "json", "--dtype", "float32"],
            "explain --stage output": ["explain", *random, "--stage", "output", "--format",
                                       "json"],
            "check (8 tokens' output)": ["check", str(problem), *base],
        }
        results: dict[tuple[str, Path], list[tuple[float, float]]] = {}
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                for source in sources:  # alternating: each checkout sees the same machine
                    took, peak, _ = run(source, cmd)
                    results.setdefault((name, source), []).append((took, peak))
    width = max(map(len, commands))
    print(f"\n{'command':<{width}}  " + "  ".join(f"{'time s':>7} {'peak MiB':>9}"
                                                   for _ in sources)
          + "   (" + ", then ".join(str(s) for s in sources) + ")")
    for name in commands:
        cells = []
        for source in sources:
            got = results[(name, source)]
            cells.append(f"{min(t for t, _ in got):7.2f} {max(p for _, p in got):9.0f}")
        print(f"{name:<{width}}  " + "  ".join(cells))
    print(f"\n(time: the best of {args.repeats}; peak: the process's largest resident "
          "memory, start-up and imports included, the largest of the repeats)")


if __name__ == "__main__":
    main()
