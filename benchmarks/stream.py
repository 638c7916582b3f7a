"""`mha run --jsonl` as a person runs it: a subprocess on a file of many problems, on one
core, the start-up measured apart in the same run.

    python benchmarks/stream.py              # 10,000 tiny problems, and larger ones
    python benchmarks/stream.py --repeats 9

Tiny problems are 2 tokens, d_model 2, one head (x, w_q, w_k, w_v, numbers of three
decimals, each problem its own). The start-up is `mha run --jsonl` on a file of one such
problem; a problem's time is (the stream's time − the start-up) / its problems, from the
minimum of each over the rounds (the least disturbed: these machines are shared), and
from the medians.
Larger problems (512 tokens, d_model 64, 4 heads, causal, with w_o) are timed in a stream
of 10 against `mha run` on one alone, its start-up (`mha run` on a 2-token file) taken off
the same way, and in this process, where no start-up blurs it (CPU time: `mha run`'s
steps against the stream's answer to the line). Every command runs pinned to one core
(`taskset -c 0`), the commands alternating within each round; the minimum and the median
over the rounds are printed, with the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402  (the CPU, its SIMD, the libraries)

TINY = 10_000
LARGE = 10


def mha() -> list[str]:
    script = Path(sys.executable).parent / "mha"  # the console script, as a user runs it
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "mhacli"]
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    return pin + cmd


def seconds(cmd: list[str]) -> float:
    # as installed: bytecode cached (pip compiles it at install), no forced colour
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "PYTHONDONTWRITEBYTECODE")}
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def tiny_line(rng: np.random.Generator) -> str:
    doc = {k: np.round(rng.uniform(-1, 1, (2, 2)), 3).tolist()
           for k in ("x", "w_q", "w_k", "w_v")}
    return json.dumps(doc)


LARGE_SIZE = "512 tokens, d_model 64, 4 heads, causal"


def large_line(rng: np.random.Generator) -> str:
    n, d, h = 512, 64, 4
    doc = {"x": np.round(rng.standard_normal((n, d)), 3).tolist(), "heads": h,
           "mask": "causal"}
    for k in ("w_q", "w_k", "w_v", "w_o"):
        doc[k] = np.round(rng.standard_normal((d, d)) / 8, 4).tolist()
    return json.dumps(doc)


def rounds(pairs: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    """Each command's seconds over the rounds, the commands alternating within a round."""
    times: dict[str, list[float]] = {name: [] for name in pairs}
    for cmd in pairs.values():  # warm the file cache and the bytecode
        seconds(cmd)
    for _ in range(repeats):
        for name, cmd in pairs.items():
            times[name].append(seconds(cmd))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(machine())
    print("pinned to one core:", "taskset -c 0" if shutil.which("taskset") else "no (taskset "
          "not found)")
    rng = np.random.default_rng(0)
    run = mha()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        lines = [tiny_line(rng) for _ in range(TINY)]
        (base / "tiny.jsonl").write_text("\n".join(lines) + "\n")
        (base / "one.jsonl").write_text(lines[0] + "\n")
        big = large_line(rng)
        (base / "large.jsonl").write_text((big + "\n") * LARGE)
        (base / "large.json").write_text(big)
        (base / "two.json").write_text(lines[0])
        t = rounds({"start-up": run + ["run", "--jsonl", str(base / "one.jsonl")],
                    "tiny": run + ["run", "--jsonl", str(base / "tiny.jsonl")],
                    "large stream": run + ["run", "--jsonl", str(base / "large.jsonl")],
                    "large alone": run + ["run", str(base / "large.json"), "--format", "json"],
                    "run start-up": run + ["run", str(base / "two.json"), "--format", "json"]},
                   args.repeats)
    for name, v in t.items():
        print(f"  {name:13} min {min(v):.3f} s, median {statistics.median(v):.3f} s")
    for which, pick in (("min", min), ("median", statistics.median)):
        # the start-up taken off: the least (most) time is the one least disturbed
        start = pick(t["start-up"])
        each = (pick(t["tiny"]) - start) / (TINY - 1)
        print(f"{which}: mha run --jsonl, {TINY:,} tiny problems: {each * (TINY - 1):.3f} s on "
              f"top of the start-up ({start:.3f} s), {each * 1e6:.0f} µs a problem, "
              f"{1 / each:,.0f} problems a second (target ≥ 10,000)")
        stream = (pick(t["large stream"]) - start) / LARGE
        alone = pick(t["large alone"]) - pick(t["run start-up"])
        print(f"{which}: a larger problem ({LARGE_SIZE}): {stream * 1e3:.0f} ms in the "
              f"stream, {alone * 1e3:.0f} ms alone in mha run (start-ups taken off), "
              f"ratio {stream / alone:.2f} (target ≤ 1)")
    in_process(args.repeats)


def in_process(repeats: int) -> None:
    """The larger problem's own time, free of the start-up's drift: CPU time in this
    process, `mha run`'s steps (its file read, the fast path, the JSON written) against
    the stream's answer to its line."""
    import mhacli  # noqa: F401  (the tree being measured)
    from mhacli.cli.jsonl import Answers
    from mhacli.engine import fast
    from mhacli.io.problem import load
    from mhacli.present.text import write_output

    if hasattr(os, "sched_setaffinity"):  # one core, as the commands above
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    line = large_line(np.random.default_rng(0))
    alone, stream = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.json"
        path.write_text(line)
        for _ in range(repeats):
            start = time.process_time()
            write_output(fast(load(path).prepared), "json")
            alone.append(time.process_time() - start)
            start = time.process_time()
            Answers({}, None).of([(1, line.encode())])
            stream.append(time.process_time() - start)
    for which, pick in (("min", min), ("median", statistics.median)):
        print(f"{which}, in this process (CPU time): the larger problem {pick(stream) * 1e3:.0f} "
              f"ms in the stream, {pick(alone) * 1e3:.0f} ms as mha run reads and computes it, "
              f"ratio {pick(stream) / pick(alone):.2f}")


if __name__ == "__main__":
    main()
