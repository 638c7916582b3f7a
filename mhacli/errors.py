"""The one exception users see, and the warning for fully blocked query rows.

An error is data: what is wrong (``message``), and where — the file or sample
(``source``), the key path of the entry (``path``, shown as ``key``: ``x[2][3]``), and
the line and column it was written on. Its text is made from them here, and only here.
An error about a key's name (an unknown key, a misspelt stage under answers:) says so
(``on_key``): it is located where the key is written, not where its value begins.
"""

from __future__ import annotations

from typing import Union

Step = Union[str, int]  # a key of a mapping, or a 0-based index into a list
KeyPath = tuple[Step, ...]


def shown(value: object, limit: int = 40) -> str:
    """A value as an error message quotes it: its repr, cut short when long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _printable(text: str) -> str:
    """One line with no control character or lone surrogate: what a file named or a
    value held cannot reach the terminal as an escape sequence."""
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)


def key_text(path: KeyPath) -> str:
    """A key path as a person reads it: ``("answers", "q", 0, 1)`` -> ``answers.q[1][2]``."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step + 1}]"
        else:
            out += f".{step}" if out else str(step)
    return out


class MhaError(ValueError):
    """Invalid input: what is wrong, and where (source, key path, line, column).

    ``str(error)`` is the line the command line prints after ``Error:``.
    """

    def __init__(self, message: str, *, key: KeyPath | str | None = None,
                 source: str | None = None, line: int | None = None,
                 column: int | None = None, on_key: bool = False) -> None:
        self.message = message
        self.path: KeyPath = (key,) if isinstance(key, str) else tuple(key or ())
        self.source = source
        self.line = line
        self.column = column
        self.on_key = on_key  # about the last key's name, not its value
        super().__init__(message)

    @property
    def key(self) -> str | None:
        """The entry the error is about, such as ``x[2][3]``, or None."""
        return key_text(self.path) if self.path else None

    def located(self, source: str | None = None, line: int | None = None,
                column: int | None = None) -> MhaError:
        """This error with the place filled in where it is not known yet."""
        return MhaError(self.message, key=self.path, source=self.source or source,
                        line=self.line or line, column=self.column or column,
                        on_key=self.on_key)

    def __str__(self) -> str:
        source = self.source if self.source is None or len(self.source) <= 200 else \
            self.source[:100] + "…" + self.source[-99:]
        where = [w for w in (source, self.line and f"line {self.line}",
                             self.column and f"column {self.column}") if w]
        return _printable(f"{', '.join(where)}: {self.message}" if where else self.message)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return _rebuild, (self.message, self.path, self.source, self.line, self.column,
                          self.on_key)


def _rebuild(message: str, path: KeyPath, source: str | None, line: int | None,
             column: int | None, on_key: bool = False) -> MhaError:
    return MhaError(message, key=path, source=source, line=line, column=column,
                    on_key=on_key)


class MaskedRowWarning(UserWarning):
    """Some query rows may attend to no key at all.

    ``rows`` holds their 1-based indices; ``policy`` says what was done with them; ``by``
    names the problem's rules that block ("the window and the key padding").
    """

    def __init__(self, rows: list[int], policy: str, by: str = "the mask") -> None:
        self.rows = rows
        self.policy = policy
        self.by = by
        super().__init__(self.describe())

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return MaskedRowWarning, (self.rows, self.policy, self.by)

    def describe(self, labels: list[str] | tuple[str, ...] | None = None) -> str:
        """The message, naming each row by its token label when ``labels`` are given."""
        outcome = "zero weights and a zero head output" if self.policy == "zero" \
            else "NaN weights"
        which = ", ".join(f"{r} ({labels[r - 1]})" if labels and r <= len(labels) else str(r)
                          for r in self.rows)
        plural = "rows" if len(self.rows) > 1 else "row"
        return f"query {plural} {which}: every key is blocked by {self.by}; {outcome}"


class ExerciseNote(UserWarning):
    """A mistake `check` names gives the right numbers in an exercise being made (its
    sizes, or every draw tried, hide it): the message says which, and why."""
