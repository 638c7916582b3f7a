"""The arrays of an .npz file, read as untrusted input: never unpickled, each checked
from its header (a number type, how many numbers) before any is unpacked. Problem files
(``io``) and checkpoints (``models``) both read them."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import numpy as np

from .errors import MhaError

MAX_NUMBERS = 1 << 26  # numbers in the arrays of one .npz: 512 MiB as float64


def read_npz(path: Path | io.BytesIO) -> dict[str, np.ndarray]:
    """The arrays of an .npz file: never unpickled, and checked from their headers (a
    number type, and how many numbers) before any of them is unpacked."""
    import zipfile

    shown = "<stdin>" if isinstance(path, io.BytesIO) else str(path)
    try:
        if isinstance(path, Path):
            mode = path.stat().st_mode
            if stat.S_ISDIR(mode):
                raise MhaError("is a directory, not a problem file", source=shown)
            if not stat.S_ISREG(mode):
                raise MhaError("an .npz must be a regular file (not a device or a pipe)",
                               source=shown)
        with zipfile.ZipFile(path) as archive:
            total = 0
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                with archive.open(info) as member:
                    fmt = np.lib.format
                    major, _ = fmt.read_magic(member)
                    header = fmt.read_array_header_1_0 if major == 1 else \
                        fmt.read_array_header_2_0
                    shape, _, dtype = header(member)
                if dtype.kind not in "biufU" or dtype.kind == "U" and dtype.itemsize > 256:
                    what = "text longer than 64 characters" if dtype.kind == "U" \
                        else f"{dtype} values"
                    raise MhaError(f"{name} holds {what}; only numbers (and short words such "
                                   "as causal) are read", source=shown, key=name)
                total += int(np.prod(shape, dtype=object))
                if total > MAX_NUMBERS:
                    raise MhaError(f"the arrays hold more than {MAX_NUMBERS} numbers (the "
                                   "limit for one problem)", source=shown)
        if isinstance(path, io.BytesIO):
            path.seek(0)
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except MhaError:
        raise
    except FileNotFoundError:
        raise MhaError("no such file", source=shown) from None
    except IsADirectoryError:
        raise MhaError("is a directory, not a problem file", source=shown) from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise MhaError(f"not a readable .npz file ({exc})", source=shown) from None
