"""The standard streams as a command needs them, and files written whole or not at all.

A write to standard output either writes every byte or is an error: Python's buffered
writer otherwise reports a short write (a full disk, a file-size limit) as success and
drops the rest. A closed stream, a terminal width of 0 and an output encoding that
cannot hold this tool's symbols (``PYTHONIOENCODING=ascii``) are made harmless before
anything runs.
"""

import errno
import io
import os
import sys
from pathlib import Path

from ..errors import MhaError


class _Complete(io.RawIOBase):
    """A file descriptor to which every write is whole, or raises OSError."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            view = view[os.write(self._fd, view):]  # a failed write raises (ENOSPC, EFBIG)
        return total


def prepare() -> str | None:
    """Make the standard streams safe for a command; a message when it cannot run."""
    if sys.stderr is None:  # 2>&-: messages go nowhere, but nothing fails for it
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    elif not _can_encode(sys.stderr):
        sys.stderr.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    columns = os.environ.get("COLUMNS")
    if columns is not None and not (columns.isdigit() and int(columns) >= 20):
        del os.environ["COLUMNS"]  # COLUMNS=0 or junk: ask the terminal instead
    if sys.stdout is None:
        return "standard output is closed; give it a file or a pipe (or -o FILE)"
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None  # not a real file (a test harness): leave it as it is
    old = sys.stdout
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(_Complete(fd)), encoding=old.encoding,
        errors="strict" if _can_encode(old) else "backslashreplace",
        line_buffering=old.line_buffering)
    return None


def _can_encode(stream: object) -> bool:
    try:
        "×·−∞√₁ᵀ│".encode(getattr(stream, "encoding", None) or "ascii")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def failed_write(exc: OSError) -> int:
    """The exit code for output that could not be written: 141 quietly for a reader that
    went away (as for SIGPIPE), else 2 with one line saying why."""
    if exc.errno == errno.EPIPE:
        # stop quietly, as the Python documentation recommends, with no second error
        # when the interpreter flushes stdout at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141
    print(f"Error: standard output: cannot write ({exc.strerror or exc})", file=sys.stderr)
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 2


def write_file(path: Path, data: bytes, keep: tuple[Path, ...] = ()) -> None:
    """Write ``data`` to ``path`` whole or not at all. A file is written into a temporary
    file beside it (a link: beside what it points to), renamed over it only when
    complete; a device or a pipe (/dev/stdout, a FIFO) is written through, every byte or
    an error. ``keep``: files that must not be replaced (the problem being read)."""
    check_writable(path, keep)
    if path.exists() and not path.is_file():  # a device or a pipe: write through it
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                _Complete(fd).write(data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise MhaError(f"cannot write ({exc.strerror})", source=str(path)) from None
        return
    target = Path(os.path.realpath(path))  # a link: replace what it points to
    folder = target.parent
    try:
        import tempfile

        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".part")
    except OSError as exc:
        raise MhaError(f"cannot write ({exc.strerror})", source=str(path)) from None
    try:
        with os.fdopen(fd, "wb") as out:
            _Complete(out.fileno()).write(data)
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
        os.chmod(temp, mode)
        os.replace(temp, target)
    except OSError as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise MhaError(f"cannot write ({exc.strerror})", source=str(path)) from None


def check_writable(path: Path, keep: tuple[Path, ...] = ()) -> None:
    """Refuse, before anything is printed, a file that cannot be written, or one of the
    files in ``keep`` (the problem being read)."""
    for other in keep:
        try:
            same = path.exists() and other.exists() and path.samefile(other)
        except OSError:
            same = False
        if same:
            raise MhaError("is the problem file itself; write the output elsewhere",
                           source=str(path))
    if path.is_dir():
        raise MhaError("cannot write (is a directory)", source=str(path))
    if path.exists() and not path.is_file():  # a device or a pipe
        if not os.access(path, os.W_OK):
            raise MhaError("cannot write (permission denied)", source=str(path))
        return
    target = Path(os.path.realpath(path))
    folder = target.parent
    if not folder.is_dir():
        raise MhaError("cannot write (no such folder)", source=str(path))
    if not os.access(folder, os.W_OK) or target.exists() and not os.access(target, os.W_OK):
        raise MhaError("cannot write (permission denied)", source=str(path))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
