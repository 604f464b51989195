"""A lower bound on the planned pipeline's makespan over *every* contiguous cut of both placement families *and*
a per-device memory cap: `cut_bound`'s heads-and-work bound sees no memory, so where half of DualPipe's bubble is
out of reach only because the cap binds, it proves nothing; this bound adds, per piece, the time the cap forces
its round trips to take.

**Scope.**  The pipelines of `cut_bound`'s families (``dualpipe``: K = p pieces, c = m/2 micro-batches per chain;
``v``: K = 2p chunks, c = m): one stage per piece, the pieces i and K-1-i of a cut on one device, every schedule
whose memory (`planner.pipeline.metrics`: a stage's parameters for the whole step, a piece's activation a from
its F's start, a_b = `activation_freed_by_b_bytes` of it freed when its B ends, the rest a_w = a - a_b when its W
ends, or all of it when a fused BW ends) stays within `cap` bytes on every device; no overlapped pairs that gain
(`cut_bound` has no bound there either).  Pieces cut further into
sub-stages (`planner.compare.subchunks`, granularity k > 1) are outside it: a sub-stage holds only its own share.

**The memory term.**  Fix a cut and a piece j = [x_j, x_{j+1}) of one chain on device D, which also hosts the
partner piece.  Write P_j for the piece's parameter bytes and room_j = cap - P_j: D's parameters are at least P_j
(relaxing away the partner's parameters and activations only enlarges the room, so the bound only gets weaker).
For each of the c micro-batches k, piece j holds a_j bytes over I_k = [start F(j, k), end B(j, k)) (or BW's end,
later still) and a_w of them over J_k = [start F(j, k), end W(j, k)).  So at any moment at most
A = floor(room_j / a_j) of the I_k overlap (and at most A_w = floor(room_j / a_w) of the J_k); room_j < a_j
(or < a_w) means no schedule of this cut fits at all.  Intervals whose overlap never exceeds A split into A
classes of pairwise disjoint intervals (interval graphs are perfect), so one class holds at least
q = ceil(c / A) of them, one after another.  Each I_k lasts at least the round trip
    L_j = F[x_j, n) + B[x_j, n) + 2 (changes after j) hop_min
(F(j, k), every later piece's forward, the loss, every later piece's input gradient back, B(j, k): a chain of
dependencies of one micro-batch, with a hop of at least hop_min at each later boundary joining two devices;
all-to-alls and rounding only lengthen it), and each J_k at least L_j + W_j (W(j, k) follows B(j, k)).  The
class's first interval starts no earlier than the piece's head h_j (`cut_bound`'s, from the schedule's first
start), and after the last I_k ends, micro-batch k's input gradient still runs through pieces j-1, ..., 0:
B[0, x_j) + changes(1..j) hop_min more.  Hence every schedule of the cut within the cap lasts at least
    M_j = max( h_j + q L_j + B[0, x_j) + hops(j) hop_min,  h_j + q_w (L_j + W_j) ),
with q = ceil(c / A), q_w = ceil(c / A_w) (q = 1 where the bytes are 0: one micro-batch's path alone).  F, B,
W are sums over the piece's positions of per-position ticks (`op_arrays`' rule: a preset's units rounded down),
at most the piece's.
a_j, a_w and P_j are exactly the pipeline's (`ModelCosts.stage_cost`, `PresetCosts.stage_cost`).

**The bound.**  Per cut, max( every `cut_bound` term T_i, every M_j ): a lower bound on every schedule of that
cut within the cap.  Its minimum over every cut of a family, and the lesser over the families, bounds every
schedule of those placements under any cut within the cap; it is never below `cut_bound`'s value (its terms
include `cut_bound`'s).  M_j depends on (x_j, x_{j+1}) only, so the minimum comes from `cut_bound`'s nested-pairs table
(`good_i[l, r]`: pairs i..K/2-1 can meet T given x_i = l, x_{K-i} = r) with each piece's term as a mask on its two
boundaries: O(n^3) per level per probe, a binary search over T from `cut_bound`'s value.  The search returns the
least T it could not rule out (within `ComparePolicy.cut_bound_rel_tol`), at most the minimum: still a bound.
Where no cut fits the cap at all, the bound is infinite.

**What it does not see**: the partner piece's bytes on the device, the work the device does between a class's
intervals, the head and work terms beside the memory term of the same piece (each is bounded alone), and any
interaction between devices.  So it rises above `cut_bound`'s value only where every cut that meets the latter
puts a costly round trip behind a piece whose stash the cap holds to a few micro-batches; the cuts that meet
`cut_bound` on a large model start with small pieces (little stash, a short head), where the cap is slack, and
there the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, ComparePolicy
from planner.compare.cut_bound import (
    FAMILIES,
    _cut_meeting,
    _family_shape,
    _heads,
    _search,
    crossing_ticks,
    family_terms,
)
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import PresetCosts
from planner.cost.training_costs import TrainingCosts

__all__ = ["CutMemoryArrays", "cut_memory_arrays", "every_cut_memory_bound_tick", "family_cut_memory_bound_tick",
           "memory_terms", "work_upper_tick"]

_INF = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class CutMemoryArrays:
    """Per position (f, b, w: forward, input-gradient and weight-gradient ticks, each at most the position's share
    of any piece's ticks) and per piece [l, r) (`act[l, r]`, `act_w[l, r]`: its activation bytes and the part held
    until W ends; `param[l, r]`: its parameter bytes; 0 where l >= r)."""

    f: np.ndarray
    b: np.ndarray
    w: np.ndarray
    act: np.ndarray
    act_w: np.ndarray
    param: np.ndarray


def cut_memory_arrays(costs: ModelCosts | PresetCosts) -> CutMemoryArrays | None:
    """The arrays of `costs` (module docstring), or None where the p devices price a position differently."""
    p = costs.num_devices
    if isinstance(costs, PresetCosts):
        devices = costs.topology.devices[:p]
        rows = [[[sum(x) for x in zip(*(costs.priced_seconds(op, dev) for op in unit), strict=True)] if unit
                 else [0.0] * 3 for dev in devices] for unit in costs.units]
        if any(any(r != unit[0] for r in unit) for unit in rows):
            return None
        fbw = np.array([[math.floor(x / costs.tick_s) for x in u[0]] for u in rows], dtype=np.int64)
        a = np.array([sum(op.activation_bytes for op in u) for u in costs.units], dtype=np.int64)
        ab = np.array([sum(op.freed_by_b_bytes for op in u) for u in costs.units], dtype=np.int64)
        par = np.array([sum(op.param_bytes for op in u) for u in costs.units], dtype=np.int64)
        act, act_w = _additive(a), _additive(a - ab)
        return CutMemoryArrays(fbw[:, 0], fbw[:, 1], fbw[:, 2], act, act_w, _additive(par))
    inst = costs.instance
    dur = inst.duration_tick[:, :p]
    if not bool((dur == dur[:, :1]).all()):
        return None
    order = list(inst.topological_order)
    f = np.array([int(dur[t, 0]) for t in order], dtype=np.int64)
    par = _additive(np.array([int(inst.param_bytes[t]) for t in order], dtype=np.int64))
    tr = costs.training
    if tr is None:  # the stage rule: B = W = F, the outputs held until W
        act = _additive(np.array([int(inst.activation_bytes[t]) for t in order], dtype=np.int64))
        return CutMemoryArrays(f, f.copy(), f.copy(), act, act.copy(), par)
    for grad in (tr.input_grad_tick, tr.weight_grad_tick):
        if not bool((grad[:, :p] == grad[:, :1]).all()):
            return None
    b = np.array([int(tr.input_grad_tick[t, 0]) for t in order], dtype=np.int64)
    w = np.array([int(tr.weight_grad_tick[t, 0]) for t in order], dtype=np.int64)
    act, act_w = _stash_tables(tr, order)
    return CutMemoryArrays(f, b, w, act, act_w, par)


def _stash_tables(tr: TrainingCosts, order: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per piece [l, r) of `order`, (activation bytes, the part held until W): `TrainingCosts.stage_activation_bytes`
    of the piece, grown one op at a time from each l (the stash is a union of tensors, not a sum)."""
    n = len(order)
    act = np.zeros((n + 1, n + 1), dtype=np.int64)
    act_w = np.zeros((n + 1, n + 1), dtype=np.int64)
    size = tr.tensor_bytes
    for lo in range(n):
        until_w: set[str] = set()
        union: set[str] = set()
        union_b = w_b = private = private_b = 0  # bytes of the union, of until_w, private, private freed by B
        for hi in range(lo + 1, n + 1):
            t = order[hi - 1]
            op = tr.ops[t]
            if op is None:  # a task of the graph alone: its output, held until W
                private += int(tr.output_bytes[t])
            else:
                for x in op.stash_w:
                    if x not in until_w:
                        until_w.add(x)
                        w_b += size.get(x, 0)
                for x in (*op.stash_w, *op.stash_b):
                    if x not in union:
                        union.add(x)
                        union_b += size.get(x, 0)
                private += op.private_bytes
                if not op.private_until_w:
                    private_b += op.private_bytes
            total, freed = union_b + private, (union_b - w_b) + private_b
            act[lo, hi], act_w[lo, hi] = total, total - freed
    return act, act_w


