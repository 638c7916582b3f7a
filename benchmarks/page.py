"""The explorer page's size and opening time, in a real headless Chromium.

    python benchmarks/page.py [--rounds 3] [--against OTHER_CHECKOUT]

Writes the default example's page and a 64-token problem's (d_model 64, 4 heads, a
causal mask), prints each one's size against its limit (150 KiB, 3 MiB), and opens
each page ``--rounds`` times (a fresh tab each): the time from asking for the file
until every table is in the document with every entry's text (the page marks
``<html data-drawn>`` when its script has drawn them, looked for every 10 ms; the count
of entries is checked against explain's plain text), best of the rounds against the
limit of 2 s. With ``--against`` another checkout's pages are made too and opened in
turn with these, round by round (a shared machine's load falls on both alike). Prints
the machine first. Needs Debian's chromium (/usr/bin/chromium) and the playwright
package.
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

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = {
    "the default example": [],
    "64 tokens, d_model 64, 4 heads": ["--random", "--seed", "1", "--tokens", "64",
                                       "--d-model", "64", "--heads", "4", "--mask", "causal"],
}
LIMITS = {"the default example": 150 * 1024, "64 tokens, d_model 64, 4 heads": 3 * 2**20}
OPEN_LIMIT = 2.0


def make(args: list[str], path: Path, root: Path = ROOT) -> None:
    env = dict(os.environ, PYTHONPATH=str(root))
    subprocess.run([sys.executable, "-m", "mhacli", "explain", *args, "-o", str(path)],
                   check=True, env=env, cwd=root)  # (-m puts the folder it runs in first)


def entries(args: list[str]) -> int:
    """Every entry of every table explain prints, counted from its plain text."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    text = subprocess.run([sys.executable, "-m", "mhacli", "explain", *args, "--format",
                           "plain"], check=True, env=env, capture_output=True,
                          text=True).stdout
    count = 0
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        count += sum(len(line.split()) - 1 for line in lines[2:])
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, opened in turn")
    given = parser.parse_args()
    rounds, other = given.rounds, given.against
    chromium = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else \
        shutil.which("chromium")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())  # the machine is shared
    print(f"{machine()} (load average {load})")
    if chromium is None:
        print("no Chromium installed (/usr/bin/chromium): nothing measured")
        return 1
    from playwright.sync_api import sync_playwright

    ok = True
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--headless=new", "--disable-gpu"])
        print(f"Chromium {browser.version}")
        for name, args in PROBLEMS.items():
            builds = {"this": Path(folder) / "page.html"}
            make(args, builds["this"])
            if other is not None:
                builds[str(other)] = Path(folder) / "other.html"
                make(args, builds[str(other)], other.resolve())
            want = entries(args)
            times: dict[str, list[float]] = {b: [] for b in builds}
            for _ in range(rounds):
                for build, path in builds.items():
                    page = browser.new_page()
                    start = time.perf_counter()
                    page.goto(path.as_uri(), wait_until="commit")
                    page.wait_for_function(
                        "() => document.documentElement.dataset.drawn === '1'",
                        polling=10, timeout=60_000)
                    times[build].append(time.perf_counter() - start)
                    cells = page.evaluate("""() => [...document.querySelectorAll('#tables td')]
                        .filter(c => c.textContent !== '').length""")
                    if cells != want:
                        print(f"  {name} ({build}): {cells} entries with text, expected {want}")
                        ok = ok and build != "this"
                    page.close()
            for build, path in builds.items():
                size = path.stat().st_size
                best = min(times[build])
                size_ok, time_ok = size <= LIMITS[name], best <= OPEN_LIMIT
                if build == "this":
                    ok = ok and size_ok and time_ok
                print(f"{name}{'' if other is None else f' [{build}]'}: {size / 1024:,.1f} KiB "
                      f"(limit {LIMITS[name] / 1024:,.0f} KiB: {'met' if size_ok else 'NOT met'}"
                      f"); {want:,} entries, every table's text in {best:.2f} s, best of "
                      f"{rounds} (each: {', '.join(f'{t:.2f}' for t in times[build])}; limit "
                      f"{OPEN_LIMIT:g} s: {'met' if time_ok else 'NOT met'})")
        browser.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
