"""The rules a family's record names (``family.Family``): which layers slide and by how
much, how a layer turns its queries and keys (RoPE, or none on a NoPE layer), and what
the scores are divided by. Each is written from the family's modeling code and config
class in transformers, and each says in a few words what it does (``said``: the README's
table of families is made from these words, so it cannot drift from what is read).
"""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

from ..errors import shown
from .reading import Reader, rope_of, window_of

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


# --------------------------------------------------------------------------- windows


@said("")
def no_window(r: Reader) -> tuple[int | None, str | None]:
    """Causal everywhere, whatever the config's window keys say (Llama, OLMo 2, Phi: their
    attention reads no window)."""
    r.get("sliding_window"), r.get("layer_types")
    return None, None


@said("a sliding window on every layer")
def every_layer(r: Reader) -> tuple[int | None, str | None]:
    """Mistral's rule: ``sliding_window`` slides every layer when it is set."""
    return window_of(r, every_layer=True)


def by_layer_types(default: Callable[[Reader, int], str] | None = None,
                   text: str = "sliding windows by layer_types",
                   reads: tuple[str, ...] = ()) -> Window:
    """The config's ``layer_types`` (sliding_attention or full_attention), else the
    family's own rule for layer i (``default``, as its config class makes layer_types),
    else sliding wherever a window is set. ``reads``: the keys that rule reads, read off
    where layer_types is given (the config class made it from them)."""
    @said(text)
    def window(r: Reader) -> tuple[int | None, str | None]:
        for key in reads:
            r.get(key)
        rule = (lambda i: default(r, i)) if default is not None else None
        return window_of(r, rule)
    return window


def every_nth_full(n: int, key: str | None = None, first_full: bool = False) -> Callable:
    """A default layer_types: every n-th layer (counting from 1; from 0 with
    ``first_full``) attends fully, the others slide; ``key`` may give n."""
    def kind(r: Reader, i: int) -> str:
        every = (r.count(key) if key else None) or n
        full = i % every == 0 if first_full else (i + 1) % every == 0
        return "full_attention" if full else "sliding_attention"
    return kind


def sliding_if_set(r: Reader, i: int) -> str:
    """Ministral's default layer_types: every layer slides when a window is set."""
    return "sliding_attention" if r.get("sliding_window") is not None else "full_attention"


def sliding_from(r: Reader, i: int) -> str:
    """dots.llm1's default layer_types: with a window, the layers from max_window_layers
    on slide."""
    start = r.count("max_window_layers", 0) or 0
    return "sliding_attention" if r.get("sliding_window") is not None and i >= start \
        else "full_attention"


def odd_below(r: Reader, i: int) -> str:
    """Qwen 2 MoE's default layer_types: with use_sliding_window, every other layer below
    max_window_layers slides (the 1st, 3rd …)."""
    on = r.flag("use_sliding_window")
    below = r.count("max_window_layers", 0) or 0
    return "sliding_attention" if on and (i + 1) % 2 and i < below else "full_attention"


def nope_slide(r: Reader, i: int) -> str:
    """SmolLM3's default layer_types: with use_sliding_window, the NoPE layers slide."""
    flags = r.get("no_rope_layers")
    every = r.count("no_rope_layer_interval", 4) or 4
    turns = flags[i] if isinstance(flags, list) and i < len(flags) else int((i + 1) % every != 0)
    on = r.flag("use_sliding_window") and r.get("sliding_window") is not None
    return "sliding_attention" if on and not turns else "full_attention"


def pattern_if_window(key: str) -> Callable[[Reader, int], str]:
    """EXAONE 4's default layer_types: with a window, every ``key``-th layer (from 1)
    attends fully and the rest slide; without one, none slides."""
    def kind(r: Reader, i: int) -> str:
        if r.get("sliding_window") is None:
            r.get(key)
            return "full_attention"
        return every_nth_full(4, key)(r, i)
    return kind


def pattern_of(key: str, first: int = 0) -> Window:
    """Gemma 3's rule: every ``key``-th layer (counting from 1) attends fully, the rest
    slide (transformers 4's spelling; transformers 5 writes layer_types)."""
    @said("sliding windows but every n-th layer (layer_types)")
    def window(r: Reader) -> tuple[int | None, str | None]:
        every = r.count(key) or r.count("_" + key) or 6
        return window_of(r, lambda i: "full_attention" if (i + 1) % every == 0
                         else "sliding_attention")
    return window


