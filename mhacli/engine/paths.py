"""The traced path (every stage kept), and the public functions over it and over the
fast path (``fastpath.py``: the output only).

Both paths are built from the functions of ``ops.py``: the fused projections, the head
split, one softmax (``exp_shifted``, ``row_sums``, ``normalise``). They differ in what they keep
and in where two divisions happen (see ``fastpath.py``); both orders agree to 1e-12 in
float64 (tests/test_engine.py). Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..errors import MhaError
from .fastpath import fast
from .checks import check_finite, warn_dead
from .config import Config, Prepared
from .validate import check_progress, prepare
from .work import Work

# the stage table (stages.py, with its formulas and gradients) is imported where it is
# used: the fast path needs none of it, and `mha run` starts sooner without it

Array = np.ndarray
Progress = Callable[[int, int], None]


class Trace:
    """Every stage of one computation, by name; ``tr["weights"]`` is H × n × m.

    Aliases work as keys (``tr["z"]``) and stages as attributes (``tr.weights``).
    ``parts`` holds the parts of a stage computed in parts (the softmax's row maximum,
    exponentials and row sum, each H × n × ·); ``softmax`` names them as
    ``row_max``, ``exp``, ``row_sum``. ``kernels`` holds the views of fast kernels the
    problem asks for (``tr.tiles``: a list of ``tiles.TileBlock``; ``tr.decode``: a
    list of ``decoding.DecodeStep``), made by ``trace`` (see ``with_kernels``).
    """

    html: Callable[[Trace], str] | None = None  # set by the package: the notebook's view

    def _repr_html_(self) -> str | None:
        """In Jupyter: the stages as HTML tables, the weights as a heat map."""
        return None if Trace.html is None else Trace.html(self)

    def __init__(self, prepared: Prepared, stages: dict[str, Array],
                 parts: dict[str, dict[str, Array]]) -> None:
        self.prepared = prepared
        self.stages = stages
        self.parts = parts
        self.kernels: dict[str, list[Any]] = {}  # "tiles", "decode": see with_kernels
        for a in [*stages.values(), *(x for p in parts.values() for x in p.values())]:
            if isinstance(a, np.ndarray):  # (a lean trace's heads are made on request)
                a.flags.writeable = False  # a trace is a record: what it shows stays so

    @property
    def config(self) -> Config:
        return self.prepared.config

    @property
    def softmax(self) -> dict[str, Array]:
        parts = self.parts.get("weights", {})
        return {new: parts[old] for old, new in (("max", "row_max"), ("exp", "exp"),
                                                   ("sum", "row_sum")) if old in parts}

    def __getitem__(self, name: str) -> Array:
        from .stages import absent, canonical

        if isinstance(name, str) and name.strip().lower() in self.kernels:
            return self.kernels[name.strip().lower()]  # type: ignore[return-value]
        key = canonical(name)
        if key not in self.stages:
            raise MhaError(absent(self.config, key, "trace with backward=True", self.stages))
        return self.stages[key]

    def __getattr__(self, name: str) -> Array:
        from .stages import ALIASES

        stages = self.__dict__.get("stages", {})
        key = ALIASES.get(name, name)
        if key in stages:
            return stages[key]
        if name in self.__dict__.get("kernels", {}):
            return self.__dict__["kernels"][name]
        raise AttributeError(name)

    def __contains__(self, name: object) -> bool:
        from .stages import ALIASES

        return isinstance(name, str) and (ALIASES.get(name, name) in self.stages
                                          or name in self.kernels)

    def __iter__(self) -> Iterator[str]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def keys(self):  # type: ignore[no-untyped-def]
        return self.stages.keys()

    def __repr__(self) -> str:
        from .stages import BY_NAME

        c = self.config
        lines = [f"Trace: {c.n} queries, {c.m} keys, {c.heads} head(s) of d_k={c.d_k}, "
                 f"d_v={c.d_v}; scale {c.scale_rule} (s={c.scale:.6g}), mask {c.mask}, "
                 f"{c.dtype}"]
        lines += [f"  {k:<13} {BY_NAME[k].shape:<12} = {' × '.join(map(str, v.shape))}"
                  for k, v in self.stages.items()]
        return "\n".join(lines)


# --------------------------------------------------------------------------- traced


def _run(p: Prepared, given: dict[str, Array] | None = None, exact: bool = False,
         until: str | None = None) -> Trace:
    """The stages of the table in order (``table_run.run``), as a Trace."""
    from .table_run import run

    work = run(p, given, exact, until)
    return Trace(p, work.stages, work.parts)


def traced(p: Prepared, given: dict[str, Array] | None = None, *,
           checked: bool = True) -> Trace:
    """The traced path on validated inputs: warns of fully blocked rows and refuses an
    overflow anywhere (``checked``), as the fast path does."""
    if checked:
        warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        tr = _run(p, given)
    if checked:
        from .stages import BY_NAME

        for name, a in tr.stages.items():
            if not BY_NAME[name].given:  # (an input was checked as it came in)
                check_finite(p, name, a)
    return tr


def exact_trace(p: Prepared, until: str | None = None) -> Trace:
    """The stages before the softmax (or up to ``until``) in exact rational arithmetic
    (``p`` prepared with ``exact=True``). Stops after ``scores`` when the divisor s is
    irrational, and always before the softmax, whose exponentials are irrational."""
    return _run(p, exact=True, until=until)


# --------------------------------------------------------------------------- public


def attention(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    w_o: Any = None, b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, x_v: Any = None, q: Any = None, k: Any = None, v: Any = None,
    backward: bool = False, grad_output: Any = None, target: Any = None,
    w_dq: Any = None, q_latent_norm: Any = None, w_uq: Any = None, w_dkv: Any = None,
    kv_latent_norm: Any = None, w_uk: Any = None, w_uv: Any = None,
    k_rope_norm: Any = None, progress: Progress | None = None, **settings: Any,
) -> Array:
    """Multi-head attention: the final output only (n × d_out), the fast path.

    ``x, w_q, w_k, w_v`` (or ``q=, k=, v=``), optional ``w_o`` and biases
    ``b_q b_k b_v b_o``, ``x_kv`` for cross-attention, ``x_v`` where the values read an
    input of their own (m × d_xv: V = X_v·W_V), and the settings below (``heads``,
    ``mask``: None, "causal" or an n × m 0/1 array, 1 = may attend; ``scale``: "dk",
    "n", "none" or a number; ``dtype``: float64 or float32; the variants).
    Multi-head latent attention: ``w_dkv, kv_latent_norm, w_uk, w_uv`` in place of
    ``w_k, w_v``, and ``w_dq, q_latent_norm, w_uq`` in place of ``w_q`` where the queries
    are compressed, and ``k_rope_norm`` where k_R is RMS-normed before RoPE (see
    ``mhacli.engine.latent``).
    Raises MhaError on invalid input; warns (MaskedRowWarning) on fully blocked rows.
    ``progress(done, total)``, if given, hears how much of the work is done.
    """
    inputs = {name: value for name, value in locals().items()
              if name not in ("progress", "settings")}
    return fast(prepare(**inputs, **settings), check_progress(progress))


def trace(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    w_o: Any = None, b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, x_v: Any = None, q: Any = None, k: Any = None, v: Any = None,
    backward: bool = False, grad_output: Any = None, target: Any = None,
    w_dq: Any = None, q_latent_norm: Any = None, w_uq: Any = None, w_dkv: Any = None,
    kv_latent_norm: Any = None, w_uk: Any = None, w_uv: Any = None,
    k_rope_norm: Any = None, **settings: Any,
) -> Trace:
    """Multi-head attention with every intermediate stage kept (for small problems).

    Takes the arguments of ``attention``; returns a ``Trace``. ``backward=True`` adds the
    gradient of the loss with respect to every stage and parameter (``d_output`` …
    ``d_x``): the loss is the sum of the outputs, or ½·Σ(output − target)² with
    ``target``, or ``grad_output`` gives dL/d output itself (either implies backward).
    ``tiles=(BR, BC)`` and ``decode=True`` (``splits=S``) add the views of fast kernels:
    ``tr.tiles``, ``tr.decode`` (see ``with_kernels``).
    """
    inputs = {name: value for name, value in locals().items() if name != "settings"}
    return with_kernels(traced(prepare(**inputs, **settings)))


def with_kernels(tr: Trace, tokens: list[str] | None = None) -> Trace:
    """The trace with the views of fast kernels its settings ask for, in ``tr.kernels``:
    ``tiles`` (FlashAttention's online softmax, ``tiles=(BR, BC)``) and ``decode`` (a KV
    cache, a token a step, ``decode=True``, ``splits=S``; rows labelled ``tokens``)."""
    from .decoding import check_views, decode
    from .tiles import tiles

    c = tr.config
    check_views(c)
    if c.tiles is not None:
        tr.kernels["tiles"] = tiles(tr, *c.tiles)
    if c.decode:
        tr.kernels["decode"] = decode(tr, c.splits, tokens)
    return tr


def _with_settings(fn: Callable[..., Any]) -> None:
    """The settings table's keywords in ``fn``'s signature and docstring, as if written
    out (help(), a notebook's completion): ``heads=None, mask=None, scale='dk', …``."""
    import inspect

    from .settings import SETTINGS

    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [inspect.Parameter(s.key, inspect.Parameter.KEYWORD_ONLY, default=s.default)
               for s in SETTINGS if s.engine]
    fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    fn.__doc__ = (fn.__doc__ or "") + "\n    Settings:\n" + "".join(
        f"      {s.key}: {s.doc}\n" for s in SETTINGS if s.engine)


for _fn in (attention, trace):
    _with_settings(_fn)
