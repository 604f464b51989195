"""Progress lines: to the caller's callback, or else to the ``opplan`` logger (INFO), never to stdout.

A notebook that wants the lines calls ``logging.basicConfig(level=logging.INFO)`` or passes ``progress=print``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["LOGGER", "Progress", "progress_or_log"]

Progress = Callable[[str], None]
"""Called with one line of progress at a time (no newline)."""

LOGGER = logging.getLogger("opplan")


def progress_or_log(progress: Progress | None) -> Progress:
    """`progress` itself, or a callback that logs each line on the ``opplan`` logger at INFO."""
    return progress if progress is not None else LOGGER.info