def _additive(per_position: np.ndarray) -> np.ndarray:
    """[l, r] -> the sum over positions l..r-1 (0 where l >= r)."""
    pre = np.concatenate([[0], np.cumsum(per_position)])
    out = pre[None, :] - pre[:, None]
    return np.where(out > 0, out, 0).astype(np.int64)


def _rounds(c: int, room: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """q = ceil(c / floor(room / bytes)) per piece: 1 where the piece holds no bytes, -1 where one micro-batch
    does not fit (or the room is negative)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        held = np.where(nbytes > 0, np.floor_divide(np.maximum(room, 0), np.maximum(nbytes, 1)), c)
    q = np.where(held >= 1, -(-c // np.maximum(held, 1)), -1)
    q = np.where(nbytes > 0, q, 1)
    return np.where(room >= 0, q, -1).astype(np.int64)  # the parameters alone over the cap: nothing fits


def _memory_tables(arr: CutMemoryArrays, crossing: np.ndarray, family: str, p: int, m: int,
                   cap: int) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """(c, per piece j its head h_j by first position, per piece j the matrix M_j[l, r] of the module docstring
    for the piece [l, r) (`_INF` where l >= r or where it does not fit the cap))."""
    k, c, hops, changes = _family_shape(family, p, m)
    n = len(arr.f)
    fp = np.concatenate([[0], np.cumsum(arr.f)])
    bp = np.concatenate([[0], np.cumsum(arr.b)])
    wp = np.concatenate([[0], np.cumsum(arr.w)])
    heads = _heads(fp, crossing, hops, changes)
    hop_min = int(crossing[1:n].min()) if n >= 2 else 0
    total_changes = sum(1 for j in range(1, k) if changes[j])
    room = cap - arr.param
    q = _rounds(c, room, arr.act)
    q_w = _rounds(c, room, arr.act_w)
    lower = np.arange(n + 1)[:, None] < np.arange(n + 1)[None, :]
    terms = []
    for j in range(k):
        trip = (fp[-1] - fp) + (bp[-1] - bp) + 2 * (total_changes - hops[j]) * hop_min  # L_j by x_j
        back = bp + hops[j] * hop_min  # the input gradient's way from piece j to the first piece
        w_piece = wp[None, :] - wp[:, None]
        via_b = heads[j][:, None] + q * trip[:, None] + back[:, None]
        via_w = heads[j][:, None] + q_w * (trip[:, None] + w_piece)
        ok = lower & (q > 0) & (q_w > 0)
        terms.append(np.where(ok, np.maximum(via_b, via_w), _INF))
    return c, heads, terms


def memory_terms(costs: ModelCosts | PresetCosts, family: str, p: int, m: int, cap: int,
                 cut: Sequence[int]) -> list[float]:
    """M_j of the module docstring for each piece j of the cut with boundaries `cut` (x_0 = 0, ..., x_K = n);
    inf for a piece whose one micro-batch does not fit the cap; [] where `cut_memory_arrays` is None.  A direct
    evaluation of one cut (tests, and reading one cut)."""
    arr = cut_memory_arrays(costs)
    if arr is None:
        return []
    _, _, terms = _memory_tables(arr, crossing_ticks(costs), family, p, m, cap)
    out: list[float] = []
    for j in range(len(cut) - 1):
        v = int(terms[j][cut[j], cut[j + 1]])
        out.append(math.inf if v >= _INF else float(v))
    return out


def _feasible(t: int, gp: np.ndarray, heads: Sequence[np.ndarray], terms: Sequence[np.ndarray], c: int) -> bool:
    """Is there a cut into K = len(heads) pieces whose every `cut_bound` term T_i and every memory term M_j is at
    most t?  `cut_bound`'s nested-pairs table with each piece's memory term as a mask on its boundaries."""
    n = len(gp) - 1
    k = len(heads)
    q = k // 2
    ok = [x <= t for x in terms]  # [l, r]: piece [l, r) meets its memory term (l < r built in)
    g = gp[None, :] - gp[:, None]  # G(l, r)
    # middle pair q-1: pieces [l, x) and [x, r): h_{q-1}(l) + c G(l, r) <= t and h_q(x) + c G(x, r) <= t
    right = ok[q] & (heads[q][:, None] + c * g <= t)  # [x, r]
    # some x joins them (a product of 0/1 matrices in float: exact up to 2^24 positions, and BLAS-fast)
    through = (ok[q - 1].astype(np.float32) @ right.astype(np.float32)) > 0.5
    good = through & (heads[q - 1][:, None] + c * g <= t)
    for i in range(q - 2, -1, -1):
        j = k - 1 - i  # pair i's pieces [l, l') and [r', r)
        cond_r = ok[j] & (heads[j][:, None] + c * g <= t)  # [r', r]
        # q_min[l', r] = min over r' with good[l', r'] and cond_r[r', r] of gp[l'] - gp[r'] (largest r')
        q_min = np.full((n + 1, n + 1), _INF, dtype=np.int64)
        for r in range(1, n + 1):
            hit = good[:, :r] & cond_r[:r, r][None, :]
            rows = hit.any(axis=1)
            if rows.any():
                last = r - 1 - np.argmax(hit[:, ::-1], axis=1)
                q_min[rows, r] = gp[rows] - gp[last[rows]]
        # good_i[l, r]: some l' with ok_i[l, l'] and h_i(l) + c (gp[l'] - gp[l] + gp[r] - gp[r']) <= t
        nxt = np.zeros((n + 1, n + 1), dtype=bool)
        for lo in range(n + 1):
            cand = ok[i][lo]
            if not cand.any():
                continue
            best = q_min[cand].min(axis=0)  # [r]
            nxt[lo] = (best < _INF) & (heads[i][lo] + c * (best - gp[lo] + gp) <= t)
        good = nxt
    return bool(good[0, n])


def family_cut_memory_bound_tick(costs: ModelCosts | PresetCosts, family: str, p: int, m: int, cap: int,
                                 policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> float | None:
    """The least makespan max(T_i, M_j) can have over every cut of `costs`' positions for `family` under the
    per-device cap `cap` bytes, within `policy.cut_bound_rel_tol` below (module docstring); inf where no cut fits
    the cap; None where `cut_bound` has no bound (devices that differ, overlapped pairs that gain, too many
    positions)."""
    searched = _search(costs, family, p, m, policy)
    arr = cut_memory_arrays(costs)
    if searched is None or arr is None:
        return None
    plain, plain_hi, plain_gp, plain_heads, _ = searched
    c, heads, terms = _memory_tables(arr, crossing_ticks(costs), family, p, m, cap)
    gp = np.concatenate([[0], np.cumsum(arr.f + arr.b + arr.w)])
    # `cut_bound`'s G is op_arrays' forward + B + W; on a model the training B and W are the same per-position
    # ticks, on a preset the same rounded-down units: the T_i here are its terms

    def feasible(t: int) -> bool:
        return _feasible(t, gp, heads, terms, c)

    lo = int(plain) - 1  # ruled out: `cut_bound`'s search could not rule out `plain` only
    # an upper end: the value of the cut that meets `cut_bound`'s (all its terms, the memory ones too), when the
    # cap lets it run (often near the answer), else one above every finite term (every cut that fits meets it)
    met = _cut_meeting(plain_hi, plain_gp, plain_heads, c)
    hi = max(max(int(terms[j][met[j], met[j + 1]]) for j in range(len(met) - 1)),
             max(family_terms(costs, family, p, m, met)))
    if hi >= _INF:
        finite = [x[x < _INF] for x in terms]
        hi = int(max((int(x.max()) for x in finite if x.size), default=0)) + int(plain) + c * int(gp[-1]) + 1
        if not feasible(hi):  # every cut leaves some piece without room for one micro-batch
            return math.inf
    if feasible(lo + 1):  # the cap binds nowhere it matters: `cut_bound`'s value
        hi = lo + 1
    while hi - lo > max(1, int(policy.cut_bound_rel_tol * hi)):
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return float(lo + 1)


def every_cut_memory_bound_tick(costs: ModelCosts | PresetCosts, p: int, m: int, cap: int,
                                families: Sequence[str] = FAMILIES,
                                policy: ComparePolicy = DEFAULT_COMPARE_POLICY
                                ) -> tuple[float | None, dict[str, float | None]]:
    """The least of `family_cut_memory_bound_tick` over `families` (a bound on every schedule of those placements
    under every cut within the cap; None when one of them has none), with each family's value (DualPipe's only
    when p and m are even, as `compare` solves it)."""
    got: dict[str, float | None] = {}
    for fam in families:
        if fam == "dualpipe" and (p % 2 or m % 2):
            continue
        got[fam] = family_cut_memory_bound_tick(costs, fam, p, m, cap, policy)
    values = list(got.values())
    if not values or any(v is None for v in values):
        return None, got
    return min(v for v in values if v is not None), got


def work_upper_tick(costs: ModelCosts | PresetCosts, p: int, m: int) -> int | None:
    """An upper bound on the compute work (F + B + W ticks of every micro-batch, all devices) of any cut of either
    family, for the half-bubble makespan of any cut (`memory_bound_note.half_bubble_tick_of_work` grows with the
    work).  A preset's piece rounds each pass's seconds up once, at most the sum of its units' rounded-up ticks;
    a model's piece has its ops' F ticks, and B and W of at least one tick each (one more than its ops' sum at
    most, 2p pieces at most).  None where the p devices price a position differently."""
    arr = cut_memory_arrays(costs)
    if arr is None:
        return None
    if isinstance(costs, PresetCosts):
        dev = costs.topology.devices[0]
        per_mb = sum(math.ceil(sum(s[i] for s in secs) / costs.tick_s)
                     for secs in ([costs.priced_seconds(op, dev) for op in unit] for unit in costs.units if unit)
                     for i in range(3))
        return m * int(per_mb)
    extra = 0 if costs.training is None else 2 * 2 * p  # the stage rule's B = W = F have no floor
    return m * (int(arr.f.sum() + arr.b.sum() + arr.w.sum()) + extra)
