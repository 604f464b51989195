"""The one place that checks command-line arguments: a parser whose errors are one line, and typed numbers.

Every command builds its parser with `ArgumentParser` from here.  A bad argument (a missing required flag, an
unknown choice, a number out of range, text where a number belongs) then reads like every other user error of
opplan (`planner.errors`): one line ``error: <flag>: <what> (<fix>)`` on stderr, exit status 2, no usage block and
no traceback, and nothing is computed or written.

The number types (`positive_int`, `count`, `positive_seconds`, `fraction`, ...) are argparse ``type=`` callables:
they refuse NaN, infinities and values out of range with a message that names the range, so a command body can
trust its numbers.  Ranges that depend on other inputs (``--nproc`` against a plan's devices) are checked where the
input is read.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = [
    "ArgumentParser",
    "DefaultsHelpFormatter",
    "RawDescriptionDefaultsHelpFormatter",
    "count",
    "fraction",
    "nonnegative_float",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "positive_seconds",
]


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, unless its help text already names it or there is none to show
    (None, a flag's False, an empty list: the help text says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        nothing = default is None or default is False or default is argparse.SUPPRESS or default == []
        if nothing or "default" in text.lower():
            return text
        return super()._get_help_string(action)


class RawDescriptionDefaultsHelpFormatter(DefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """`DefaultsHelpFormatter` that keeps the description's own line breaks (a command line to copy)."""


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line on stderr and exit status 2, and whose ``--help`` shows
    the defaults (`DefaultsHelpFormatter`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse words its messages "argument --devices: ..."; the flag alone is what the user typed
        text = message.replace("argument ", "", 1) if message.startswith("argument ") else message
        print(f"error: {self.prog}: {text} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _number(kind: Callable[[str], float], text: str, expect: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expect}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {expect}, got {text!r}")
    return value


def _integer(text: str, minimum: int, expect: str) -> int:
    value = int(_number(int, text, expect))
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expect}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (devices, stages, micro-batches, processes, threads, repetitions)."""
    return _integer(text, 1, "a whole number >= 1")


count = positive_int  # a readable alias where the flag counts things


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (refinement rounds, warm-up repetitions, a seed)."""
    return _integer(text, 0, "a whole number >= 0")


def _real(text: str, expect: str, within: Callable[[float], bool], refusal: str | None = None) -> float:
    """A finite float that `within` accepts; else 'expected <refusal or expect>, got <text>'."""
    value = _number(float, text, expect)
    if not within(value):
        raise argparse.ArgumentTypeError(f"expected {refusal or expect}, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (costs, memory in the user's unit)."""
    return _real(text, "a positive number", lambda v: v > 0)


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (costs that may be zero: communication, parameter memory)."""
    return _real(text, "a number >= 0", lambda v: v >= 0)


def positive_seconds(text: str) -> float:
    """A time budget in seconds: finite and > 0."""
    return _real(text, "a positive number of seconds", lambda v: v > 0)


def fraction(text: str) -> float:
    """A relative value in [0, 1] (a relative gap: 0.01 = 1 %)."""
    return _real(text, "a fraction between 0 and 1", lambda v: 0 <= v <= 1,
                 "a fraction between 0 and 1 (0.01 = 1%)")


def overlap_fraction(text: str) -> float:
    """A duration factor in (0, 1] (an overlapped F&B pair lasts this fraction of its halves)."""
    return _real(text, "a number in (0, 1]", lambda v: 0 < v <= 1)
