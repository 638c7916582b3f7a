"""What the commands share: the problem their options name, and the files they read."""

import contextlib
import sys
from pathlib import Path
from typing import Iterator, Optional

from ..errors import MhaError


def inputs(file: Optional[str]) -> tuple:
    """The files a command reads, which its outputs must not replace."""
    return (Path(file),) if file not in (None, "-") else ()


def problem(file: Optional[str], sample: Optional[str], command: str = "explain",
            **options: object):  # type: ignore[no-untyped-def]
    """The problem the options name (see ``mhacli.io.choose.problem_from``)."""
    from ..io.choose import problem_from

    if file == "-" and sys.stdin is None:
        raise MhaError("standard input is closed: pipe a problem in, or name the file")
    if file == "-" and sys.stdin.isatty():
        raise MhaError("reading the problem from standard input, which is a terminal: "
                       f"pipe a file in (mha {command} - < problem.yaml) or name the file")
    return problem_from(file=file, sample=sample, stdin=sys.stdin.buffer if file == "-"
                        else None, command=command, **options)  # type: ignore[arg-type]


@contextlib.contextmanager
def about(prob: object) -> Iterator[None]:
    """An error found while computing (an overflow) names the problem it comes from."""
    try:
        yield
    except MhaError as exc:
        raise exc.located(prob.source) from None  # type: ignore[attr-defined]


def layer_number(value: Optional[str], every: bool = False) -> "int | str | None":
    """``--layer``: a layer from 0 (``encoder.N``, ``decoder.N``, ``decoder.N.cross`` in an
    encoder-decoder model; ``L_module.N``, ``H_module.N`` in HRM's stacks), or ``all``
    (where ``every`` layer may be shown)."""
    if value is None:
        return None
    text = value.strip().lower()
    if text == "all" and every:
        return "all"
    from ..models.parts import FORMS, STACKS, address

    named = address(text)  # an encoder-decoder model's encoder.N, decoder.N, decoder.N.cross
    if named is not None:
        return named
    if not text.isdigit() or len(text) > 6:
        hint = "; all is for explain --all-heads" if text == "all" else ""
        raise MhaError(f"--layer takes a layer number from 0 (or {FORMS} in an "
                       f"encoder-decoder model, {STACKS} in HRM's stacks), got "
                       f"{value!r}{hint}")
    return int(text)
