"""Atomic file writes: a temp file in the target's directory, fsync, then `os.replace`.

A crash or Ctrl-C at any moment leaves either the old file or the complete new one, never half a file (the temp
file is removed when the write is interrupted inside Python).  The written file gets the mode a plain ``open``
would give it (0666 less the umask: 0644 under umask 022), not the temp file's private 0600, so that teammates can
read the plans and profiles a command writes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    """The process's umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (same-directory temp file + fsync + os.replace + directory fsync)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # mkstemp made it 0600
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable; not possible on every platform
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically."""
    atomic_write_bytes(path, text.encode(encoding))
