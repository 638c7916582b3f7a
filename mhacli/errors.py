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
        super().__init__(self.describe())

    def describe(self, labels: list[str] | None = None) -> str:
        """The message, naming each row by its token label when ``labels`` are given."""
        outcome = "zero weights and a zero head output" if self.policy == "zero" \
            else "NaN weights"
        which = ", ".join(f"{r} ({labels[r - 1]})" if labels and r <= len(labels) else str(r)
                          for r in self.rows)
        plural = "rows" if len(self.rows) > 1 else "row"
        return f"query {plural} {which}: every key is blocked by the mask; {outcome}"
