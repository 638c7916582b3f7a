"""At home in a terminal and in a pipe: colour, broken pipes, large matrices, exports, help."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .cases import close
from .reference import reference

runner = CliRunner()
MHA = [sys.executable, "-m", "mhacli"]
ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")}
    env.update(TERM="xterm-256color", PAGER="cat")  # a pager would wait for keys
    env.update(extra)
    return env


def in_terminal(args: list[str], columns: int = 100, rows: int = 50, **env: str) -> str:
    """Run mha with a pseudo-terminal (100 columns by default) as stdin, stdout and
    stderr; what it wrote, escape codes and all."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(MHA + args, stdin=slave, stdout=slave, stderr=slave,
                            env=_env(**env), close_fds=True, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode()


def piped(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(MHA + args, capture_output=True, text=True, env=_env(**env),
                          stdin=subprocess.DEVNULL, timeout=60)


def test_colour_and_boxes_only_in_a_terminal() -> None:
    term = in_terminal(["explain", "--stage", "weights", "--head", "1"])
    assert "\x1b[" in term and "╭" in term and "heat map" in term
    pipe = piped(["explain", "--stage", "weights", "--head", "1"])
    assert pipe.returncode == 0 and "\x1b" not in pipe.stdout and "╭" not in pipe.stdout
    assert "heat map" not in pipe.stdout  # no colour, so no legend of colours


def test_no_color_means_no_escape_codes_at_all() -> None:
    out = in_terminal(["explain", "--stage", "weights", "--head", "1"], NO_COLOR="1")
    assert "\x1b[" not in out and "╭" not in out
    assert "0.9442" in out


def test_force_color_colours_a_pipe() -> None:
    out = piped(["explain", "--stage", "x"], FORCE_COLOR="1").stdout
    assert "\x1b[" in out and "╭" in out


def test_broken_pipe_ends_quietly() -> None:
    for args in (["explain", "--sample", "hopkins"], ["run", "--random", "--tokens", "3000",
                                                      "--d-model", "64"]):
        script = " ".join(MHA + args) + ' | head -1; echo "status ${PIPESTATUS[0]}" >&2'
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              env=_env(), timeout=120)
        assert proc.stdout.count("\n") == 1
        assert proc.stderr in ("status 141\n", "status 0\n"), proc.stderr  # 0: all written


def test_stdin_terminal_gets_a_hint_not_a_wait() -> None:
    out = in_terminal(["run", "-"])
    assert "Error: reading the problem from standard input, which is a terminal" in out


def test_json_is_strict_json_even_with_nan_rows() -> None:
    r = runner.invoke(app, ["explain", "--sample", "by-hand", "--mask", "1 0 0;0 0 0;1 1 1",
                            "--masked-row", "nan", "--format", "json"])
    strict = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert strict["stages"]["weights"][0][1] == [None, None, None]
    r = runner.invoke(app, ["run", "--sample", "by-hand", "--mask", "1 0 0;0 0 0;1 1 1",
                            "--masked-row", "nan", "--format", "json"])
    assert json.loads(r.stdout, parse_constant=pytest.fail)["output"][1] == [None] * 4


def test_large_matrix_summarised_in_a_terminal_full_on_request() -> None:
    summary = in_terminal(["explain", "--sample", "hopkins", "--stage", "x"])
    assert "summarised: showing columns 1–4 and 509–512 of 512; --full shows every number" \
        in summary
    assert "…" in summary and " 256 " not in summary
    full = re.sub(r"\x1b\[[0-9;]*m", "", in_terminal(["explain", "--sample", "hopkins",
                                                      "--stage", "x", "--full"]))
    headers = {int(t) for line in full.splitlines() for t in line.replace("│", " ").split()
               if t.isdigit()}
    assert set(range(1, 513)) <= headers and "summarised" not in full
    assert max(len(line) for line in full.splitlines()) <= 100


def test_plain_and_pipes_print_every_number_in_column_blocks() -> None:
    x = mhacli.load(mhacli.io.samples.sample_path("hopkins")).inputs["x"]
    out = runner.invoke(app, ["explain", "--sample", "hopkins", "--stage", "x", "--format",
                              "plain", "--precision", "4"]).stdout
    numbers = [t for line in out.splitlines() if not line.startswith("#")
               for t in line.split()[1:] if "." in t]
    assert len(numbers) == x.size  # all 9 × 512, none cut
    assert max(len(line) for line in out.splitlines() if not line.startswith("#")) <= 100
    piped_rich = runner.invoke(app, ["explain", "--sample", "hopkins", "--stage", "x"]).stdout
    assert "summarised" not in piped_rich and f"{x[8, 511]:.4f}" in piped_rich


def test_svg_and_html_exports(tmp_path: Path) -> None:
    svg, html = tmp_path / "view.svg", tmp_path / "view.html"
    r = runner.invoke(app, ["explain", "--stage", "weights", "--head", "1", "--svg", str(svg),
                            "--html", str(html)])
    assert r.exit_code == 0
    assert svg.read_text().lstrip().startswith("<svg") and "weights" in svg.read_text()
    page = html.read_text()
    assert "<html" in page and "0.9442" in page and "background-color" in page  # heat map


