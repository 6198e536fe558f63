"""Where a command will write, checked before it does the work (a 40 s simulation should not
end in "no such directory").

Each check raises OutputError naming the option, so the command line prints one line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
from pathlib import Path

from allocator.errors import FairbrokerError

#: Linux's /dev/full (major 1, minor 7): every write fails with ENOSPC.
_DEV_FULL = (1, 7)


class OutputError(FairbrokerError):
    """An output path or stream that cannot be written."""


def _writable_dir(directory: Path, what: str) -> None:
    if not directory.exists():
        raise OutputError(f"{what}: directory {directory} does not exist")
    if not directory.is_dir():
        raise OutputError(f"{what}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{what}: directory {directory} is not writable")


def check_output_file(path: str | Path, option: str, suffixes: set[str] | None = None) -> Path:
    """`path` can be created or overwritten (and has one of `suffixes`, if given)."""
    path = Path(path)
    what = f"{option} {path}"
    if suffixes is not None and path.suffix.lower().lstrip(".") not in suffixes:
        known = ", ".join(f".{s}" for s in sorted(suffixes))
        raise OutputError(f"{what}: unsupported file type {path.suffix or '(none)'!r} ({known})")
    if path.is_dir():
        raise OutputError(f"{what}: is a directory")
    _writable_dir(path.parent, what)
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{what}: file is not writable")
    _probe(path, what)
    return path


def _probe(path: Path, what: str) -> None:
    """Open the file as the write will (a directory's permission bits do not tell: /proc is
    writable to root, yet no file can be made there); a new file is removed again."""
    existed = path.exists()
    try:
        with path.open("ab" if existed else "xb"):
            pass
    except OSError as error:
        raise OutputError(f"{what}: cannot write ({error.strerror})") from None
    if not existed:
        path.unlink(missing_ok=True)


def prepare_output_dir(path: str | Path, option: str) -> Path:
    """Create the directory `path` (with its parents) and check it is writable."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{option} {path}: exists and is not a directory") from None
    except OSError as error:
        raise OutputError(f"{option} {path}: cannot create ({error.strerror})") from None
    _writable_dir(path, f"{option} {path}")
    return path


def plot_suffixes() -> set[str]:
    """File types matplotlib can write (loads matplotlib: call only when a plot is asked for)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())


def check_stdout() -> None:
    """Standard output is open for writing and not a full device or file system."""
    if sys.stdout is None or sys.stdout.closed:
        raise OutputError("standard output is closed")
    try:
        fd = sys.stdout.fileno()
        info = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except (AttributeError, ValueError, OSError):
        return  # not a real file (a test harness's buffer): nothing to check
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise OutputError("standard output is not open for writing")
    if stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == _DEV_FULL:
        raise OutputError(f"standard output: {os.strerror(errno.ENOSPC)} (it is /dev/full)")
    if stat.S_ISREG(info.st_mode):
        space = os.fstatvfs(fd)
        if space.f_bavail == 0 and os.geteuid() != 0:
            raise OutputError(f"standard output: {os.strerror(errno.ENOSPC)}")
