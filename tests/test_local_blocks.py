"""Block-local attention with global tokens (``local_blocks: {size, globals, shift}``,
PEGASUS-X's encoder): the first G rows of x are global, seeing every key and seen by
every query; the other rows in blocks of B shifted by P, a token seeing its own block.
Checked against the plain-loop reference given the mask the definition makes (written
here from the contract's words, not from mhacli), on the fast path in small blocks, the
traced path, the tiles, --cell's reason, the backward pass against PyTorch's autograd,
a problem file written and read back, and bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import fastpath

from .reference import reference

runner = CliRunner()


def block_mask(n: int, size: int, globals_: int, shift: int) -> np.ndarray:
    """1 where row i may see row j: either is global, or both tokens in one block."""
    out = np.zeros((n, n), dtype=int)
    for i in range(n):
        for j in range(n):
            if i < globals_ or j < globals_:
                out[i, j] = 1
            else:
                out[i, j] = (i - globals_ + shift) // size == (j - globals_ + shift) // size
    return out


def problem(n: int, seed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d = 6
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 8)), w_v=rng.standard_normal((d, 8)),
                w_o=rng.standard_normal((8, 5)), b_q=rng.standard_normal(8),
                b_o=rng.standard_normal(5), heads=2, **extra)


@pytest.mark.parametrize("size, globals_, shift", [(4, 3, 0), (4, 3, 2), (3, 0, 1),
                                                   (1, 2, 0), (20, 1, 0)])
def test_the_blocks_are_the_mask_the_definition_makes(size: int, globals_: int, shift: int,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    n = 13
    kw = problem(n, local_blocks={"size": size, "globals": globals_, "shift": shift})
    mask = block_mask(n, size, globals_, shift)
    lists = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    want = np.array(reference(**{**lists, "mask": mask.tolist(), "local_blocks": None})["output"])
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    assert (np.isneginf(tr["masked"][1]) == (mask == 0)).all()
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 8 * 2 * n)  # blocks of a row or two
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    tiled = mhacli.trace(**kw, tiles=(3, 2))
    for block in tiled.kernels["tiles"]:
        for step in block.steps:
            assert step.skipped == (not mask[np.ix_(list(block.rows), list(step.keys))].any())


def test_the_backward_pass_agrees_with_autograd() -> None:
    torch = pytest.importorskip("torch")
    n, size, globals_, shift = 9, 4, 2, 2
    kw = problem(n, seed=3, local_blocks=f"{size}:{globals_}:{shift}")
    tr = mhacli.trace(**kw, backward=True)
    t = {k: torch.tensor(kw[k], requires_grad=True) for k in ("x", "w_q", "w_k", "w_v", "w_o",
                                                             "b_q", "b_o")}
    q = (t["x"] @ t["w_q"] + t["b_q"]).reshape(n, 2, 4).transpose(0, 1)
    k = (t["x"] @ t["w_k"]).reshape(n, 2, 4).transpose(0, 1)
    v = (t["x"] @ t["w_v"]).reshape(n, 2, 4).transpose(0, 1)
    z = q @ k.transpose(-1, -2) / 2.0
    blocked = torch.tensor(block_mask(n, size, globals_, shift) == 0)
    a = torch.softmax(z.masked_fill(blocked, float("-inf")), dim=-1)
    out = (a @ v).transpose(0, 1).reshape(n, 8) @ t["w_o"] + t["b_o"]
    out.sum().backward()
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name in ("x", "w_q", "w_k", "w_v", "w_o", "b_q"):
        np.testing.assert_allclose(tr[f"d_{name}"], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-10, err_msg=name)


def test_cell_says_which_blocks_and_the_formula_names_the_globals() -> None:
    r = runner.invoke(app, ["explain", "--random", "--tokens", "7", "--local-blocks", "2:2:1",
                            "--cell", "masked:1:3:6", "--format", "plain"])
    assert r.exit_code == 0, r.output
    # t3 is the first token (block ⌊(0 + 1) / 2⌋ + 1 = 1), t6 the fourth (block 3)
    assert "masked₁[t3, t6] = −∞  (block-local attention (t6 is in block 3 of 2 tokens, " \
        "the query in block 1; only the 2 global rows are seen from every block) blocks t6 " \
        "for the query t3)" in r.stdout
    assert "local blocks of 2 shifted by 1 (the first 2 rows global, seen by and seeing " \
        "every row): a token sees its own block" in r.stdout
    r = runner.invoke(app, ["explain", "--random", "--tokens", "7", "--local-blocks", "2:2:1",
                            "--format", "json", "--stage", "output"])
    assert '"local_blocks": {"size": 2, "globals": 2, "shift": 1}' in r.stdout


def test_a_problem_file_keeps_the_blocks_and_bad_values_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "7", "--local-blocks", "3:2:1", "--seed",
                            "3", "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert "\nlocal_blocks: {size: 3, globals: 2, shift: 1}\n" in path.read_text()
    p = mhacli.load(path)
    assert (p.config.local_blocks, p.config.block_globals, p.config.block_shift) == (3, 2, 1)
    for bad, words in (("{size: 3, globals: 2, shift: 3}",
                        "local_blocks.shift must be less than the block size 3, got 3"),
                       ("{size: 3, globals: 7}", "local_blocks.globals is 7: the first 7 rows "
                        "of x would be global tokens, and x has 7 rows"),
                       ("{size: 0}", "local_blocks.size must be a whole number of 1 or more, "
                        "got 0"),
                       ("{size: 2, globals: -1}", "local_blocks.globals must be a whole number "
                        "of 0 or more, got -1"),
                       ("2:1:x", "local_blocks.shift must be a whole number of 0 or more, got "
                        "'x'"),
                       ("{size: 2, global: 1}", "local_blocks takes size (and globals, shift), "
                        "got global"),
                       ("2:1:1:1", "local_blocks takes B, B:G or B:G:P")):
        wrong = tmp_path / "bad.yaml"
        wrong.write_text(path.read_text().replace("{size: 3, globals: 2, shift: 1}", bad))
        r = runner.invoke(app, ["run", str(wrong)])
        assert r.exit_code == 2 and words in r.stderr, (bad, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ")
    with pytest.raises(mhacli.MhaError, match="local_blocks is self-attention"):
        mhacli.attention(**problem(5, x_kv=np.ones((5, 6)), local_blocks=2))


def test_decoding_keeps_the_cache_and_blocks_what_the_blocks_block() -> None:
    """With the causal mask too, each step's row is the plain trace's: the cache holds
    every position up to the step, those of another block blocked as they are scored."""
    kw = problem(9, local_blocks="3:2:1", mask="causal", decode=True)
    tr = mhacli.trace(**kw)
    steps = tr.kernels["decode"]
    assert [len(st.positions) for st in steps] == list(range(1, 10))
    np.testing.assert_allclose(np.array([st.output for st in steps]), tr["output"],
                               rtol=1e-12, atol=1e-12)
    mask = block_mask(9, 3, 2, 1) * np.tri(9, dtype=int)
    assert (np.isneginf(tr["masked"][0]) == (mask == 0)).all()


def test_check_names_the_blocks_left_out(tmp_path: Path) -> None:
    """A student who kept the causal mask and forgot the blocks is told so."""
    import yaml

    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--tokens", "6", "--local-blocks",
                            "2:1:0", "--mask", "causal", "--answers", "--stage", "scaled",
                            "--stage", "masked", "--seed", "5", "-o", str(key)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(key.read_text())
    scaled = np.array(doc["answers"]["scaled"], dtype=float)
    causal_only = np.where(np.tri(6, dtype=bool), scaled, -np.inf)
    doc["answers"] = {"scaled": doc["answers"]["scaled"],
                      "masked": [[[("-inf" if np.isneginf(v) else float(v)) for v in row]
                                  for row in head] for head in causal_only]}
    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump(doc))
    r = runner.invoke(app, ["check", str(student), "--format", "plain"])
    assert r.exit_code == 1, r.output
    assert "block-local attention is left out: the other rules block as they should" in r.stdout
