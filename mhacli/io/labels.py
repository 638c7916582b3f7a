"""A problem's row labels: checked (printable text, one per row), and told apart where
they repeat (``the``, ``cat``, ``the₂``) wherever rows are shown."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from ..errors import MhaError, key_text

_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def distinct(labels: Sequence[str]) -> list[str]:
    """The labels with each repeat numbered as a subscript (``the``, ``cat``, ``the₂``):
    the first keeps its label, so that a text without repeats reads as it is. A number
    that would make another label (``a₂`` already there) moves on to the next free one."""
    counts = Counter(labels)
    if all(c == 1 for c in counts.values()):
        return list(labels)
    taken = set(labels)
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        k = seen.get(label, 0) + 1
        seen[label] = k
        if k == 1:
            out.append(label)
            continue
        shown = label + str(k).translate(_SUBSCRIPT)
        while shown in taken:
            k += 1
            shown = label + str(k).translate(_SUBSCRIPT)
        seen[label] = k
        taken.add(shown)
        out.append(shown)
    return out



def labels_of(value: Any, name: str, count: int, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, (list, tuple)) or not value:
        raise MhaError(f"{name} must be a list of labels such as [the, cat, sat]", key=name)
    for i, item in enumerate(value):
        if isinstance(item, (list, dict, tuple)) or item is None:
            raise MhaError(f"{key_text((name, i))} must be a label (text), found {item!r}",
                           key=(name, i))
        bad = next((ch for ch in str(item) if _unprintable(ch)), None)
        if bad is not None:
            raise MhaError(f"{key_text((name, i))} holds the character U+{ord(bad):04X} (a "
                           "control, line-separating or direction-changing character, or "
                           "half a surrogate pair); a label is printable text", key=(name, i))
    if len(value) != count:
        raise MhaError(f"{name} has {len(value)} labels but there are {count} {what}",
                       key=name)
    return tuple(str(item) for item in value)


def _unprintable(ch: str) -> bool:
    """A character that would act on a terminal or a page rather than show: controls,
    line and paragraph separators, direction overrides (U+202E), lone surrogates."""
    if " " <= ch <= "~":  # printable ASCII: no need of the Unicode tables
        return False
    import unicodedata

    category = unicodedata.category(ch)
    return category in ("Cc", "Cs", "Zl", "Zp") or category == "Cf" and \
        ch not in "\u200c\u200d"  # joiners, as emoji and some scripts need
