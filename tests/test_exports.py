"""Exports that render: the SVG drawn by librsvg (and by Chromium, where installed) keeps
every space, so right-aligned numbers stay right-aligned; LaTeX compiles with pdflatex
where it is installed. Each renderer's test is skipped on a machine without it."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli import app

runner = CliRunner()


def _librsvg() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    try:
        return ctypes.CDLL("librsvg-2.so.2"), ctypes.CDLL("libcairo.so.2")
    except OSError:
        pytest.skip("librsvg is not installed")


class _Rect(ctypes.Structure):
    _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_double),
                ("width", ctypes.c_double), ("height", ctypes.c_double)]


def rsvg_pixels(svg: Path) -> np.ndarray:
    """The SVG drawn by librsvg (as rsvg-convert draws it), as a height × width array of
    brightness 0 … 255."""
    rsvg, cairo = _librsvg()
    box = re.search(r'viewBox="([^"]+)"', svg.read_text(encoding="utf-8")).group(1).split()
    width, height = int(float(box[2])), int(float(box[3]))
    rsvg.rsvg_handle_new_from_file.restype = ctypes.c_void_p
    rsvg.rsvg_handle_new_from_file.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    handle = rsvg.rsvg_handle_new_from_file(str(svg).encode(), None)
    assert handle, "librsvg could not read the SVG"
    cairo.cairo_image_surface_create.restype = ctypes.c_void_p
    surface = cairo.cairo_image_surface_create(0, width, height)  # ARGB32
    cairo.cairo_create.restype = ctypes.c_void_p
    cairo.cairo_create.argtypes = [ctypes.c_void_p]
    cr = cairo.cairo_create(surface)
    rsvg.rsvg_handle_render_document.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.POINTER(_Rect), ctypes.c_void_p]
    assert rsvg.rsvg_handle_render_document(handle, cr, ctypes.byref(_Rect(0, 0, width, height)),
                                            None)
    cairo.cairo_surface_flush.argtypes = [ctypes.c_void_p]
    cairo.cairo_surface_flush(surface)
    cairo.cairo_image_surface_get_data.restype = ctypes.POINTER(ctypes.c_ubyte)
    cairo.cairo_image_surface_get_data.argtypes = [ctypes.c_void_p]
    cairo.cairo_image_surface_get_stride.argtypes = [ctypes.c_void_p]
    stride = cairo.cairo_image_surface_get_stride(surface)
    data = np.ctypeslib.as_array(cairo.cairo_image_surface_get_data(surface),
                                 shape=(height, stride)).copy()
    for free, arg in ((cairo.cairo_destroy, cr), (cairo.cairo_surface_destroy, surface)):
        free.argtypes = [ctypes.c_void_p]
        free(arg)
    rgb = data[:, :width * 4].reshape(height, width, 4)[..., :3].astype(int)
    return rgb.max(axis=2)


def _ink_columns(pixels: np.ndarray, top: int, bottom: int) -> np.ndarray:
    """The x of every column with ink (text, even dim) between two rows."""
    return np.flatnonzero((pixels[top:bottom] > 80).any(axis=0))  # the background: 41


def test_librsvg_keeps_the_spaces_that_right_align_a_number(tmp_path: Path) -> None:
    """The last column of the weights holds a 0 (blocked) in the first row and 0.0558 in
    the third: drawn, both end at the column's right edge (librsvg put the 0 at the start
    of its cell when the spaces were no-break spaces)."""
    svg = tmp_path / "view.svg"
    r = runner.invoke(app, ["explain", "--sample", "intro", "--stage", "weights", "--head",
                            "1", "--svg", str(svg)])
    assert r.exit_code == 0, r.output
    pixels = rsvg_pixels(svg)
    text = svg.read_text(encoding="utf-8")
    dx, dy = map(float, re.findall(r'transform="translate\(([\d.]+), ?([\d.]+)\)"', text)[-1])
    cells = [(float(x), float(y)) for x, y in re.findall(
        r'<text[^>]* x="([\d.]+)" y="([\d.]+)"[^>]*>0\.0558</text>', text)]
    x, sat = max(cells)  # 0.0558 in the last column: the row of sat; "the" is two above
    rows = [(int(dy + y - 17), int(dy + y + 4)) for y in (sat - 2 * 24.4, sat)]
    left, right = int(dx + x), int(dx + x + 6 * 12.2)  # the cell, its borders left out
    ends = []
    for top, bottom in rows:
        ink = _ink_columns(pixels[:, left:right], top, bottom)
        assert ink.size, "nothing drawn in the cell"
        ends.append(ink.max())
    # both rows end on a right-aligned number in the last column: the same right edge
    assert abs(ends[0] - ends[1]) < 6, ends


@pytest.mark.parametrize("labels", [None, ["東京", "a&b", "<x>"]])
def test_no_run_of_svg_text_starts_or_ends_with_spaces(tmp_path: Path, labels: list | None
                                                        ) -> None:
    """What both renderers need: each run of text begins at its first character (librsvg
    drops the spaces before it) and is as long as its characters (a browser spreads
    them to fill the length); and every run still starts where Rich put it, on the grid
    of character cells (labels of wide characters and escapes included)."""
    from html import unescape

    from mhacli.cli.terminal import portable_svg

    svg = tmp_path / "view.svg"
    source = ["--sample", "translate"]
    if labels:
        problem = tmp_path / "labels.yaml"
        problem.write_text(
            f"tokens: {json.dumps(labels, ensure_ascii=False)}\nheads: 2\n"
            "x: [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]\n"
            + "".join(f"{w}: [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]]\n"
                      for w in ("w_q", "w_k", "w_v")), encoding="utf-8")
        source = [str(problem)]
    r = runner.invoke(app, ["explain", *source, "--svg", str(svg)])
    assert r.exit_code == 0, r.output
    text = svg.read_text(encoding="utf-8")
    runs = re.findall(r'<text [^>]*?x="([\d.]+)"[^>]*?textLength="([\d.]+)"[^>]*>([^<]*)</text>',
                      text)
    assert len(runs) > 100
    for x, length, content in runs:
        assert not content.startswith("&#160;") and not content.endswith("&#160;"), content
        assert float(length) == pytest.approx(12.2 * len(unescape(content)), abs=0.01), content
        assert float(x) / 12.2 == pytest.approx(round(float(x) / 12.2), abs=1e-6), content
    if labels:
        assert "東京" in text and "a&amp;b" in text and "&lt;x&gt;" in text
    rich = '<text class="a" x="0" y="20" textLength="73.2" clip-path="c">&#160;&#160;0.5&#160;</text>'
    assert portable_svg(rich) == \
        '<text class="a" x="24.4" y="20" textLength="36.6" clip-path="c">0.5</text>'


def png_pixels(path: Path) -> np.ndarray:
    """An 8-bit RGB or RGBA PNG's brightness (max of R, G, B), height × width: enough of
    PNG to read a browser's screenshot."""
    import struct
    import zlib

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", None
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + size
    assert head is not None
    width, height, depth, colour = head[:4]
    assert depth == 8 and colour in (2, 6), head
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.int32)
    prior = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], np.frombuffer(
            raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)], dtype=np.uint8).astype(np.int32)
        row = line.copy()
        if kind == 2:
            row = (line + prior) & 255
        elif kind in (1, 3, 4):  # these look left: byte by byte
            for x in range(stride):
                left = row[x - bpp] if x >= bpp else 0
                up, corner = prior[x], prior[x - bpp] if x >= bpp else 0
                if kind == 1:
                    guess = left
                elif kind == 3:
                    guess = (left + up) // 2
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    guess = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[x] = (line[x] + guess) & 255
        out[y], prior = row, row
    return out.reshape(height, width, bpp)[..., :3].max(axis=2)


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser")
                    is None, reason="Chromium is not installed")
