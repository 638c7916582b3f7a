"""The one exception users see, and the warning for fully blocked query rows."""

from __future__ import annotations


class MhaError(ValueError):
    """Invalid input: the message says what is wrong and where (file, key, entry)."""


class MaskedRowWarning(UserWarning):
    """Some query rows may attend to no key at all.

    ``rows`` holds their 1-based indices; ``policy`` says what was done with them.
    """

    def __init__(self, rows: list[int], policy: str) -> None:
        self.rows = rows
        self.policy = policy
        outcome = "zero weights and a zero head output" if policy == "zero" else "NaN weights"
        which = ", ".join(str(r) for r in rows)
        plural = "rows" if len(rows) > 1 else "row"
        super().__init__(f"query {plural} {which}: every key is blocked by the mask; {outcome}")
