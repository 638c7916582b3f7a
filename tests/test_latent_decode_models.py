"""A real MLA layer decoded token by token: mha's decoding steps (`--decode`: the latent
cache, the absorbed query, each step's output) against the model's own attention module
run one token at a time with its own cache (transformers' DynamicCache), as a model
generates. Tiny random DeepSeek-V2 and -V3 checkpoints (queries compressed and not);
1e-5 relative (the models build RoPE's cos and sin and their norms in float32).
Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402

from mhacli.engine import traced  # noqa: E402
from mhacli.engine.decoding import decode  # noqa: E402
from mhacli.io.on_model import load_checkpoint  # noqa: E402

from .test_latent_models import build  # noqa: E402

CASES = {
    "deepseek_v3": ("deepseek_v3", "DeepseekV3ForCausalLM", {}),
    "deepseek_v2-no-q-latent": ("deepseek_v2", "DeepseekV2ForCausalLM", {"q_lora_rank": None}),
}
TOKENS = 5


def model_steps(folder: Path, model_class: str, x: np.ndarray) -> list[np.ndarray]:
    """Layer 0's attention output for each token of ``x`` (n × d_model), fed one at a
    time with the model's own cache: (d_model,) a step."""
    model = getattr(transformers, model_class).from_pretrained(folder).double().eval()
    attn = model.model.layers[0].self_attn
    cache = transformers.DynamicCache(config=model.config)
    out = []
    with torch.no_grad():
        for t in range(len(x)):
            hidden = torch.from_numpy(x[t:t + 1])[None]  # (1, 1, d_model)
            pos = torch.tensor([[t]])
            pe = model.model.rotary_emb(hidden, pos)
            y, _ = attn(hidden_states=hidden, position_embeddings=pe, attention_mask=None,
                        cache=cache, cache_position=torch.tensor([t]))
            out.append(y[0, 0].numpy())
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoding_equals_the_models_own_cache(case: str, tmp_path: Path) -> None:
    model_type, model_class, over = CASES[case]
    folder = build(model_type, model_class, tmp_path / case, **over)
    prob = load_checkpoint(folder, 0, tokens=TOKENS, seed=3).with_overrides(decode=True,
                                                                            mask="causal")
    steps = decode(traced(prob.prepared))
    assert len(steps) == TOKENS
    theirs = model_steps(folder, model_class, np.asarray(prob.inputs["x"], dtype=np.float64))
    c = prob.config
    for t, (st, want) in enumerate(zip(steps, theirs), start=1):
        np.testing.assert_allclose(st.output, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
        # the cache holds the latent: t positions of r_kv + d_R numbers, not H·(d_k + d_v)
        assert st.latent_cache.shape == (t, c.r_kv + c.d_rope)
        assert st.cache_bytes == t * (c.r_kv + c.d_rope) * 8
        assert st.cache_bytes_mha == t * 2 * c.heads * c.d_v * 8
        # the absorbed query scores the latent cache as the plain query scores the keys
        absorbed = st.absorbed_q @ st.latent_cache.T / c.scale  # (H, t)
        np.testing.assert_allclose(absorbed, st.scores, rtol=1e-9, atol=1e-12)
