"""Human units in input files -> SI numbers (bytes, bytes per second, FLOP/s, seconds), and back for reports.

Accepted spellings (a number, optional spaces, a unit; a plain number means the SI base unit):

* sizes: ``B``; decimal ``kB``/``KB`` ``MB`` ``GB`` ``TB`` ``PB`` (powers of 1000); binary ``KiB`` ``MiB``
  ``GiB`` ``TiB`` ``PiB`` (powers of 1024).  A lower-case ``b`` means bits and is refused for sizes.
* bandwidths: a size unit followed by ``/s`` (``900GB/s``, ``3.35TB/s``, ``12GiB/s``), or a bit rate with
  ``b``: ``400Gb/s`` = ``400Gbps`` = 50e9 bytes/s.  Case matters: ``B`` is a byte, ``b`` a bit.
* compute rates: ``FLOPS`` or ``FLOP/s`` (any case) with a decimal prefix ``k M G T P E``; ``OPS``/``OP/s`` (as
  datasheets write for integer math) mean the same.  ``67 TFLOP/s`` = ``67TFLOPS`` = 6.7e13.
* times: ``ns``, ``us``, ``µs`` (micro sign or Greek mu), ``ms``, ``s``.

Each family has a ``to_*`` function that raises `UnitError` (a `ValueError`, so pydantic validators can use it) and a
``parse_*`` function that raises `InputError` naming the key path, for callers outside a pydantic model.  No
quantity here is negative; NaN and infinity are refused.  Sizes are rounded to whole bytes.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from numbers import Rational, Real

from planner.errors import InputError

__all__ = [
    "UnitError",
    "bytes_axis",
    "format_bandwidth",
    "format_bytes",
    "format_flops",
    "format_time",
    "parse_bandwidth",
    "parse_bytes",
    "parse_flops",
    "parse_time",
    "time_axis",
    "to_bytes",
    "to_bytes_per_s",
    "to_flops_per_s",
    "to_seconds",
]


class UnitError(ValueError):
    """A value that is not a well-formed quantity of the expected family.  The message is one line."""


EXPECT_SIZE = "expected a size like 80GiB or 900GB"
EXPECT_BANDWIDTH = "expected a bandwidth like 900GB/s or 400Gb/s"
EXPECT_FLOPS = "expected a compute rate like 989TFLOPS or 67 TFLOP/s"
EXPECT_TIME = "expected a time like 800ns, 5us or 2ms"

_NUMBER_UNIT = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+))?\s*(.*?)\s*")
_MAX_EXPONENT = 400  # covers every float repr and keeps the exact Fraction arithmetic cheap

_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_PREFIXES = {**_DECIMAL, **_BINARY}
_FLOP_PREFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18}
_FLOP_WORDS = ("flops", "flop/s", "ops", "op/s")
_TIME = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "\u00b5s": Fraction(1, 10**6),
         "\u03bcs": Fraction(1, 10**6), "ns": Fraction(1, 10**9)}


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _split(value: object, expect: str) -> tuple[Fraction, str]:
    """Split a YAML scalar into an exact non-negative number and its unit text ('' for a bare number)."""
    if isinstance(value, bool) or not isinstance(value, (str, Real)):
        raise UnitError(f"{expect}, got {_shown(value)}")
    if isinstance(value, Real) and not isinstance(value, str):
        # Fraction takes Rationals and floats; any other Real (numpy's float32...) goes through float, exactly.
        exact = value if isinstance(value, (Rational, float)) else float(value)
        if isinstance(exact, float) and not math.isfinite(exact):
            raise UnitError(f"{expect}, got {_shown(value)}")
        number, unit = Fraction(exact), ""
    else:
        match = _NUMBER_UNIT.fullmatch(value)
        if match is None:
            raise UnitError(f"{expect}, got {_shown(value)}")
        mantissa, exponent, unit = match.groups()
        if exponent is not None and (len(exponent.lstrip("+-")) > 4 or abs(int(exponent)) > _MAX_EXPONENT):
            raise UnitError(f"{expect}, got {_shown(value)} (exponent out of range)")
        number = Fraction(mantissa) * Fraction(10) ** int(exponent or 0)
    if number < 0:
        raise UnitError(f"must not be negative, got {_shown(value)}")
    return number, unit


def _finite(number: Fraction, value: object, expect: str) -> float:
    try:
        return float(number)
    except OverflowError:
        raise UnitError(f"{expect}, got {_shown(value)} (too large)") from None


def _unknown_unit(value: object, unit: str, expect: str, hint: str = "") -> UnitError:
    return UnitError(f"{expect}, got {_shown(value)} (unknown unit {unit!r}{hint})")


def to_bytes(value: object) -> int:
    """'80GiB' -> 85899345920, '80GB' -> 80e9, 1024 -> 1024.  Raises `UnitError`."""
    number, unit = _split(value, EXPECT_SIZE)
    if unit == "":
        scale = 1
    elif unit.endswith("B") and unit[:-1] in _PREFIXES:
        scale = _PREFIXES[unit[:-1]]
    else:
        hint = "; 'b' means bits, write 'B' for bytes" if unit.endswith("b") else ""
        raise _unknown_unit(value, unit, EXPECT_SIZE, hint)
    return round(number * scale)


def to_bytes_per_s(value: object) -> float:
    """'900GB/s' -> 9e11, '400Gb/s' or '400Gbps' -> 5e10 (bits), '3.35TB/s' -> 3.35e12.  Raises `UnitError`."""
    number, unit = _split(value, EXPECT_BANDWIDTH)
    if unit == "":
        return _finite(number, value, EXPECT_BANDWIDTH)
    if unit.endswith("/s"):
        base = unit[:-2]
    elif unit.endswith("bps"):
        base = unit[:-2]  # 'Gbps' -> 'Gb'
    else:
        hint = "; a bandwidth needs '/s'" if unit.endswith("B") else ""
        raise _unknown_unit(value, unit, EXPECT_BANDWIDTH, hint)
    if base[:-1] not in _PREFIXES or base[-1:] not in ("B", "b"):
        raise _unknown_unit(value, unit, EXPECT_BANDWIDTH)
    scale = Fraction(_PREFIXES[base[:-1]]) / (8 if base.endswith("b") else 1)
    return _finite(number * scale, value, EXPECT_BANDWIDTH)


def to_flops_per_s(value: object) -> float:
    """'989TFLOPS' -> 9.89e14, '67 TFLOP/s' -> 6.7e13, '1979TOPS' -> 1.979e15, '1.2e12' -> 1.2e12."""
    number, unit = _split(value, EXPECT_FLOPS)
    folded = unit.lower()
    for word in _FLOP_WORDS:
        if folded.endswith(word) and folded[: -len(word)] in _FLOP_PREFIXES:
            return _finite(number * _FLOP_PREFIXES[folded[: -len(word)]], value, EXPECT_FLOPS)
    if unit == "":
        return _finite(number, value, EXPECT_FLOPS)
    raise _unknown_unit(value, unit, EXPECT_FLOPS)


def to_seconds(value: object) -> float:
    """'5us' / '5µs' -> 5e-6, '2ms' -> 2e-3, '1.5s' -> 1.5, '800ns' -> 8e-7, 0.001 -> 0.001."""
    number, unit = _split(value, EXPECT_TIME)
    if unit == "":
        return _finite(number, value, EXPECT_TIME)
    if unit not in _TIME:
        raise _unknown_unit(value, unit, EXPECT_TIME)
    return _finite(number * _TIME[unit], value, EXPECT_TIME)


def _with_where(convert, text, where: str):
    try:
        return convert(text)
    except UnitError as err:
        raise InputError(f"{where}: {err}" if where else str(err)) from None


def parse_bytes(text: str | int | float, *, where: str) -> int:
    """A size in bytes (GB = 1e9, GiB = 2**30).  Raises `InputError` naming `where`."""
    return _with_where(to_bytes, text, where)


def parse_bandwidth(text: str | int | float, *, where: str) -> float:
    """A rate in bytes/s; 'b' in the unit means bits (400Gb/s = 50e9 B/s).  Raises `InputError` naming `where`."""
    return _with_where(to_bytes_per_s, text, where)


def parse_flops(text: str | int | float, *, where: str) -> float:
    """A compute rate in FLOP/s.  Raises `InputError` naming `where`."""
    return _with_where(to_flops_per_s, text, where)


def parse_time(text: str | int | float, *, where: str) -> float:
    """A duration in seconds.  Raises `InputError` naming `where`."""
    return _with_where(to_seconds, text, where)


# --- formatting for reports: 4 significant digits, a unit that the parse functions read back -------------------


def _scaled(value: float, steps: tuple[tuple[float, str], ...], digits: int) -> str:
    for scale, unit in steps:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{unit}"
    scale, unit = steps[-1]
    return f"{value / scale:.{digits}g}{unit}"


def format_bytes(size_bytes: float, *, binary: bool = True, digits: int = 4, exact: bool = False) -> str:
    """85899345920 -> '80GiB' (binary=False: '85.9GB').  The project's one bytes formatter.

    `exact` (for error messages, where the exact count matters): the whole number of bytes first, then the short
    form when it has a prefix: 60 -> '60 B', 1610612736 -> '1610612736 B (1.5GiB)'.
    """
    if binary:
        steps = tuple((float(2**e), f"{p}B") for e, p in ((50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")))
    else:
        steps = tuple((float(10**e), f"{p}B") for e, p in ((15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")))
    short = _scaled(size_bytes, (*steps, (1.0, "B")), digits)
    if not exact:
        return short
    whole = f"{round(size_bytes)} B"
    return whole if abs(size_bytes) < steps[-1][0] else f"{whole} ({short})"


def format_bandwidth(bytes_per_s: float, *, digits: int = 4) -> str:
    """4.5e11 -> '450GB/s' (decimal prefixes, bytes)."""
    if math.isinf(bytes_per_s):
        return "inf"
    steps = tuple((float(10**e), f"{p}B/s") for e, p in ((12, "T"), (9, "G"), (6, "M"), (3, "k")))
    return _scaled(bytes_per_s, (*steps, (1.0, "B/s")), digits)


def format_flops(flops_per_s: float, *, digits: int = 4) -> str:
    """9.894e14 -> '989.4TFLOPS'."""
    prefixes = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))
    steps = tuple((float(10**e), f"{p}FLOPS") for e, p in prefixes)
    return _scaled(flops_per_s, (*steps, (1.0, "FLOPS")), digits)


_TIME_STEPS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
_BYTE_STEPS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def format_time(value: float, *, unit: str = "s", digits: int = 4) -> str:
    """The project's one time formatter: 5e-6 -> '5us', 0.0021 -> '2.1ms', 1.5 -> '1.5s'.

    `unit` is the unit `value` is in: "s" (ONNX models) is scaled to a readable prefix; any other unit (a task
    graph's own, such as "unit" or "cycles") is kept as written: format_time(12, unit="unit") -> '12 unit'.
    """
    if unit != "s":
        return f"{value:.{digits}g} {unit}"
    if value == 0:
        return "0s"
    return _scaled(value, _TIME_STEPS, digits)


def time_axis(span: float, unit: str = "s") -> tuple[float, str]:
    """(divisor, label) for an axis of times up to `span` (in `unit`): values / divisor are in the label's unit.

    Seconds get the prefix `format_time` would print for `span` (0.0013 s -> (1e-3, 'ms')); any other unit is
    kept as is.  Pictures use this so that their axes read like the tables and CSVs beside them.
    """
    if unit != "s":
        return 1.0, unit
    for scale, name in _TIME_STEPS:
        if abs(span) >= scale:
            return scale, name
    return _TIME_STEPS[-1]


def bytes_axis(largest_bytes: float) -> tuple[float, str]:
    """(divisor, label) for an axis of sizes up to `largest_bytes`, in the binary units of `format_bytes`
    (300 KiB -> (1024, 'KiB')); below 1 KiB, bytes."""
    for scale, name in _BYTE_STEPS:
        if abs(largest_bytes) >= scale:
            return float(scale), name
    return 1.0, "B"
