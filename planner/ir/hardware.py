"""Hardware profile (YAML) -> `Topology`.

The schema is written once as pydantic models (`Profile` and its parts, all `extra='forbid'`); the key reference
for users is `hardware_profiles/README.md`.  `load_topology(path)` reads the file (a path, or the name
of a bundled profile: `planner.bundled_profiles.resolve_profile`), checks it, and builds the
immutable `Topology` the rest of the planner sees: devices numbered 0..n-1 in listing order (hosts in order, groups
in order, `count` expanded), named ``<host>/<name_prefix><index>`` with the index counted per prefix within a host
(so a host's GPUs are gpu0..gpu7 however many groups list them), and a link for every ordered device pair:

* the same device: `LOCAL` (free);
* two devices of one group that sets `intra_group`: that link;
* two devices of one host: the host's `intra_host` if it sets one, else `links.intra_host`;
* two hosts: `links.inter_host`.

Bandwidths are per direction for one device pair transferring alone (`hardware_profiles/README.md`): contention between
concurrent transfers is not modelled here.

Every problem with the file is an `InputError` with a one-line message ``<file>: <key path>: <what is wrong>``.
"""

import datetime
import difflib
import hashlib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, ValidationError
from pydantic_core import ErrorDetails

from planner.bundled_profiles import DEFAULT_PROFILE, PROFILES_DIR, bundled_profile_names, resolve_profile
from planner.errors import InputError
from planner.ir.op_workload import RULES
from planner.ir.topology import LOCAL, Device, Link, Topology
from planner.ir.units import UnitError, to_bytes, to_bytes_per_s, to_flops_per_s, to_seconds

__all__ = ["DEFAULT_PROFILE", "PROFILES_DIR", "Profile", "Provenance", "load_topology", "topology_from_profile"]



# --- field types: a unit string (or plain SI number) checked and converted on the way in ------------------------


def _quantity(convert: Callable[[object], Any], *, positive: bool) -> Callable[[object], Any]:
    def check(value: object) -> Any:
        out = convert(value)  # UnitError is a ValueError: pydantic reports it at the field's location
        if positive and out <= 0:
            raise UnitError(f"must be positive, got {value!r}")
        return out

    return check


