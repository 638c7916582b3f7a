"""The window rules a family's record names (``family.Family``): which layers slide and by
how much, as each family's config class and modeling code in transformers say, each with
its words for the table of families (``rules.said``)."""

from __future__ import annotations

from typing import Callable

from ..errors import shown
from .reading import Reader, window_of
from .rules import Window, said, words


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


def every_layer_by(key: str) -> Window:
    """A sliding window of ``key`` on every layer, when set (RecurrentGemma's
    attention_window_size)."""
    @said(f"a sliding window of {key} on every layer")
    def window(r: Reader) -> tuple[int | None, str | None]:
        size = r.get(key)
        if size is None:
            return None, None
        size = r.read("window", key, size)
        r.note("window", f"config {key}")
        return size, "sliding_attention"
    return window


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


def first_two_every_fourth_last(r: Reader, i: int) -> str:
    """Flint's default layer_types: full attention on the first two layers, every fourth
    from the second (i % 4 == 1) and the last; the others slide."""
    last = (r.count("num_hidden_layers") or 0) - 1
    full = i < 2 or i % 4 == 1 or i == last
    return "full_attention" if full else "sliding_attention"


def first_and_every_sixth(r: Reader, i: int) -> str:
    """MiMo-V2-Flash's default layer_types: full attention on the first layer and every
    6th (counting from 1); the others slide."""
    return "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"


@said("twice the key/value heads on the sliding layers")
def twice_on_sliding(r: Reader, kind: str | None, groups: int | None) -> int | None:
    """MiMo-V2-Flash's key/value heads: twice num_key_value_heads on a sliding layer."""
    if kind != "sliding_attention" or groups is None:
        return groups
    r.note("kv_heads", f"config num_key_value_heads × 2 (layer {r.layer}: {kind})")
    return 2 * groups


def window_one_more_than(key: str, rule: Window) -> Window:
    """``rule``, its sliding_window checked against an older spelling ``key`` that counts
    the keys before the query only (MiMo-V2-Flash's sliding_window_size = sliding_window
    − 1, as its config class makes it)."""
    @said(words(rule))
    def window(r: Reader) -> tuple[int | None, str | None]:
        older, size = r.get(key), r.cfg.get("sliding_window")
        if older is not None and (size is None or older != size - 1):
            raise r.error(key, f"{shown(older)}, but sliding_window is {shown(size)}: the "
                          f"model's window is {key} + 1, so which one holds is unclear")
        return rule(r)
    return window


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


def refusing_kind(kind: str, why: str) -> Window:
    """Sliding windows by layer_types, a layer of type ``kind`` (an attention mha does not
    compute) refused, saying ``why``."""
    @said(f"sliding windows by layer_types; its {kind} layers refused by name")
    def window(r: Reader) -> tuple[int | None, str | None]:
        types = r.get("layer_types")
        if isinstance(types, list) and r.layer < len(types) and types[r.layer] == kind:
            raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: {why}")
        return window_of(r)
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