def test_chromium_keeps_numbers_right_aligned(tmp_path: Path) -> None:
    """As for librsvg: a 0 and a 0.0558 in the last column end at the same place."""
    svg, png = tmp_path / "view.svg", tmp_path / "view.png"
    r = runner.invoke(app, ["explain", "--sample", "intro", "--stage", "weights", "--head",
                            "1", "--svg", str(svg)])
    assert r.exit_code == 0, r.output
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    text = svg.read_text(encoding="utf-8")
    box = re.search(r'viewBox="([^"]+)"', text).group(1).split()
    subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox",
                    "--hide-scrollbars", f"--screenshot={png}",
                    f"--window-size={int(float(box[2]))},{int(float(box[3]))}", svg.as_uri()],
                   check=True, capture_output=True, timeout=120)
    pixels = png_pixels(png)
    dx, dy = map(float, re.findall(r'transform="translate\(([\d.]+), ?([\d.]+)\)"', text)[-1])
    cells = [(float(x), float(y)) for x, y in re.findall(
        r'<text[^>]* x="([\d.]+)" y="([\d.]+)"[^>]*>0\.0558</text>', text)]
    x, sat = max(cells)
    left, right = int(dx + x), int(dx + x + 6 * 12.2)
    ends = []
    for y in (sat - 2 * 24.4, sat):
        ink = _ink_columns(pixels[:, left:right], int(dy + y - 17), int(dy + y + 4))
        assert ink.size, "nothing drawn in the cell"
        ends.append(ink.max())
    assert abs(ends[0] - ends[1]) < 6, ends


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("args", [["--sample", "intro"],
                                  ["--sample", "by-hand", "--cell", "scores:2:2:1", "--fractions"],
                                  ["--sample", "llama-tiny", "--cell", "weights:1:3:2"],
                                  ["--sample", "by-hand", "--stage", "scaled", "--scale", "3",
                                   "--fractions", "--cell", "scaled:1:1:2"]])
def test_latex_compiles_with_pdflatex(tmp_path: Path, args: list[str]) -> None:
    r = runner.invoke(app, ["explain", *args, "--format", "latex"])
    assert r.exit_code == 0, r.output
    doc = tmp_path / "view.tex"
    body = r.output if "\\documentclass" in r.output else \
        "\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n" + r.output + \
        "\n\\end{document}\n"
    doc.write_text(body, encoding="utf-8")
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "view.pdf").stat().st_size > 1000


def test_an_export_leaves_what_a_pipe_gets_alone(tmp_path: Path) -> None:
    """Piped, stdout is the same with --svg/--html as without; the files hold the
    colour terminal's view."""
    args = ["explain", "--sample", "cat", "--stage", "weights"]
    plain = runner.invoke(app, args)
    saved = runner.invoke(app, args + ["--svg", str(tmp_path / "v.svg"), "--html",
                                       str(tmp_path / "v.html")])
    assert plain.exit_code == saved.exit_code == 0
    assert saved.output == plain.output
    assert "<svg" in (tmp_path / "v.svg").read_text(encoding="utf-8")
    assert "heat map" in (tmp_path / "v.html").read_text(encoding="utf-8")