Size = Annotated[int, BeforeValidator(_quantity(to_bytes, positive=True))]
Bandwidth = Annotated[float, BeforeValidator(_quantity(to_bytes_per_s, positive=True))]
Flops = Annotated[float, BeforeValidator(_quantity(to_flops_per_s, positive=True))]
Duration = Annotated[float, BeforeValidator(_quantity(to_seconds, positive=False))]
Name = Annotated[str, Field(min_length=1, pattern=r"^[^/\s]+$")]
Count = Annotated[StrictInt, Field(gt=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PeakFlops(_Model):
    """Peak FLOP/s per ONNX element type name.  `float` (fp32) is required; a missing type falls back to it.

    `float` is fp32 on ordinary (non-tensor-core) units: what an ONNX float MatMul gets under PyTorch's default
    (``torch.backends.cuda.matmul.allow_tf32 = False``).  `tfloat32` is not an ONNX type: it is the TF32
    tensor-core rate that float MatMuls get when TF32 is switched on; a cost model may use it when asked to.
    """

    float: Flops
    double: Flops | None = None
    tfloat32: Flops | None = None
    float16: Flops | None = None
    bfloat16: Flops | None = None
    float8e4m3fn: Flops | None = None
    float8e5m2: Flops | None = None
    int8: Flops | None = None
    uint8: Flops | None = None


class LinkSpec(_Model):
    """A point-to-point path: time(n bytes) = latency + n / bandwidth, bandwidth per direction.

    `send_overhead` and `recv_overhead` (optional, `plan-calibrate` measures them): the runtime's fixed cost of
    one transfer on the sending rank (packing and posting the send) and on the receiving rank (posting the
    receive), which a ping-pong's latency does not see (its ranks do nothing else).  The planner's link has one
    fixed term, so both are added to its latency (`topology_from_profile`); absent, the link is priced as before.
    """

    name: str | None = None
    latency: Duration
    bandwidth: Bandwidth
    send_overhead: Duration | None = None
    recv_overhead: Duration | None = None


_OP_TYPES = frozenset(op_type for _, op_type in RULES)


def _check_op_types(table: dict[str, float]) -> dict[str, float]:
    """Every key of an `op_cost_factors` table must be an op type the cost model knows (a typo would otherwise be
    a factor that silently applies to nothing)."""
    by_lower = {t.lower(): t for t in _OP_TYPES}
    for key in table:
        if key in _OP_TYPES:
            continue
        close = [by_lower[key.lower()]] if key.lower() in by_lower else difflib.get_close_matches(
            key, sorted(_OP_TYPES), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else "keys are ONNX op types with a cost rule, e.g. Conv, MatMul"
        raise ValueError(f"unknown op type {key!r} ({hint})")
    return table


Factor = Annotated[float, Field(gt=0, allow_inf_nan=False)]
OpCostFactors = Annotated[dict[str, Factor], AfterValidator(_check_op_types)]


class DeviceGroup(_Model):
    """`count` identical devices.  `op_cost_factors` (optional, `plan-calibrate` writes it): op type -> a positive
    multiplier of the roofline term of that type's ops on these devices (`planner.cost.compute`); unlisted types 1.
    `op_overhead` (optional, `plan-calibrate` measures it): seconds per op that a rank of our runtime pays beyond
    `launch_overhead` (its loop around each op: checking reads, the trace's bookkeeping, releasing tensors); added
    to the launch overhead of every op (`topology_from_profile`); absent, ops are priced as before.
    """

    kind: str = Field(min_length=1)
    count: Count = 1
    name_prefix: Name = "dev"
    peak_flops: PeakFlops
    memory: Size
    memory_bandwidth: Bandwidth
    launch_overhead: Duration
    intra_group: LinkSpec | None = None
    op_cost_factors: OpCostFactors | None = None
    op_overhead: Duration | None = None


class HostSharing(_Model):
    """How the devices (ranks) of one host share its processors (optional; `plan-calibrate` measures it on CPU
    hosts).  `effective_parallelism`: the host's compute throughput in solo ranks' worth (E: one rank computing
    alone runs at full speed; k ranks computing at once each run at min(1, E / k) of it); `measured_ranks`: how
    many ranks were computing at once when the device groups' compute figures were measured.  Read by the
    sharing-aware simulation (`planner.cost.sharing`); the planner's own pricing ignores it, so a profile prices
    the same with or without it."""

    effective_parallelism: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    measured_ranks: Count


class Host(_Model):
    name: Name
    devices: list[DeviceGroup] = Field(min_length=1)
    intra_host: LinkSpec | None = None
    sharing: HostSharing | None = None


class Links(_Model):
    intra_host: LinkSpec | None = None
    inter_host: LinkSpec | None = None


def _iso_date(value: object) -> str:
    """An ISO 8601 date or date-time (YAML may hand either over already parsed) -> its ISO text."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 date such as 2026-12-01T18:00:00+00:00, got {value!r}")
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"expected an ISO 8601 date such as 2026-12-01T18:00:00+00:00, got {value!r}") from None
    return value


class Provenance(_Model):
    """Where a measured profile's figures come from (`plan-calibrate` writes it): the machine, when, with what,
    under which concurrency and load, how each figure was measured and how much its repeats spread."""

    host: str = Field(min_length=1)
    date: Annotated[str, BeforeValidator(_iso_date)]
    tool: str = Field(min_length=1)
    torch_version: str | None = None
    nproc: Count | None = None
    threads_per_process: Count | None = None
    load_avg_1min: Annotated[float, Field(ge=0)] | None = None
    measured: dict[str, str] = Field(default_factory=dict)  # figure -> how it was measured
    spread: dict[str, str] = Field(default_factory=dict)  # figure -> spread of its repeats


class Profile(_Model):
    """The whole hardware file."""

    name: str = Field(min_length=1)
    description: str | None = None
    source: str | None = None
    provenance: Provenance | None = None
    hosts: list[Host] = Field(min_length=1)
    links: Links = Links()


# --- reading the file ------------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path, shown: str) -> tuple[object, str]:
    if not path.exists():
        raise InputError("hardware profile not found", path=shown,
                         fix=f"give a path, or the name of a profile bundled in {PROFILES_DIR}: "
                             f"{', '.join(bundled_profile_names())}")
    if path.is_dir():
        raise InputError("is a directory, expected a hardware profile (.yaml)", path=shown)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the hardware profile: {err.strerror or err}", path=shown) from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start}); expected a YAML hardware profile", path=shown) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(f"not valid YAML{where}: {' '.join(str(problem).split())}", path=shown) from None
    return data, digest


# --- pydantic errors -> one line ------------------------------------------------------------------------------

_DTYPE_ALIASES = {
    "fp32": "float", "float32": "float", "f32": "float", "fp64": "double", "float64": "double",
    "fp16": "float16", "half": "float16", "bf16": "bfloat16", "tf32": "tfloat32", "fp8": "float8e4m3fn",
    "e4m3": "float8e4m3fn", "e5m2": "float8e5m2",
}


def _loc_text(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _strip(tp: object) -> object:
    """Optional[X] -> X, Annotated[X, ...] -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        else:
            return tp


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class validating the mapping at `loc` (for listing its valid keys)."""
    tp: object = Profile
    for part in loc:
        tp = _strip(tp)
        if isinstance(part, int) and typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        else:
            return None
    tp = _strip(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    valid = list(model.model_fields) if model is not None else []
    if model is PeakFlops and key.lower() in _DTYPE_ALIASES:
        return f"unknown key (did you mean '{_DTYPE_ALIASES[key.lower()]}'? peak_flops uses ONNX type names)"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)"
    return f"unknown key (valid keys: {', '.join(valid)})" if valid else "unknown key"


def _shown_input(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _describe(error: ErrorDetails) -> str:
    kind, loc = error["type"], tuple(error["loc"])
    if kind == "missing":
        return "missing required key"
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "too_short":
        return "must not be empty"
    if kind == "model_type":
        return f"expected a mapping of keys, got {_shown_input(error['input'])}"
    if kind == "string_pattern_mismatch":
        return f"must be a non-empty name without '/' or spaces, got {error['input']!r}"
    message = error["msg"].replace("Input should be", "should be")
    return f"{message}, got {_shown_input(error['input'])}"


def _one_line(err: ValidationError, shown: str) -> InputError:
    errors = err.errors(include_url=False)
    # A misspelt key also makes its correct spelling "missing": report the misspelling, it names the fix.
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    # Every problem is named (still one line): a user fixing one typo should not have to run again to meet the next.
    first, *others = [f"{_loc_text(tuple(e['loc']))}: {_describe(e)}" for e in errors]
    more = f" (and {len(others)} more): {'; '.join(others)}" if others else ""
    return InputError(f"{first}{more}", path=shown)


# --- profile -> Topology --------------------------------------------------------------------------------------


def _link(spec: LinkSpec, default_name: str) -> Link:
    """The planner's link: its latency carries the measured per-transfer costs on both sides when the profile
    has them (`LinkSpec`); without them the latency is the profile's, untouched."""
    latency = spec.latency
    for side in (spec.send_overhead, spec.recv_overhead):
        if side is not None:
            latency += side
    return Link(spec.name or default_name, latency, spec.bandwidth)


def _launch_overhead(group: DeviceGroup) -> float:
    """The devices' per-op fixed seconds: the launch overhead, plus the runtime's `op_overhead` when measured."""
    if group.op_overhead is None:
        return group.launch_overhead
    return group.launch_overhead + group.op_overhead


_Fail = Callable[[str, str], InputError]


def _check_hosts(profile: Profile, fail: _Fail) -> None:
    """Host names are unique, and a profile with several hosts names its inter-host link."""
    host_seen: dict[str, int] = {}
    for h, host in enumerate(profile.hosts):
        if host.name in host_seen:
            raise fail(f"hosts[{h}].name", f"duplicate host name {host.name!r} (also hosts[{host_seen[host.name]}])")
        host_seen[host.name] = h
    if len(profile.hosts) > 1 and profile.links.inter_host is None:
        raise fail("links.inter_host", f"missing required key (the profile lists {len(profile.hosts)} hosts)")


@dataclass
class _DeviceLayout:
    """Every device of a profile in index order, with the host and group it sits in and the links they declare."""

    devices: list[Device] = field(default_factory=list)
    host_of: list[int] = field(default_factory=list)
    group_of: list[tuple[int, int]] = field(default_factory=list)
    group_links: dict[tuple[int, int], Link] = field(default_factory=dict)
    host_links: dict[int, Link | None] = field(default_factory=dict)


def _device(name: str, host: Host, group: DeviceGroup, peak: dict[str, float]) -> Device:
    """The `Device` of one member of a device group."""
    return Device(
        name=name,
        kind=group.kind,
        host=host.name,
        # a plain dict: Topology must pickle (execute/ ships it to workers)
        peak_flops_per_s=dict(peak),
        memory_bytes=group.memory,
        memory_bandwidth_bytes_per_s=group.memory_bandwidth,
        launch_overhead_s=_launch_overhead(group),
        op_cost_factors=dict(group.op_cost_factors or {}),
    )


def _device_layout(profile: Profile, top_intra: Link | None, fail: _Fail) -> _DeviceLayout:
    """Expand the hosts' device groups into named devices (`host/prefixN`, each name used once)."""
    layout = _DeviceLayout()
    names: dict[str, str] = {}
    for h, host in enumerate(profile.hosts):
        layout.host_links[h] = _link(host.intra_host, f"hosts[{h}].intra_host") if host.intra_host else top_intra
        next_index: dict[str, int] = {}
        for g, group in enumerate(host.devices):
            where = f"hosts[{h}].devices[{g}]"
            if group.intra_group is not None:
                layout.group_links[h, g] = _link(group.intra_group, f"{where}.intra_group")
            peak = {dtype: rate for dtype, rate in group.peak_flops.model_dump().items() if rate is not None}
            for _ in range(group.count):
                index = next_index.get(group.name_prefix, 0)
                next_index[group.name_prefix] = index + 1
                name = f"{host.name}/{group.name_prefix}{index}"
                if name in names:
                    raise fail(f"{where}.name_prefix", f"device name {name!r} is used twice (also {names[name]})")
                names[name] = where
                layout.devices.append(_device(name, host, group, peak))
                layout.host_of.append(h)
                layout.group_of.append((h, g))
    return layout


def _pair_links(
    profile: Profile, layout: _DeviceLayout, inter: Link | None, fail: _Fail
) -> tuple[tuple[Link, ...], ...]:
    """The link matrix: local on the diagonal, inter-host across hosts, else the group's link or the host's."""
    host_of, group_of = layout.host_of, layout.group_of

    def pair_link(i: int, j: int) -> Link:
        if i == j:
            return LOCAL
        if host_of[i] != host_of[j]:
            assert inter is not None  # checked by _check_hosts
            return inter
        if group_of[i] == group_of[j] and group_of[i] in layout.group_links:
            return layout.group_links[group_of[i]]
        link = layout.host_links[host_of[i]]
        if link is None:
            h = host_of[i]
            raise fail(
                "links.intra_host",
                f"missing required key (host {profile.hosts[h].name!r} has several devices; "
                f"or set hosts[{h}].intra_host)",
            )
        return link

    n = len(layout.devices)
    return tuple(tuple(pair_link(i, j) for j in range(n)) for i in range(n))


def _profile_notes(profile: Profile) -> dict[str, str]:
    """The profile's description, source and provenance, where given, for reports."""
    notes = {key: value for key, value in (("description", profile.description), ("source", profile.source)) if value}
    if profile.provenance is not None:
        p = profile.provenance
        notes["provenance"] = f"measured by {p.tool} on {p.host}, {p.date}"
    return notes


def topology_from_profile(profile: Profile, *, source_path: str = "", source_sha256: str = "") -> Topology:
    """Build the `Topology` of a validated profile.  Raises `InputError` for cross-key problems."""
    shown = source_path or profile.name

    def fail(loc: str, message: str) -> InputError:
        return InputError(f"{loc}: {message}", path=shown)

    _check_hosts(profile, fail)
    top_intra = _link(profile.links.intra_host, "intra_host") if profile.links.intra_host else None
    inter = _link(profile.links.inter_host, "inter_host") if profile.links.inter_host else None
    layout = _device_layout(profile, top_intra, fail)
    return Topology(
        name=profile.name,
        devices=tuple(layout.devices),
        links=_pair_links(profile, layout, inter, fail),
        source_path=source_path,
        source_sha256=source_sha256,
        notes=_profile_notes(profile),
    )


def load_topology(path: str | Path) -> Topology:
    """Read a hardware profile (a path, or a bundled profile's name) and build its `Topology`.  Every problem with
    the file is a one-line `InputError` naming `path` as given; `Topology.source_path` is the file actually read."""
    shown = str(path)
    file = resolve_profile(path)
    data, digest = _read_yaml(file, shown)
    if data is None:
        raise InputError("file is empty; expected a hardware profile with keys name, hosts, links", path=shown)
    if not isinstance(data, dict):
        raise InputError(
            f"expected a mapping with keys name, hosts, links at the top level, got {_shown_input(data)}", path=shown
        )
    try:
        profile = Profile.model_validate(data)
    except ValidationError as err:
        raise _one_line(err, shown) from None
    source = shown if file == Path(path) else str(file)
    return topology_from_profile(profile, source_path=source, source_sha256=digest)