def test_help_teaches() -> None:
    top = runner.invoke(app, ["--help"]).stdout
    for word in ("explain", "run", "check", "generate", "samples", "mha explain --help"):
        assert word in top
    for cmd in ("explain", "run", "check", "generate", "samples"):
        text = runner.invoke(app, [cmd, "--help"]).stdout
        assert text.count("mha ") >= 3, cmd  # the usage line and at least two examples


def test_version_and_completion() -> None:
    assert piped(["--version"]).stdout == f"mha {mhacli.__version__}\n"
    script = piped(["--show-completion", "bash"]).stdout
    assert "_MHA_COMPLETE" in script or "complete" in script
    proc = subprocess.run(MHA + [], capture_output=True, text=True, env=_env(
        _MHA_COMPLETE="complete_bash", COMP_WORDS="mha ex", COMP_CWORD="1"), timeout=60)
    assert "explain" in proc.stdout


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    r = piped(["run", "--random", "--tokens", "4000", "--d-model", "256", "--heads", "4"])
    assert r.returncode == 0 and r.stderr == ""


def test_progress_callback_counts_query_rows() -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3000, 16)), rng.standard_normal((16, 16))
    seen: list[tuple[int, int]] = []
    mhacli.attention(x, w, w, w, heads=4, progress=lambda d, t: seen.append((d, t)))
    done, total = zip(*seen)
    assert done[-1] == total[-1] and list(done) == sorted(done) and len(set(total)) == 1


# --------------------------------------------------------------------------- PyTorch weights


def _state_dict(rng: np.random.Generator, e: int, kdim: int | None = None) -> dict:
    """What torch.nn.MultiheadAttention(e, h).state_dict() holds, as NumPy arrays."""
    sd = {"in_proj_bias": rng.standard_normal(3 * e), "out_proj.weight": rng.standard_normal((e, e)),
          "out_proj.bias": rng.standard_normal(e)}
    if kdim is None:
        sd["in_proj_weight"] = rng.standard_normal((3 * e, e))
    else:
        sd.update(q_proj_weight=rng.standard_normal((e, e)),
                  k_proj_weight=rng.standard_normal((e, kdim)),
                  v_proj_weight=rng.standard_normal((e, kdim)))
    return sd


def test_state_dict_is_converted_from_x_w_transposed(tmp_path: Path) -> None:
    """No torch needed: the conversion against the reference, written out by hand."""
    rng = np.random.default_rng(0)
    e, h = 6, 3
    sd = _state_dict(rng, e)
    x = rng.standard_normal((4, e))
    np.savez(tmp_path / "m.npz", x=x, heads=h, **{"attn." + k: v for k, v in sd.items()})
    w = sd["in_proj_weight"]
    b = sd["in_proj_bias"]
    expected = reference(x, w[:e].T, w[e:2 * e].T, w[2 * e:].T, heads=h, b_q=b[:e],
                         b_k=b[e:2 * e], b_v=b[2 * e:], w_o=sd["out_proj.weight"].T,
                         b_o=sd["out_proj.bias"])["output"]
    close(mhacli.attention(**mhacli.load(tmp_path / "m.npz").inputs), expected)
    # without heads in the file, --heads gives it; with neither, an error says so
    np.savez(tmp_path / "n.npz", x=x, **sd)
    r = runner.invoke(app, ["run", str(tmp_path / "n.npz"), "--heads", "3", "-f", "json"])
    close(json.loads(r.stdout)["output"], expected)
    r = runner.invoke(app, ["run", str(tmp_path / "n.npz")])
    assert r.exit_code == 2 and "does not record the number of heads" in r.stderr


try:
    import torch
except ImportError:
    torch = None


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("kdim", [None, 5])
def test_pytorch_module_round_trip(tmp_path: Path, kdim: int | None) -> None:
    """The README's three lines, then mha's output equals the module's own."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(embed_dim=8, num_heads=2, kdim=kdim, vdim=kdim).double()
    x = torch.randn(5, 8, dtype=torch.float64)
    kv = torch.randn(3, kdim, dtype=torch.float64) if kdim else x
    arrays = {"x": x.numpy()} | ({"x_kv": kv.numpy()} if kdim else {})
    np.savez(tmp_path / "mha.npz", heads=mha.num_heads, **arrays,
             **{k: v.detach().numpy() for k, v in mha.state_dict().items()})
    expected = mha(x, kv, kv, need_weights=False)[0].detach().numpy()
    r = runner.invoke(app, ["run", str(tmp_path / "mha.npz"), "--format", "npy"])
    close(np.load(io.BytesIO(r.stdout_bytes)), expected, rel=1e-12)


def test_a_broken_pipe_mid_write_exits_141_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the reader goes away mid-output: no traceback, the shell's SIGPIPE status."""
    from mhacli.present import text as formats

    def gone(*_: object, **__: object) -> bytes:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(formats, "write_output", gone)
    r = runner.invoke(app, ["run"])
    assert r.exit_code == 141 and r.stderr == ""


