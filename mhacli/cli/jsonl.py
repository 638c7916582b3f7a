"""`run --jsonl`: a stream of problems, one JSON object a line, each answered with a line.

Each line is read and checked as a problem file is (``io.problem``), and a line that
fails is answered with its error while the rest go on. What costs the time of a small
problem is not its arithmetic but what surrounds it (measured, benchmarks/README.md):
so a line of the plainest kind is read in one quick pass (``io.stream.quick``), the
first line of each form is read in full and kept as that form's problem, and the lines
at hand of one form are then checked for their numbers alone and computed together
(``engine.small.many``), each to the same bits as ``mha run`` gives it alone.
"""

import sys
from typing import Any, Optional

from ..errors import MhaError

MOST_FORMS = 256  # forms kept (a stream rarely has more than a few)


def stream(file: Optional[str], precision: Optional[int], settings: dict[str, Any]) -> int:
    """Answer each line of ``file`` (None or -: standard input) on standard output, a
    chunk of lines at a time, flushed as it is made; the options' settings change every
    problem. Returns how many lines failed."""
    from ..io.choose import option_values
    from ..io.stream import chunks

    if file in (None, "-") and (sys.stdin is None or sys.stdin.isatty()):
        raise MhaError("--jsonl reads problems from standard input, which is a terminal: "
                       "pipe them in (mha run --jsonl < problems.jsonl) or name the file")
    changes = {k: v for k, v in option_values(settings).items() if v is not None}
    answers = Answers(changes, precision)
    source = sys.stdin.buffer if file in (None, "-") else open(file, "rb")  # noqa: SIM115
    with source:
        for lines in chunks(source):
            out = answers.of(lines)
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.buffer.flush()
    return answers.failed


class Answers:
    """The answers to a stream's lines, with what the stream has taught: each form's
    problem, read in full once."""

    def __init__(self, changes: dict[str, Any], precision: Optional[int]) -> None:
        from ..engine import fast
        from ..engine import small as route
        from ..present.text import write_output

        self.changes = changes
        self.precision = precision
        self.failed = 0
        self.forms: dict[tuple, Any] = {}  # a form -> its problem (Prepared), read in full
        self.route, self.fast, self.write = route, fast, write_output

    def of(self, lines: list[tuple[int, bytes]]) -> bytes:
        """The answers to a chunk of numbered lines, in their order."""
        from ..io.stream import quick

        out: list[bytes] = []
        run: list[tuple[int, dict]] = []  # lines of one form, in a row: (number, numbers)
        form, shared = None, None  # the run's form, and its problem
        for number, raw in lines:
            if not raw.strip():
                continue
            line = quick(raw)
            p = None
            if line is not None:
                try:
                    p = self._problem(line[0], line[2], raw, number)
                except MhaError as exc:
                    self._many(run, shared, out)  # what came before, first
                    out.append(self._error(exc, number))
                    continue
            if line is not None and line[0] in self.forms:  # one of a form computed together
                if line[0] != form:
                    self._many(run, shared, out)
                    form, shared = line[0], p
                run.append((number, line[1]))
                continue
            self._many(run, shared, out)
            out.append(self._one(raw, number, p))
        self._many(run, shared, out)
        return b"".join(out)

    def _problem(self, form: tuple, data: dict, raw: bytes, number: int) -> Any:
        """The problem of a quick line: its form's, or this line's own, made from what
        the quick pass read, or if that fails from the line read in full (whose error,
        if it has one, is the line's: a quick pass reads 1 where the text says "1", and
        a 1 × 1 mask may be written "1"); kept for its form when lines of that form can
        be computed together: ``engine.small.alike``, and its matrices kept as the line
        wrote them (a bias written as a list of per-head vectors is joined into one)."""
        p = self.forms.get(form)
        if p is None:
            try:
                p = self._problem_of(data, number)
            except MhaError:
                p = self._read(raw, number)
            shapes = [entry for entry in form if len(entry) == 2]  # (matrix, its shape)
            if self.route.alike(p) and all(getattr(p, name) is not None and
                                           getattr(p, name).shape == shape
                                           for name, shape in shapes):
                if len(self.forms) >= MOST_FORMS:
                    self.forms.clear()
                self.forms[form] = p
        return p

    def _read(self, raw: bytes, number: int) -> Any:
        """A line read in full and checked, as a problem file is: its Prepared."""
        from ..io.reader import parse_text

        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MhaError("not UTF-8 text") from None
        data, locate = parse_text(text, f"line {number}", "json")
        return self._problem_of(data, number, locate)

    def _problem_of(self, data: dict, number: int, locate: Any = None) -> Any:
        from ..io.problem import from_mapping

        prob = from_mapping(data, f"line {number}", None, "rows", locate)
        if self.changes:
            prob = prob.with_overrides(**self.changes)
        return prob.prepared

    def _one(self, raw: bytes, number: int, p: Any = None) -> bytes:
        """A line answered on its own: read in full (unless its problem is known)."""
        try:
            p = self._read(raw, number) if p is None else p
            route = self.route.small if self.route.fits(p) else self.fast
            return self.write(route(p), "json", self.precision)
        except MhaError as exc:
            return self._error(exc, number)

    def _many(self, run: list[tuple[int, dict]], p: Any, out: list[bytes]) -> None:
        """The lines of one form gathered so far (``p``: its problem), computed together
        and answered (the run emptied)."""
        if not run:
            return
        import numpy as np

        from ..engine.checks import check_finite, warn_dead
        from ..numbers import in_range

        names = run[0][1].keys()
        stacked = {name: np.array([numbers[name] for _, numbers in run], dtype=np.float64)
                   for name in names}  # (B, …): each number checked by the quick reading
        outputs = self.route.many(p, stacked)  # (B, n, d_out)
        for (number, _), y in zip(run, outputs):
            try:
                warn_dead(p)  # fully blocked rows: said for each problem, as alone
                if not in_range(y):
                    check_finite(p, "output", y)  # an overflow: this line's error
                out.append(self.write(y, "json", self.precision))
            except MhaError as exc:
                out.append(self._error(exc, number))
        run.clear()

    def _error(self, exc: MhaError, number: int) -> bytes:
        import json

        self.failed += 1
        doc = {"error": exc.message, "line": number}
        return (json.dumps(doc, ensure_ascii=False) + "\n").encode()
