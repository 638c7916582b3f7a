"""Time and peak memory of mha on hostile and oversized inputs (the second hostile round).

    python benchmarks/hostile.py [--mha PATH]

Each case is a file made here (in a temporary folder) and one `mha` command; the script
prints the seconds, the peak resident memory of the command, its exit code and the first
line of its message. The promise: every case ends within 10 s and 1 GiB, with exit 2 and
one line, or the right answer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import machine  # noqa: E402  (the CPU, its SIMD, cores and libraries)

import numpy as np


def _block(name: str, a: np.ndarray) -> str:
    return f"{name}:\n" + "".join("  - [" + ", ".join(f"{v:.6f}" for v in r) + "]\n" for r in a)


def _cases(folder: Path) -> list[tuple[str, list[str]]]:
    rng = np.random.default_rng(0)
    w = "w_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"
    (folder / "question.yaml").write_text("? " * 40000 + "a\n")
    (folder / "deep.yaml").write_text("x: " + "[" * 1000 + "1" + "]" * 1000 + "\n")
    n, d = 4096, 512
    text = "heads: 8\n" + _block("x", rng.standard_normal((n, d)))
    for key in ("w_q", "w_k", "w_v"):
        text += _block(key, rng.standard_normal((d, d)) / 22)
    first = text.index("[", text.index("x:")) + 1
    comma = text.index(",", first)
    (folder / "fraction.yaml").write_text(text[:first] + '"1/2"' + text[comma:])
    (folder / "empties.yaml").write_text("x: [" + '"", ' * (4 << 20) + '""]\n' + w)
    np.savez_compressed(folder / "zeros.npz", x=np.zeros(1 << 29, dtype=np.int8))
    n, dm = 2600, 8
    xi = rng.integers(-2, 3, size=(n, dm))
    wq = rng.integers(-2, 3, size=(dm, dm))
    lines = ["heads: 2", "x:"] + [f"  - [{', '.join(map(str, r))}]" for r in xi]
    for key in ("w_q", "w_k", "w_v"):
        m = wq if key == "w_q" else rng.integers(-2, 3, size=(dm, dm))
        lines += [f"{key}:"] + [f"  - [{', '.join(map(str, r))}]" for r in m]
    lines += ["answers:", "  q:"] + [f"    - [{', '.join(map(str, r))}]" for r in xi @ wq]
    (folder / "check.yaml").write_text("\n".join(lines) + "\n")
    return [
        ("'? ' × 40000 (a crash before)", ["run", "question.yaml"]),
        ("flow nesting 1000 deep", ["run", "deep.yaml"]),
        ("/dev/zero", ["run", "/dev/zero"]),
        ("/dev/urandom", ["run", "/dev/urandom"]),
        (f"{os.path.getsize(folder / 'fraction.yaml') / 2**20:.0f} MiB YAML, one \"1/2\"",
         ["run", "fraction.yaml", "-o", "out.txt"]),
        ("16 MiB of \"\", ", ["run", "empties.yaml"]),
        (f"{os.path.getsize(folder / 'zeros.npz') / 2**10:.0f} KB .npz of 512 MiB zeros",
         ["run", "zeros.npz"]),
        ("check, n = 2600, whole-number q", ["check", "check.yaml"]),
        ("generate --tokens 1 --d-model 7000", ["generate", "--tokens", "1", "--d-model",
                                                "7000"]),
        ("run > /dev/full", ["run", "--random", "--seed", "1", "--tokens", "3000",
                             "--d-model", "64", "--heads", "4", "-o", "/dev/full"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mha", default=shutil.which("mha") or "mha")
    mha = os.path.abspath(parser.parse_args().mha) if os.sep in parser.parse_args().mha \
        else parser.parse_args().mha
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = _cases(folder)
        print(f"{'case':<44} {'seconds':>8} {'peak MiB':>9} {'exit':>5}  message")
        for name, args in cases:
            start = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", _MEASURED, mha, *args], cwd=folder,
                               capture_output=True, text=True, timeout=120)
            seconds = time.perf_counter() - start
            *lines, peak = r.stderr.strip().splitlines()
            message = (lines or r.stdout.strip().splitlines() or [""])[-1]
            print(f"{name:<44} {seconds:8.2f} {int(peak) / 1024:9.0f} {r.returncode:5}  "
                  f"{message[:90]}")


# runs one command and prints its peak resident memory (KiB) as the last line on stderr
_MEASURED = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


if __name__ == "__main__":
    sys.exit(main())
