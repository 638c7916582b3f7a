"""The bundled sample problems: their names, files and descriptions (read as problems by
``problem.load``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import MhaError


def samples_dir() -> Path:
    """The bundled samples: inside the installed package, or the repository's samples/."""
    package = Path(__file__).resolve().parent.parent  # mhacli/
    for candidate in (package / "samples", package.parent / "samples"):
        if candidate.is_dir():
            return candidate
    raise MhaError("the bundled samples are missing from this installation")


def sample_names() -> list[str]:
    return sorted(p.stem for p in samples_dir().glob("*.yaml"))


def sample_path(name: str) -> Path:
    path = samples_dir() / f"{name}.yaml"
    if name not in sample_names():
        import difflib

        names = sample_names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"no sample named {name!r}{hint}; samples: {', '.join(names)}")
    return path


def sample_description(name: str) -> str:
    """The first comment line of a sample file."""
    for line in sample_path(name).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""