@said("a sliding window from max_window_layers on, with use_sliding_window")
def qwen_window(r: Reader) -> tuple[int | None, str | None]:
    """Qwen 2's rule: with use_sliding_window, the layers from max_window_layers on slide."""
    on = r.flag("use_sliding_window")
    start = r.count("max_window_layers", 0) or 0  # (read off: it matters only on)
    window, kind = window_of(r, lambda i: "sliding_attention" if on and i >= start
                             else "full_attention")
    if not on and r.get("layer_types") is None:
        r.origin.pop("window", None)
        return None, kind
    return window, kind


@said("a sliding window on every layer, with use_sliding_window")
def every_layer_if_used(r: Reader) -> tuple[int | None, str | None]:
    """Qwen 3 MoE's rule: its config keeps sliding_window only with use_sliding_window,
    and the model then slides every layer (max_window_layers is not read by the model)."""
    r.get("max_window_layers")
    if not r.flag("use_sliding_window"):
        r.get("sliding_window"), r.get("layer_types")
        return None, None
    return every_layer(r)


def local_window(two_sided: bool) -> Window:
    """ModernBERT's rule: the sliding layers of layer_types see the keys within
    local_attention / 2 of the query (its sliding_window): both ways in the encoder
    (|i − j| ≤ it, a window of it + 1 in mha's |i − j| < w), the keys before in the
    decoder (i − j < it, a window of it)."""
    @said("two-sided local windows by layer_types (|i − j| ≤ local_attention / 2)"
          if two_sided else "sliding windows of local_attention / 2 by layer_types")
    def window(r: Reader) -> tuple[int | None, str | None]:
        local = r.count("local_attention")
        half = None if local is None else local // 2
        given = r.get("sliding_window")  # the decoder's config makes it anew from local;
        if two_sided and given is not None and given != half:  # the encoder's sets local
            raise r.error("sliding_window", f"{shown(given)}, but local_attention is "
                          f"{shown(local)}: the model slides by local_attention / 2")
        r.get("global_attn_every_n_layers")  # (its config class made layer_types from it)
        types = r.get("layer_types")
        if not isinstance(types, list) or r.layer >= len(types):
            raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
        kind = types[r.layer]
        if kind == "full_attention":
            return None, kind
        if kind != "sliding_attention":
            raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention "
                          "mha does not compute")
        if half is None or half < 1:
            raise r.error("local_attention", f"{shown(local)}: expected a window of 2 or more")
        r.note("window", f"config local_attention (÷ 2{', + 1: |i − j| ≤ it' if two_sided else ''}; "
               f"layer {r.layer}: {kind})")
        return (half + 1 if two_sided else half), kind
    return window


@said("two-sided sliding windows by layer_types (|i − j| ≤ sliding_window)")
def both_ways_by_layer_types(r: Reader) -> tuple[int | None, str | None]:
    """An encoder's sliding layers (Ultrabert's): layer_types says which, and each sees
    the keys within sliding_window of the query both ways, |i − j| ≤ it (a window of it
    + 1 in mha's |i − j| < w)."""
    size, kind = window_of(r)
    if size is None:
        return None, kind
    r.note("window", f"config sliding_window (+ 1: |i − j| ≤ it both ways; layer {r.layer}: "
           f"{kind})")
    return size + 1, kind


# --------------------------------------------------------------------------- RoPE


def rope(partial_key: str | None = "partial_rotary_factor", partial_default: float = 1.0,
         aliases: dict[str, str] | None = None, default_base: float = 10000.0,
         also_read: tuple[str, ...] = (), style: str = "half") -> Rope:
    """RoPE from either spelling of the config (``reading.rope_of``): the base, scaling
    and the share of each head turned; ``style`` pairs (i, i + dims/2) or (2i, 2i + 1)."""
    share = {0.5: "half", 0.25: "a quarter"}.get(partial_default, f"{partial_default:g}")
    @said("RoPE" + (" (interleaved pairs)" if style == "interleaved" else "")
          + (f" over {share} of each head" if partial_default != 1 else ""))
    def read(r: Reader, d: int, layer_type: str | None) -> dict[str, Any] | None:
        for key in also_read:
            r.get(key)
        return rope_of(r, d, partial_key=partial_key, partial_default=partial_default,
                       aliases=aliases, default_base=default_base, style=style,
                       layer_type=layer_type)
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