def test_a_tall_view_goes_through_the_pager_in_a_terminal_only() -> None:
    pager = f"{sys.executable} -c \"import sys; print('PAGED', len(sys.stdin.read().splitlines()))\""
    out = in_terminal(["explain", "--sample", "cat"], PAGER=pager)
    assert "PAGED" in out and "weights" not in out  # all of it went to the pager
    out = in_terminal(["explain", "--sample", "cat", "--no-pager"], PAGER=pager)
    assert "PAGED" not in out and "weights" in out
    out = in_terminal(["explain", "--sample", "intro", "--stage", "x"], PAGER=pager)
    assert "PAGED" not in out and "the" in out  # it fits: printed as it is
    assert "PAGED" not in piped(["explain", "--sample", "cat"], PAGER=pager).stdout


def test_heat_map_scales_and_blocked_cells() -> None:
    out = piped(["explain", "--sample", "intro", "--stage", "weights", "--head", "1"],
                FORCE_COLOR="1", COLUMNS="120").stdout
    assert "the same scale for every row" in out and "blocked cells unshaded" in out
    blocked = re.findall(r"\x1b\[2m +0\x1b\[0m", out)  # dim, no background: the mask's zeros
    assert len(blocked) == 3  # the 3 cells above the diagonal of a causal 3 × 3
    words = lambda o: " ".join(re.sub(r"\x1b\[[0-9;]*m", "", o).split())  # noqa: E731
    out = piped(["explain", "--sample", "intro", "--stage", "weights", "--heat", "row"],
                FORCE_COLOR="1", COLUMNS="120").stdout
    assert "shaded within each row (--heat row)" in words(out)
    out = piped(["explain", "--sample", "intro", "--stage", "weights", "--sinks", "0 0"],
                FORCE_COLOR="1", COLUMNS="120").stdout
    assert "rows sum to less than 1 (the sinks)" in words(out)


@pytest.mark.parametrize("sample, stage, i, j", [("hopkins", "scores", 2, 3),
                                                  ("cat", "weights", 3, 4)])
def test_a_summarised_table_keeps_the_entry_worked_out(sample: str, stage: str, i: int,
                                                       j: int) -> None:
    """At 60 columns the tables show their edges; the worked entry's column stays, with
    its key named in the header and its value in the row."""
    out = re.sub(r"\x1b\[[0-9;]*m", "", in_terminal(
        ["explain", "--sample", sample, "--cell", f"{stage}:1:{i}:{j}", "--stage", stage,
         "--head", "1", "--no-pager"], columns=60))
    prob = mhacli.load(sample)
    value = f"{mhacli.trace(**prob.inputs)[stage][0, i - 1, j - 1]:.4f}"
    tables = [line for line in out.splitlines() if line.startswith("│")]
    header = next(line for line in tables if prob.tokens[j - 1] in line)  # its key
    assert tables.index(header) == 0 or sample == "cat"  # cat: its softmax parts first
    assert any(value in line for line in tables), out


def test_an_export_from_a_terminal_through_the_pager_holds_the_view(tmp_path: Path) -> None:
    """In a terminal the view goes through the pager (captured, which Rich does not
    record): the SVG is drawn aside and still holds every table."""
    svg = tmp_path / "view.svg"
    in_terminal(["explain", "--stage", "weights", "--head", "1", "--svg", str(svg)])
    assert svg.read_text(encoding="utf-8").count("<text") > 10


def test_wrap_cells_counts_wide_characters_and_keeps_words() -> None:
    from rich.cells import cell_len

    from mhacli.present.wrap import wrap_cells

    text = "    row 1 (吾輩は猫である名前はまだ無い), column 1 (1): wrote 9, expected 8"
    lines = wrap_cells(text, 40, "      ")
    assert all(cell_len(line) <= 40 for line in lines) and len(lines) > 1
    assert lines[0].startswith("    row") and all(ln.startswith("      ") for ln in lines[1:])
    assert " ".join(ln.strip() for ln in lines) == text.strip()
    assert wrap_cells("✓ scores   all 18 cells correct", 40) == ["✓ scores   all 18 cells correct"]
    long = wrap_cells("x" * 70, 40, "  ")
    assert [cell_len(ln) for ln in long] == [40, 32]


@pytest.mark.parametrize("columns", [40, 45, 50])
def test_a_worked_entry_never_makes_a_table_wider_than_the_window(columns: int) -> None:
    from rich.cells import cell_len

    out = re.sub(r"\x1b\[[0-9;]*m", "", in_terminal(
        ["explain", "--sample", "hopkins", "--cell", "weights:4:1:2", "--no-pager"], columns))
    assert max(cell_len(line.rstrip("\r")) for line in out.split("\n")) <= columns
