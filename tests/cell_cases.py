"""Problems whose every entry is worked out (``--cell``) in the tests: the samples and
variants of every setting that changes a cell's arithmetic, and every entry's spec.

Used by the tests that pin what ``--cell`` writes and by the explorer page's test (the
page's arithmetic for every entry equals ``--cell``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from mhacli.io.choose import problem_from

FIXTURES = Path(__file__).parent / "fixtures"
RANDOM = dict(random=True, seed=3, tokens="5", d_model=8)

# name -> (problem_from's options, --precision, --fractions)
CASES: dict[str, tuple[dict[str, Any], int, bool]] = {
    "cat": (dict(sample="cat"), 4, False),
    "by-hand": (dict(sample="by-hand"), 4, False),
    "by-hand-fractions": (dict(sample="by-hand"), 4, True),
    "alibi": (dict(sample="alibi"), 4, False),
    "backward": (dict(sample="backward", backward=True), 4, False),
    "gqa": (dict(sample="gqa"), 4, False),
    "rope": (dict(sample="rope"), 4, False),
    "llama-tiny": (dict(sample="llama-tiny"), 4, False),
    "translate": (dict(sample="translate"), 4, False),
    "homework": (dict(sample="homework"), 2, False),
    "flash": (dict(sample="flash", tiles="2"), 4, False),
    "kv-cache": (dict(sample="kv-cache", decode=True, splits=2), 4, False),
    "gqa-rope-norm": (dict(**RANDOM, heads=4, kv_heads=2, rope="half", qk_norm="head",
                           mask="causal"), 4, False),
    "interleaved-width": (dict(**RANDOM, heads=2, rope="interleaved", qk_norm="width"),
                          4, False),
    "softcap-alibi-sinks": (dict(**RANDOM, heads=2, softcap="3", alibi=True, sinks="0.5 -1",
                                 window=2, mask="causal", key_padding="1 1 1 0 1"), 4, False),
    "positional": (dict(**RANDOM, heads=2, positional="sinusoidal"), 4, False),
    "cross-positional": (dict(sample="translate", positional="sinusoidal"), 4, False),
    "backward-variants": (dict(**RANDOM, heads=4, kv_heads=2, rope="half", qk_norm="head",
                               softcap="3", alibi=True, sinks="0.5 -1 0 1", mask="causal",
                               backward=True), 4, False),
    "backward-cross": (dict(sample="translate", positional="sinusoidal", backward=True),
                       4, False),
    "tiles-window-sinks": (dict(**RANDOM, heads=2, window=2, mask="causal", sinks="0.5 -1",
                                tiles="2:3"), 4, False),
    "decode-window": (dict(**RANDOM, heads=4, kv_heads=2, window=3, mask="causal",
                           rope="half", decode=True, splits=2,
                           key_padding="1 0 1 1 1"), 4, False),
    "precision-2": (dict(**RANDOM, heads=2, mask="causal", scale="n"), 2, False),
    "values-input": (dict(file=str(FIXTURES / "values-input.yaml"), backward=True, decode=True,
                          splits=2), 4, False),
    "differential": (dict(file=str(FIXTURES / "differential.yaml")), 4, False),
    "differential-gqa": (dict(**RANDOM, heads=4, kv_heads=2, mask="causal",
                              differential=str(FIXTURES / "differential-lambdas.yaml")), 3,
                         False),
    "gated-clip": (dict(file=str(FIXTURES / "gated-clip.yaml")), 4, False),
    "gated-softplus": (dict(file=str(FIXTURES / "gated-clip.yaml"), gate_fn="softplus",
                            backward=True), 4, False),
    "dynamic-mask": (dict(file=str(FIXTURES / "dynamic-mask.yaml"), backward=True), 4, False),
    "dynamic-mask-tiles": (dict(file=str(FIXTURES / "dynamic-mask.yaml"), tiles="2:3"), 4,
                           False),
    "exclusive-gated": (dict(file=str(FIXTURES / "gated-clip.yaml"), exclusive="0.7 -1.3",
                             backward=True), 4, False),
    "exclusive-gqa": (dict(**RANDOM, heads=4, kv_heads=2, rope="half", qk_norm="head",
                           exclusive="0.5 -2 1 0.25"), 4, False),
    "rotated-values": (dict(**RANDOM, heads=4, kv_heads=2, rope="interleaved", mask="causal",
                            rotated_values=True, q_head_norm="1e-6", sinks="0.5 -1 0 1",
                            window=3, backward=True), 4, False),
    "dsv4": (dict(file=str(FIXTURES / "dsv4.yaml")), 4, False),
    "dsv4-backward": (dict(file=str(FIXTURES / "dsv4.yaml"), backward=True), 4, False),
    "dsv4-tiles": (dict(file=str(FIXTURES / "dsv4.yaml"), tiles="2:3"), 4, False),
    "dsv4-hca": (dict(file=str(FIXTURES / "dsv4-hca.yaml")), 4, False),
    "dsv4-csa": (dict(file=str(FIXTURES / "dsv4-csa.yaml")), 4, False),
    "dsv4-csa-backward": (dict(file=str(FIXTURES / "dsv4-csa.yaml"), backward=True), 4, False),
    "q-head-norm-decode": (dict(**RANDOM, heads=2, rope="half", q_head_norm="1e-6",
                                rotated_values=True, mask="causal", decode=True, splits=2),
                           4, False),
    "experts-gqa-rope": (dict(file=str(FIXTURES / "experts.yaml")), 4, False),
    "experts-backward": (dict(file=str(FIXTURES / "experts.yaml"), backward=True), 4, False),
    "experts-tiles": (dict(file=str(FIXTURES / "experts.yaml"), tiles="2:3"), 4, False),
    "experts-decode": (dict(file=str(FIXTURES / "experts.yaml"), decode=True, splits=2), 4,
                       False),
    "ngram-query-bias": (dict(file=str(FIXTURES / "ngram.yaml"), backward=True), 4, False),
    "inkling": (dict(file=str(FIXTURES / "inkling.yaml")), 4, False),
    "inkling-backward": (dict(file=str(FIXTURES / "inkling.yaml"), backward=True), 4, False),
    "inkling2": (dict(file=str(FIXTURES / "inkling2.yaml")), 4, False),
    "inkling2-full": (dict(file=str(FIXTURES / "inkling2-full.yaml")), 4, False),
    "kv-conv-fractions": (dict(file=str(FIXTURES / "kv-conv.yaml")), 4, True),
    "zaya": (dict(file=str(FIXTURES / "zaya.yaml")), 4, False),
    "zaya-fractions": (dict(file=str(FIXTURES / "zaya.yaml")), 4, True),
    "zaya-backward": (dict(file=str(FIXTURES / "zaya.yaml"), backward=True), 4, False),
    "zaya-tiles": (dict(file=str(FIXTURES / "zaya.yaml"), tiles="2:3"), 4, False),
    "temperature-power": (dict(**RANDOM, heads=2, mask="causal", temperature="2:0.5:power",
                               backward=True), 4, False),
    "qk-layer": (dict(file=str(FIXTURES / "qk-layer.yaml")), 4, False),
    "qk-after-rope": (dict(file=str(FIXTURES / "qk-after-rope.yaml")), 4, False),
    "mla": (dict(file=str(FIXTURES / "mla.yaml")), 4, False),
    "mla-w-q": (dict(file=str(FIXTURES / "mla-w-q.yaml")), 4, False),
    "dsa": (dict(file=str(FIXTURES / "dsa.yaml")), 4, False),
    "dsa-tiles": (dict(file=str(FIXTURES / "dsa.yaml"), tiles="2"), 4, False),
    "dsa-decode": (dict(file=str(FIXTURES / "dsa.yaml"), decode=True), 4, False),
    "dsa-backward": (dict(file=str(FIXTURES / "dsa.yaml"), backward=True), 4, False),
    "v-norm": (dict(file=str(FIXTURES / "v-norm.yaml")), 4, False),
    "rope-proportional": (dict(file=str(FIXTURES / "rope-proportional.yaml")), 4, False),
    "sub-norm": (dict(file=str(FIXTURES / "sub-norm.yaml")), 4, False),
    "relative-bias": (dict(file=str(FIXTURES / "relative-bias.yaml")), 4, False),
    "relative-bias-causal": (dict(file=str(FIXTURES / "relative-bias.yaml"), mask="causal",
                                  backward=True), 4, True),
    "relative-bias-prefix": (dict(file=str(FIXTURES / "relative-bias-prefix.yaml")), 4, False),
    "disentangled": (dict(file=str(FIXTURES / "disentangled.yaml")), 4, False),
    "relative-xl": (dict(file=str(FIXTURES / "relative_xl.yaml")), 4, False),
    "relative-xl-backward": (dict(file=str(FIXTURES / "relative_xl.yaml"), backward=True), 4,
                             False),
    "relative-xl-pooled": (dict(file=str(FIXTURES / "relative_xl_pooled.yaml")), 4, False),
    "relative-xl-pooled-backward": (dict(file=str(FIXTURES / "relative_xl_pooled.yaml"),
                                         backward=True), 4, False),
    "disentangled-fractions": (dict(file=str(FIXTURES / "disentangled.yaml")), 4, True),
    "disentangled-shared-backward": (dict(**RANDOM, heads=2, backward=True, disentangled=str(
        FIXTURES / "disentangled-shared.yaml")), 4, False),
}


@dataclass
class Case:
    """A case made: its problem, trace (with its exact twin), labels and precision."""

    name: str
    prob: Any
    tr: Any
    exact: Any
    queries: list[str]
    keys: list[str]
    digits: int


def make(name: str) -> Case:
    from mhacli import engine

    options, digits, fractions = CASES[name]
    prob = problem_from(**options)
    tr = engine.traced(prob.prepared)
    exact = engine.exact_trace(prob.exact) if fractions else None
    queries, keys = prob.labels()
    return Case(name, prob, tr, exact, queries, keys, digits)


def stage_specs(tr: Any, stages: Any = None) -> Iterator[str]:
    """Every entry of every stage (the weights' blocks too), as --cell addresses."""
    from mhacli.engine import BY_NAME

    for name, a in tr.stages.items():
        if stages is not None and name not in stages:
            continue
        if a.ndim == 1:
            for j in range(a.shape[0]):
                yield f"{name}:{j + 1}"
        elif BY_NAME[name].per_head:
            for h in range(a.shape[0]):
                for i in range(a.shape[1]):
                    for j in range(a.shape[2]):
                        yield f"{name}:{h + 1}:{i + 1}:{j + 1}"
        else:
            for i in range(a.shape[0]):
                for j in range(a.shape[1]):
                    yield f"{name}:{i + 1}:{j + 1}"


def view_specs(tr: Any, queries: list[str]) -> Iterator[str]:
    """Every entry of the tiles' and decoding steps' views, as --cell addresses."""
    c = tr.config
    if c.tiles is not None:
        from mhacli.engine.tiles import each_block

        for b in each_block(tr, *c.tiles):
            h = b.head + 1
            for i in b.rows:
                for k, st in enumerate(b.steps, start=1):
                    if st.skipped:
                        continue
                    for f in ("m", "correction", "l"):
                        yield f"tiles:{h}:{i + 1}:{k}:{f}"
                    for key in st.keys:
                        yield f"tiles:{h}:{i + 1}:{k}:s:{key + 1}"
                        yield f"tiles:{h}:{i + 1}:{k}:p:{key + 1}"
                    for d in range(c.d_v):
                        yield f"tiles:{h}:{i + 1}:{k}:o:{d + 1}"
                for d in range(c.d_v):
                    yield f"tiles:{h}:{i + 1}:output:{d + 1}"
                yield f"tiles:{h}:{i + 1}:lse"
    if c.decode:
        from mhacli.engine.decoding import decode

        for st in decode(tr, None, queries):
            t = st.step
            for h in range(1, c.heads + 1):
                for d in range(1, c.d_k + 1):
                    yield f"decode:{t}:q:{h}:{d}"
                for p in st.positions:
                    yield f"decode:{t}:scores:{h}:{p + 1}"
                    yield f"decode:{t}:weights:{h}:{p + 1}"
                for d in range(1, c.d_v + 1):
                    yield f"decode:{t}:head_outputs:{h}:{d}"
            for g in range(1, c.groups + 1):
                for kind, width in (("k", c.d_k), ("v", c.d_v)):
                    for d in range(1, width + 1):
                        yield f"decode:{t}:{kind}_new:{g}:{d}"
                        for p in st.positions:
                            yield f"decode:{t}:{kind}_cache:{g}:{p + 1}:{d}"
            for d in range(1, c.d_out + 1):
                yield f"decode:{t}:output:{d}"
            yield f"decode:{t}:cache_bytes"


def worked(case: Case, spec: str) -> Any:
    """``--cell SPEC`` worked out as explain does it."""
    if spec.split(":")[0] in ("tiles", "decode"):
        from mhacli.present.kernel_cell import work_out_view

        return work_out_view(spec, case.tr, case.exact, case.queries, case.keys, case.digits)
    from mhacli.present.cell import work_out

    return work_out(spec, case.tr, case.exact, case.queries, case.keys, case.digits,
                    case.prob.layout, case.prob.read.get("settings"))
