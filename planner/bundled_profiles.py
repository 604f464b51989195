"""Where the bundled hardware profiles are, and what a ``--hw`` value names.

The profiles are the data files of the top-level package `hardware_profiles/`, found through `importlib.resources`
so that an installed wheel finds them from any working directory.  `resolve_profile(path)` is how every command
reads ``--hw``: an existing file is used as given; a bare name that is not a file in the working directory
(``h100-8-nvlink.yaml`` or ``h100-8-nvlink``) names a bundled profile.

Nothing here imports the rest of the planner: it sits in the lowest layer, so `planner.ir.hardware` can read a
bundled profile without reaching up to `planner.data` (whose generators build models on `planner.ir`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["DEFAULT_PROFILE", "PROFILES_DIR", "bundled_profile_names", "installed_folder", "resolve_profile"]


def installed_folder(package: str) -> Path:
    """The folder of `package` (a package of bundled data files) on the file system.

    pip always unpacks wheels, so the package is a folder; a zipped import (zipapp, egg) would give a Traversable
    that is not a path, and onnx, yaml and the plan files all need real paths."""
    root = files(package)
    if not isinstance(root, Path):
        raise RuntimeError(f"opplan's bundled data must be installed as files, not inside an archive ({root})")
    return root


PROFILES_DIR: Path = installed_folder("hardware_profiles")
DEFAULT_PROFILE: Path = PROFILES_DIR / "cpu-4.yaml"
"""The local default: one host, four CPU processes talking over gloo."""


def bundled_profile_names() -> list[str]:
    """File names of the bundled profiles, sorted (``cpu-4.yaml``, ...)."""
    return sorted(p.name for p in PROFILES_DIR.glob("*.yaml"))


def resolve_profile(path: str | Path) -> Path:
    """The file a ``--hw`` value means: `path` itself if it exists or names a folder; else, for a bare file name
    (no folder part), the bundled profile of that name, with or without ``.yaml``; else `path` unchanged (the
    caller reports it missing, naming `PROFILES_DIR` and `bundled_profile_names()`)."""
    given = Path(path)
    if given.exists() or given.parent != Path("."):
        return given
    for name in (given.name, f"{given.name}.yaml"):
        candidate = PROFILES_DIR / name
        if candidate.is_file():
            return candidate
    return given
