"""Where the commands write: every output path checked before any work, and folders that appear whole or not at all.

A command that finds its ``--out`` unusable only after a long solve loses that solve.  So every command calls
`check_output_file` / `check_output_dir` on each path it will write right after parsing, before it reads a model:
a directory where a file belongs, a parent that is a file, a parent that cannot be created, or a folder without
write permission is one line ``error: <path>: <what> (<fix>)`` and exit status 2, with nothing written (the checks
create nothing).

`staged_dir` writes an output folder under a hidden temporary name beside it and moves it into place only when the
whole folder is written, so an interrupt (Ctrl-C while drawing) or an error leaves no half folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from planner.errors import InputError

__all__ = ["check_output_dir", "check_output_file", "moved", "staged_dir"]


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _check_parents(path: Path, flag: str) -> None:
    """The nearest existing ancestor of `path` must be a folder we may create entries in."""
    for ancestor in path.parents:
        if not ancestor.exists():
            continue
        if not ancestor.is_dir():
            raise InputError(f"{ancestor} is a file, so this {flag} folder cannot be created", path=str(path),
                             fix=f"give {flag} a path that is not under a file")
        if not _writable(ancestor):
            raise InputError(f"no permission to write in {ancestor}", path=str(path),
                             fix=f"give {flag} a path in a folder you may write to")
        return


def check_output_file(path: str | os.PathLike[str], flag: str) -> None:
    """Refuse (`InputError`) a file output that cannot be written: a folder at `path`, an existing file without write
    permission, or a parent folder that is a file or not writable.  Creates nothing."""
    target = Path(path)
    if target.is_dir():
        raise InputError("is a folder, not a file", path=str(target),
                         fix=f"give {flag} a file name, e.g. {target / 'plan.json'}")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError("no permission to write this file", path=str(target), fix=f"give {flag} another path")
    _check_parents(target, flag)


def check_output_dir(path: str | os.PathLike[str], flag: str) -> None:
    """Refuse (`InputError`) a folder output that cannot be written: a file at `path`, a folder without write
    permission, or a parent that is a file or not writable.  Creates nothing."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InputError("is a file, not a folder", path=str(target), fix=f"give {flag} a folder")
    if target.is_dir() and not _writable(target):
        raise InputError("no permission to write in this folder", path=str(target), fix=f"give {flag} another folder")
    _check_parents(target, flag)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C back while the staged files move into place (a few renames), so the folder is never half moved."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder beside `path` to write into; on a clean exit its files become `path` (a new folder is
    renamed into place; into an existing folder each file is moved with `os.replace`, keeping the folder's other
    files), on an exception or interrupt it is removed and `path` is left as it was."""
    target = Path(path)
    # staged in the folder itself when it exists, else in its nearest existing ancestor: a failed write then leaves
    # no new parent folders either, and the moves stay renames within one file system
    home = target if target.is_dir() else next(p for p in target.absolute().parents if p.is_dir())
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=home))
    try:
        yield staging
        with _sigint_deferred():
            if not target.exists():
                staging.chmod(0o777 & ~_umask())  # mkdtemp made it 0700; a folder teammates can read
                target.parent.mkdir(parents=True, exist_ok=True)
                staging.rename(target)
                return
            for entry in staging.iterdir():
                os.replace(entry, target / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def moved(paths: list[Path], staging: Path, target: str | os.PathLike[str]) -> list[Path]:
    """`paths` written under `staging`, named where `staged_dir` moved them (under `target`)."""
    return [Path(target) / p.relative_to(staging) for p in paths]
