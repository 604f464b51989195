"""Human units -> SI numbers: each family, bits vs bytes, decimal vs binary prefixes, plain numbers, bad strings."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.ir.units import (
    UnitError,
    format_bandwidth,
    format_bytes,
    format_flops,
    format_time,
    parse_bandwidth,
    parse_bytes,
    parse_flops,
    parse_time,
    to_bytes,
)

W = "devices[0].x"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GiB", 80 * 2**30),
        ("80GB", 80 * 10**9),
        ("80 GB", 80 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5KiB", 1536),
        ("4kB", 4000),
        ("4KB", 4000),
        ("2TiB", 2 * 2**40),
        ("1PB", 10**15),
        ("100B", 100),
        ("1e3", 1000),
        ("1.5e3MB", 1500 * 10**6),
        ("0.5B", 0),  # rounded to whole bytes (half to even)
        (1024, 1024),
        (2.0e9, 2 * 10**9),
        ("  7GiB ", 7 * 2**30),
    ],
)
def test_bytes(text, expected):
    value = parse_bytes(text, where=W)
    assert value == expected
    assert isinstance(value, int)


def test_bytes_are_exact_for_large_binary_sizes():
    # 80 GiB is exact, with no float rounding on the way.
    assert parse_bytes("80GiB", where=W) == 85_899_345_920
    assert parse_bytes("1.1GiB", where=W) == round(11 * 2**30 / 10)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("900GB/s", 900e9),
        ("450 GB/s", 450e9),
        ("3.35TB/s", 3.35e12),
        ("400Gb/s", 50e9),  # bits
        ("400Gbps", 50e9),
        ("100Mb/s", 12.5e6),
        ("1GiB/s", float(2**30)),
        ("8b/s", 1.0),
        ("5B/s", 5.0),
        ("2e9", 2e9),
        (32e9, 32e9),
        (7, 7.0),
    ],
)
def test_bandwidth(text, expected):
    assert parse_bandwidth(text, where=W) == pytest.approx(expected, rel=1e-15)


def test_bits_and_bytes_differ_by_eight():
    assert parse_bandwidth("100GB/s", where=W) == 8 * parse_bandwidth("100Gb/s", where=W)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("989TFLOPS", 989e12),
        ("989.4TFLOPS", 989.4e12),
        ("67 TFLOP/s", 67e12),
        ("67 tflop/s", 67e12),
        ("96GFLOPS", 96e9),
        ("1.5PFLOPS", 1.5e15),
        ("1979TOPS", 1979e12),
        ("624 TOP/s", 624e12),
        ("1.2e12", 1.2e12),
        ("1.2e12 FLOPS", 1.2e12),
        (5e13, 5e13),
        (1000, 1000.0),
    ],
)
def test_flops(text, expected):
    assert parse_flops(text, where=W) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5us", 5e-6),
        ("5µs", 5e-6),  # micro sign U+00B5
        ("5μs", 5e-6),  # Greek mu U+03BC
        ("5 us", 5e-6),
        ("2ms", 2e-3),
        ("1.5s", 1.5),
        ("800ns", 800e-9),
        ("0", 0.0),
        (0.001, 0.001),
        (3, 3.0),
    ],
)
def test_time(text, expected):
    assert parse_time(text, where=W) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("parse", "text", "expected_phrase"),
    [
        (parse_bytes, "80 GiBs", "expected a size like 80GiB or 900GB"),
        (parse_bytes, "80Gb", "'b' means bits"),
        (parse_bytes, "lots", "expected a size"),
        (parse_bytes, "", "expected a size"),
        (parse_bytes, True, "expected a size"),
        (parse_bytes, [80], "expected a size"),
        (parse_bytes, "-1GB", "must not be negative"),
        (parse_bandwidth, "900GB", "a bandwidth needs '/s'"),
        (parse_bandwidth, "900 GB per s", "expected a bandwidth like 900GB/s or 400Gb/s"),
        (parse_bandwidth, "9XB/s", "unknown unit"),
        (parse_bandwidth, "-5GB/s", "must not be negative"),
        (parse_bandwidth, float("inf"), "expected a bandwidth"),
        (parse_bandwidth, float("nan"), "expected a bandwidth"),
        (parse_flops, "989TFLOPZ", "expected a compute rate"),
        (parse_flops, "67 TB/s", "expected a compute rate"),
        (parse_flops, "1e9999FLOPS", "exponent out of range"),
        (parse_flops, "1e" + "9" * 5000, "exponent out of range"),
        (parse_flops, "1e350FLOPS", "too large"),
        (parse_time, "5 sec", "expected a time"),
        (parse_time, "5mins", "expected a time"),
        (parse_time, "1..5ms", "expected a time"),
    ],
)
def test_bad_values_name_the_key_path_and_value(parse, text, expected_phrase):
    with pytest.raises(InputError) as info:
        parse(text, where="hosts[0].devices[0].memory")
    message = str(info.value)
    assert message.startswith("hosts[0].devices[0].memory: ")
    assert expected_phrase in message
    assert "\n" not in message


def test_to_functions_raise_value_errors_for_validators():
    with pytest.raises(UnitError):
        to_bytes("80 GiBs")
    assert issubclass(UnitError, ValueError)


def test_formatting():
    assert format_bytes(80 * 2**30) == "80GiB"
    assert format_bytes(80e9, binary=False) == "80GB"
    assert format_bytes(100) == "100B"
    assert format_bytes(60, exact=True) == "60 B"
    assert format_bytes(3 * 2**29, exact=True) == "1610612736 B (1.5GiB)"
    assert format_bandwidth(450e9) == "450GB/s"
    assert format_bandwidth(math.inf) == "inf"
    assert format_flops(989.4e12) == "989.4TFLOPS"
    assert format_time(5e-6) == "5us"
    assert format_time(2.1e-3) == "2.1ms"
    assert format_time(0.0) == "0s"


_positive = st.floats(min_value=1e-3, max_value=1e20, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(value=_positive)
def test_formatted_values_parse_back(value):
    assert parse_bandwidth(format_bandwidth(value), where=W) == pytest.approx(value, rel=1e-3)
    assert parse_flops(format_flops(value), where=W) == pytest.approx(value, rel=1e-3)
    assert parse_time(format_time(value * 1e-12), where=W) == pytest.approx(value * 1e-12, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(min_value=1, max_value=2**60), binary=st.booleans())
def test_formatted_sizes_parse_back(size, binary):
    assert parse_bytes(format_bytes(size, binary=binary), where=W) == pytest.approx(size, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(
    number=st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    unit_scale=st.sampled_from([("B", 1), ("KB", 10**3), ("KiB", 2**10), ("GB", 10**9), ("GiB", 2**30)]),
)
def test_repr_of_a_number_with_a_unit_parses_exactly(number, unit_scale):
    unit, scale = unit_scale
    assert parse_bandwidth(f"{number!r}{unit}/s", where=W) == pytest.approx(number * scale, rel=1e-12, abs=1e-300)
    assert parse_bandwidth(f"{number!r}{unit[:-1]}b/s", where=W) == pytest.approx(number * scale / 8, rel=1e-12)
