"""The rules a family's record names (``family.Family``): how a layer turns its queries
and keys (RoPE, or none on a NoPE layer) and what the scores are divided by (which layers
slide and by how much: ``windows.py``). Each is written from the family's modeling code
and config class in transformers, and each says in a few words what it does (``said``:
the README's table of families is made from these words, so it cannot drift from what is
read).
"""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

from ..errors import shown
from .reading import Reader, rope_of

Window = Callable[[Reader], "tuple[int | None, str | None]"]  # this layer's window, type
Rope = Callable[[Reader, int, "str | None"], "dict[str, Any] | None"]  # None: no RoPE here
Scale = Callable[[Reader, int], float]  # (reader, d_k) -> s, the divisor of the scores
F = TypeVar("F", bound=Callable[..., Any])


def said(words: str) -> Callable[[F], F]:
    """A rule's words for the table of families."""
    def mark(rule: F) -> F:
        rule.said = words  # type: ignore[attr-defined]
        return rule
    return mark


def words(rule: Any) -> str:
    return getattr(rule, "said", "")


# --------------------------------------------------------------------------- RoPE


def rope(partial_key: str | None = "partial_rotary_factor", partial_default: float = 1.0,
         aliases: dict[str, str] | None = None, default_base: float = 10000.0,
         also_read: tuple[str, ...] = (), style: str = "half",
         outside: tuple[str, ...] = (), same_for_text: tuple[str, ...] = ()) -> Rope:
    """RoPE from either spelling of the config (``reading.rope_of``): the base, scaling
    and the share of each head turned; ``style`` pairs (i, i + dims/2) or (2i, 2i + 1)."""
    share = {0.5: "half", 0.25: "a quarter"}.get(partial_default, f"{partial_default:g}")
    @said("RoPE" + {"interleaved": " (interleaved pairs)", "half-reversed": " (each pair "
                    "turned the other way)"}.get(style, "")
          + (f" over {share} of each head" if partial_default != 1 else ""))
    def read(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
        for key in also_read:
            r.get(key)
        return rope_of(r, d, partial_key=partial_key, partial_default=partial_default,
                       aliases=aliases, default_base=default_base, style=style,
                       layer_type=layer_type, outside=outside, same_for_text=same_for_text)
    return read


@said("RoPE, a base of its own on the sliding layers")
def gemma3_rope(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
    """Gemma 3: the sliding layers turn by a base of their own (rope_local_base_freq in
    transformers 4, unscaled; rope_parameters nested by layer type in transformers 5)."""
    r.get("rope_local_base_freq")
    nested = r.get("rope_parameters")
    if isinstance(nested, dict) and "sliding_attention" in nested:
        return rope_of(r, d, layer_type=layer_type or "full_attention")
    if layer_type == "sliding_attention":
        base = r.number("rope_local_base_freq", 10000.0)
        r.get("rope_theta"), r.get("rope_scaling")
        r.note("rope", "config rope_local_base_freq (a sliding layer)")
        return {"style": "half", "base": base, "dims": d}
    return rope_of(r, d, default_base=1000000.0)


@said("no RoPE (no position inside the attention)")
def no_rope(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
    """A family whose attention turns nothing (Jamba: the Mamba layers carry the order)."""
    r.note("rope", "none: this family's attention has no positions of its own")
    return None


def nope_on(when: Callable[[Reader, str | None], "str | None"], where: str,
            turning: Rope | None = None) -> Rope:
    """RoPE (``turning``, Llama's by default) except on the layers where ``when`` gives a
    reason not to turn (a NoPE layer), which it says; ``where`` names those layers."""
    turning = turning or rope()

    @said(f"{words(turning)}, none on {where}")
    def read(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
        why = when(r, layer_type)
        if why is None:
            return turning(r, d, layer_type)
        for key in ("rope_parameters", "rope_theta", "rope_scaling", "partial_rotary_factor"):
            r.get(key)  # (this layer turns nothing: the RoPE keys are the other layers')
        r.note("rope", f"none on this layer: {why}")
        return None
    return read


def listed_nope(key: str, interval_key: str) -> Callable[[Reader, str | None], str | None]:
    """SmolLM3's and Llama 4's list: ``key``[i] is 0 on a NoPE layer (else the config
    class's rule, every ``interval_key``-th layer, counting from 1)."""
    def when(r: Reader, layer_type: str | None) -> str | None:
        flags = r.get(key)
        every = r.count(interval_key, 4) or 4
        if flags is None:
            flag = int((r.layer + 1) % every != 0)
            where = f"config {interval_key} = {every}"
        elif not isinstance(flags, list) or r.layer >= len(flags) or flags[r.layer] not in (0, 1):
            raise r.error(key, f"{shown(flags)}: expected a 0 or 1 for each layer")
        else:
            flag, where = flags[r.layer], f"config {key}[{r.layer}] is 0"
        return None if flag else where
    return when


def theta_by_layer(key: str) -> Rope:
    """Granite SWA's per-layer base: ``key``[i] is this layer's RoPE base, 0 for a NoPE
    layer (the rest of rope_parameters as the model's)."""
    plain = rope()

    @said(f"RoPE with a base per layer ({key}), none where it is 0")
    def read(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
        bases = r.get(key)
        if bases is None:
            return plain(r, d, layer_type)
        if not isinstance(bases, list) or r.layer >= len(bases) or \
                isinstance(bases[r.layer], bool) or not isinstance(bases[r.layer], (int, float)) \
                or bases[r.layer] < 0:
            raise r.error(key, f"{shown(bases)}: expected a base (or 0) for each layer")
        if bases[r.layer] == 0:
            r.get("rope_parameters"), r.get("rope_theta"), r.get("rope_scaling")
            r.note("rope", f"none on this layer: config {key}[{r.layer}] is 0")
            return None
        spec = dict(plain(r, d, layer_type) or {})
        spec["base"] = float(bases[r.layer])
        r.note("rope", f"config {key}[{r.layer}] (the base), rope_parameters")
        return spec
    return read


def rope_if(key: str, value: str) -> Callable[[Reader, str | None], str | None]:
    """Granite 4's rule: RoPE when ``key`` is ``value`` (position_embedding_type: rope),
    none otherwise."""
    def when(r: Reader, layer_type: str | None) -> str | None:
        given = r.get(key)
        return None if given == value else f"config {key} is {shown(given)}"
    return when


def theta_given(r: Reader, layer_type: str | None) -> str | None:
    """OLMo hybrid's rule: RoPE only when rope_parameters gives a rope_theta (its released
    checkpoints set none, and turn nothing)."""
    params = r.get("rope_parameters")
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return None
    return "config rope_parameters gives no rope_theta"


def dense_prefix_rope(r: Reader, layer_type: str | None) -> str | None:
    """Cohere 2 MoE's rule: the sliding layers turn, and so do the dense layers before the
    experts begin when prefix_dense_sliding_window_pattern is 1; the rest are NoPE."""
    if layer_type == "sliding_attention":
        return None
    kinds = r.get("mlp_layer_types")
    pattern = r.count("prefix_dense_sliding_window_pattern", 1)
    dense = kinds[r.layer] == "dense" if isinstance(kinds, list) and r.layer < len(kinds) \
        else r.layer < (r.count("first_k_dense_replace", 0) or 0)
    if dense and pattern == 1:
        return None
    return f"a {layer_type} layer (layer_types)"


def null_for_its_type(r: Reader, layer_type: str | None) -> str | None:
    """Cohere Compass's rule: a layer type whose rope_parameters entry is null turns
    nothing."""
    params = r.get("rope_parameters")
    if isinstance(params, dict) and layer_type in params and params[layer_type] is None:
        return f"config rope_parameters.{layer_type} is null"
    return None


def full_layers_nope(r: Reader, layer_type: str | None) -> str | None:
    """Cohere 2's rule: only the sliding layers turn; the full-attention ones are NoPE."""
    return None if layer_type == "sliding_attention" else f"a {layer_type} layer (layer_types)"


def full_layers_nope_with_window(r: Reader, layer_type: str | None) -> str | None:
    """EXAONE 4's rule: with a sliding window, only the sliding layers turn (global NoPE);
    without one, every layer turns."""
    if r.get("sliding_window") is None:
        return None
    return full_layers_nope(r, layer_type)


# --------------------------------------------------------------------------- scales


def root_of(key: str) -> Scale:
    """s = √(``key``) in place of √d_k (Gemma's query_pre_attn_scalar)."""
    @said(f"s = √{key}")
    def scale(r: Reader, d: int) -> float:
        s = float(r.number(key, float(d))) ** 0.5  # type: ignore[arg-type]
        r.note("scale", f"config {key} (s = its square root)")
        return s
    return scale


def times(key: str) -> Scale:
    """Scores multiplied by ``key`` (Granite's attention_multiplier): s = 1 / its value."""
    @said(f"scores × {key}")
    def scale(r: Reader, d: int) -> float:
        m = r.number(key, 1.0 / math.sqrt(d))
        r.note("scale", f"config {key} (scores × it: s = 1 / {key})")
        return 1.0 / float(m)  # type: ignore[arg-type]
    return scale


def keys_times(key: str) -> Scale:
    """The keys multiplied by ``key`` before the scores (Falcon-H1's key_multiplier): the
    scores are ÷ √d_k and × it, so s = √d_k / its value."""
    @said(f"keys × {key}")
    def scale(r: Reader, d: int) -> float:
        m = r.number(key, 1.0)
        r.note("scale", f"config {key} (the keys × it: s = √d_k / {key})")
        return math.sqrt(d) / float(m)  # type: ignore[arg-type]
    return scale
