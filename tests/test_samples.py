"""Every bundled sample loads, runs, and matches the reference."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.io.problem import load_sample
from mhacli.io.samples import sample_names

from .cases import close
from .reference import reference

runner = CliRunner()


def test_at_least_the_promised_samples() -> None:
    assert {"intro", "cat", "causal", "translate", "hopkins", "by-hand", "gqa", "rope", "alibi",
            "llama-tiny"} <= set(sample_names())


@pytest.mark.parametrize("name", sample_names())
def test_sample_runs_and_matches_reference(name: str) -> None:
    p = load_sample(name)
    out = mhacli.attention(**p.inputs)
    if name == "hopkins":  # 512 wide: the loop reference is slow; check one head's weights
        tr = mhacli.trace(**p.inputs)
        x, w_q, w_k = (p.inputs[k] for k in ("x", "w_q", "w_k"))
        q1, k1 = x @ w_q[:, :64], x @ w_k[:, :64]
        z = q1 @ k1.T / 8.0
        a = np.exp(z - z.max(axis=1, keepdims=True))
        close(tr["weights"][0], a / a.sum(axis=1, keepdims=True))
        assert out.shape == (9, 512) and tr.config.heads == 8 and tr.config.d_k == 64
    elif p.inputs.get("indexer") is not None:  # sparse MLA: test_sparse's loop keeps the
        from .test_sparse import by_hand as keeps, keep_matrix  # keys; MLA with them as mask

        inputs = dict(p.inputs)
        ix = {k: np.asarray(v) if isinstance(v, list) else v
              for k, v in inputs.pop("indexer").items()}
        d_i = ix["w_k"].shape[1]  # the index heads' width; MLA's d_R: w_dkv's past r_kv
        sizes = (ix["w_weights"].shape[1], d_i,
                 np.shape(inputs["w_dkv"])[1] - len(inputs["kv_latent_norm"]))
        _, kept = keeps(inputs, ix, sizes=sizes)
        keep = keep_matrix(kept, len(inputs["x"]))
        assert (keep.sum(axis=1) < np.arange(1, len(keep) + 1)).any()  # keys dropped
        close(out, mhacli.attention(**{**inputs, "mask": keep}))
    elif p.inputs.get("w_dkv") is not None:  # MLA: the loop written in test_latent
        from .test_latent import by_hand

        c = p.config
        close(out, by_hand(dict(p.inputs), c.heads, c.d_k - c.d_rope, c.d_rope,
                           eps=c.latent_eps, style=c.rope))
    else:
        close(out, reference(**p.inputs)["output"])
    for cmd in (["run", "--sample", name], ["explain", "--sample", name, "--format", "plain"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0, r.output


def test_samples_match_their_descriptions() -> None:
    assert load_sample("translate").inputs["x"].shape[0] > load_sample("translate").inputs["x_kv"].shape[0]
    assert load_sample("causal").inputs["mask"] == "causal"
    assert load_sample("causal").inputs["heads"] == 2
    assert load_sample("cat").tokens == tuple("the cat jumped over the lazy dog".split())
    c = load_sample("llama-tiny").config  # RoPE + GQA + causal + window
    assert (c.rope, c.kv_heads, c.heads, c.mask, c.window) == ("half", 2, 4, "causal", 3)
    assert load_sample("gqa").config.groups == 2 and load_sample("rope").config.rope == "half"
    assert load_sample("alibi").config.alibi
    hand = load_sample("by-hand").inputs
    for key in ("x", "w_q", "w_k", "w_v"):
        assert np.all(hand[key] == np.round(hand[key])) and np.abs(hand[key]).max() <= 2
