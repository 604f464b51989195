"""Typed errors that reach the user as one line and exit status 2.

Every error the user can cause (a bad file, a typo, an impossible memory limit) is an `OpplanError`.  Its message
names the file, the item and the fix; the CLI prints `error: <message>` and exits with status 2, no traceback.
Internal bugs stay ordinary exceptions so that they do show a traceback.
"""

from __future__ import annotations


class OpplanError(Exception):
    """A user-facing error: a one-line message, exit status 2."""

    exit_status = 2

    def __init__(self, message: str, *, path: str | None = None, fix: str | None = None) -> None:
        parts = []
        if path:
            parts.append(f"{path}:")
        parts.append(message.rstrip("."))
        text = " ".join(parts)
        if fix:
            text += f" ({fix.rstrip('.')})"
        super().__init__(text)
        self.path = path
        self.fix = fix


class InputError(OpplanError):
    """An input file (model, hardware, task graph, plan) is missing, malformed or inconsistent."""


class UnsupportedOpError(InputError):
    """An op type that no ONNX opset defines (or a custom domain the importer does not know)."""


class DynamicShapeError(InputError):
    """A dynamic dimension has no value; fix it with --input-shape NAME=AxBxC."""


class InfeasibleError(OpplanError):
    """No plan exists under the given constraints; the message says what does not fit and by how much."""


class BackendUnavailableError(OpplanError):
    """A solver backend is unknown or not installed; the message lists the installed ones."""
