"""``explain --all-heads`` on a real model's text as a page, in a real headless Chromium:
a map a head (the tokens on its edges, each row's largest weight the brightest), a click
or Enter opening that head's weights, whose numbers are the model's own (transformers'
attention weights) and whose entries open to ``explain --cell``'s arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli import app
from tests.browser import Opened, browser  # noqa: F401  (a fixture)

runner = CliRunner()
TEXT = "When Mary and John went to the store"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from . import hf_reference as hf

    return hf.make_model("llama3", tmp_path_factory.mktemp("llama3") / "m", tokenizer=True)


def _attentions(folder: Path) -> tuple[list[str], np.ndarray]:
    """The model's own attention weights of the text, every layer (L, H, n, n), by
    transformers' eager attention in float64."""
    import torch
    from transformers import AutoTokenizer

    from . import hf_reference as hf

    ids = AutoTokenizer.from_pretrained(str(folder))(TEXT)["input_ids"]
    with torch.no_grad():
        out = hf.load_model(folder)(torch.tensor([ids]), output_attentions=True)
    return ids, np.stack([a[0].double().numpy() for a in out.attentions])


def test_every_head_a_map_that_opens_to_the_models_weights(browser: Any, model: Path,
                                                           tmp_path: Path) -> None:
    base = ["explain", "--checkpoint", str(model), "--text", TEXT, "--all-heads"]
    path = tmp_path / "heads.html"
    r = runner.invoke(app, [*base, "--layer", "all", "-o", str(path)])
    assert r.exit_code == 0 and r.stdout == "", r.output
    r = runner.invoke(app, [*base, "--format", "json"])
    tokens = json.loads(r.stdout)["config"]["tokens"]
    ids, att = _attentions(model)  # (L, H, n, n)
    layers, heads, n = att.shape[0], att.shape[1], att.shape[2]
    assert len(tokens) == n == len(ids) and n <= 16  # a map's cell a weight: no pooling
    top = "rgb(%d, %d, %d)" % tuple(__import__("mhacli.present.tables", fromlist=["_RAMP"])
                                    ._RAMP[-1])
    with Opened(browser, path) as o:
        page = o.page
        page.wait_for_function("() => document.documentElement.dataset.drawn === '1'")
        assert page.locator("section.layer").count() == layers
        assert page.locator("select[name=head]").count() == 0
        for layer in range(layers):
            section = page.locator("section.layer").nth(layer)
            assert section.locator("h2").text_content() == f"layer {layer}"
            maps = section.locator("figure.map")
            assert maps.count() == heads
            for h in range(heads):
                m = maps.nth(h)
                assert m.locator(".ql").all_text_contents() == tokens
                assert m.locator(".kl").all_text_contents() == tokens
                cells = m.locator("i").evaluate_all(
                    "els => els.map(e => getComputedStyle(e).backgroundColor)")
                assert len(cells) == n * n
                for i in range(n):  # each row's largest weight: the top of the ramp
                    assert cells[i * n + int(att[layer, h, i].argmax())] == top, (layer, h, i)
            # closed until clicked: then that head's weights alone, as the model has them
            assert section.locator(".opened figure:visible").count() == 0
            chosen = 1 + layer % heads
            maps.nth(chosen - 1).click()
            shown = section.locator(".opened figure:visible")
            assert shown.count() == 1
            assert shown.locator("table").get_attribute("data-stage") == "weights"
            assert shown.locator("table").get_attribute("data-head") == str(chosen)
            entries = shown.locator("td[data-cell]").evaluate_all(
                "tds => tds.map(td => [td.dataset.cell, td.textContent])")
            assert len(entries) == n * n
            for spec, text in entries:
                _, hh, i, j = spec.split(":")
                assert int(hh) == chosen
                want = att[layer, chosen - 1, int(i) - 1, int(j) - 1]
                assert abs(float(text) - want) <= 0.5e-4 + 1e-6, (layer, spec, text, want)
            assert maps.nth(chosen - 1).get_attribute("aria-expanded") == "true"
            # an entry opens to --cell's arithmetic for that layer
            spec = f"weights:{chosen}:{n}:2"
            shown.locator(f'td[data-cell="{spec}"]').click()
            r = runner.invoke(app, ["explain", "--checkpoint", str(model), "--text", TEXT,
                                    "--layer", str(layer), "--cell", spec, "--format", "plain"])
            lines = r.stdout.rstrip("\n").split("\n")
            k = max(i for i, line in enumerate(lines) if line.startswith("# "))
            assert page.locator("#arithmetic-title").text_content() == lines[k][2:]
            assert page.locator("#arithmetic").text_content() == "\n".join(lines[k + 1:])
        # from the keyboard: Enter on a map opens it (and closes the one open)
        first = page.locator("section.layer").first
        first.locator("figure.map").nth(heads - 1).focus()
        page.keyboard.press("Enter")
        assert first.locator(".opened figure:visible table").get_attribute("data-head") == \
            str(heads)
        assert first.locator(".opened figure:visible").count() == 1
        assert o.errors == [] and all(u.startswith(("file:", "data:", "blob:"))
                                      for u in o.requests)


def test_the_page_of_the_heads_on_stdout_and_what_is_refused(model: Path,
                                                             tmp_path: Path) -> None:
    base = ["explain", "--checkpoint", str(model), "--text", TEXT, "--all-heads"]
    r = runner.invoke(app, [*base, "--format", "html"])
    assert r.exit_code == 0 and r.stdout.startswith("<!DOCTYPE html>")
    assert '"maps":true' in r.stdout
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "heads.json")])
    assert r.exit_code == 2 and "-o FILE.html" in r.stderr
    assert not (tmp_path / "heads.json").exists()
