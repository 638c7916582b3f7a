"""What a problem file names outside itself: an array in an .npz file beside it
(``w_q: big.npz``, ``w_q: big.npz:name``) and a model's layer (``checkpoint:`` and
``layer:``). A file named in a problem lies in the problem's folder or below."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import MhaError, shown
from .reader import read_npz


def named_layer(data: dict[str, Any], base: Path | None) -> Any:
    """``checkpoint: model.safetensors`` (beside the problem, or a path given on the
    command line) and ``layer: N``: that layer, read."""
    from ..models.layer import read_layer

    value = data["checkpoint"]
    if isinstance(value, Path):
        path = value  # from the command line: the person's own path
    elif isinstance(value, str):
        path = beside(base, value, "checkpoint", "a checkpoint")
    else:
        raise MhaError(f"checkpoint must name a file, found {shown(value)}", key="checkpoint")
    return read_layer(path, layer_number(data.get("layer")) or 0)  # its errors name it


def layer_number(value: Any) -> int | None:
    """A problem's ``layer:`` (None when not given)."""
    if value is None:
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"\+?\d{1,6}", text):
        raise MhaError(f"layer must be a whole number from 0, found {shown(value)}",
                       key="layer")
    return int(text)


def beside(base: Path | None, name: str, key: str, what: str) -> Path:
    """A file a problem names: in the problem's folder or below, never elsewhere."""
    if base is None:
        raise MhaError(f"{key}: a problem read from standard input cannot name other files "
                       f"({name!r})", key=key)
    path = base / name
    try:
        inside = path.resolve().is_relative_to(base.resolve())
    except (OSError, ValueError):
        inside = False
    if Path(name).is_absolute() or not inside:
        raise MhaError(f"{key}: {name} is outside the problem's folder; {what} named in a "
                       "problem must lie beside it (or below)", key=key)
    return path


def external(value: Any, key: str, base: Path | None) -> Any:
    """A matrix key may name an array in an .npz file beside the problem (in its folder
    or below): ``w_q: big.npz`` (the array called w_q) or ``w_q: big.npz:name``."""
    if not isinstance(value, str) or ".npz" not in value:
        return value
    path_text, _, name = value.partition(".npz")
    name = name.lstrip(":") or key
    path = beside(base, path_text + ".npz", key, "an .npz")
    try:
        arrays = read_npz(path)
    except MhaError as exc:  # about the .npz file, at this key of the problem
        raise MhaError(f"{exc.source}: {exc.message}", key=key) from None
    if name not in arrays:
        import difflib

        close = difflib.get_close_matches(name, list(arrays), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"{key}: {path} has no array named {name!r}{hint}", key=key)
    return arrays[name]
