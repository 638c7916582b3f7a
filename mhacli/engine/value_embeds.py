"""Value embeddings (NeoMME's first and last full-attention layers): a row of numbers for
each key token, looked up in a table of the model by the token's id, added to the
values after their projection, before the heads are split:

    v_embedded = V + E        (m, G·d_v); V = X_kv·W_V + b_v (clamped, with clip_qkv)

E (``value_embeds``) is an input of the problem, as x is: a problem file or the API gives
it, or a model's layer looks it up by the token ids of the text it reads. Its gradient is
the values' own, dE = dV: the sum passes it on unchanged. Dimensions are named in
``ops.py``; the stage's --cell is ``cells.cell_v_embedded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MhaError
from .values import as_array, shape_text

if TYPE_CHECKING:
    from .config import Sizes

Fields = tuple[dict[str, Any], dict[str, Any]]


def parse(value: Any, s: Sizes) -> Fields:
    """``value_embeds``: m × G·d_v numbers, a row for each key token (the values' width,
    a key/value head's d_v columns each)."""
    if value is None:
        return {"value_embedded": False}, {"value_embeds": None}
    arr = as_array("value_embeds", value, s.t)
    want = (s.m, s.groups * s.d_v)
    if arr.shape != want:
        raise MhaError(f"value_embeds needs m × G·d_v = {want[0]} × {want[1]} (a row for "
                       f"each key token, as wide as the values), got shape "
                       f"{shape_text(arr)}", key="value_embeds")
    return {"value_embedded": True}, {"value_embeds": arr}
