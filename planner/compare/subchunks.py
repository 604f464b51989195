"""Operator-cluster granularity for the planned pipeline: every piece of a cut split into sub-chunks.

At stage granularity a piece's forward, input-gradient and weight-gradient work are one task each per
micro-batch: a piece's all-to-all cannot overlap its own attention of another micro-batch, and one long B blocks
its device.  Here every piece (stage, or chunk of a V) of the chosen cut is split into k consecutive *sub-chunks*
on the same device, and each sub-chunk is a stage of its own in a finer `TrainingPipeline`:

* **Where to cut** (`split_piece`).  A sub-chunk is a contiguous range of the piece's positions (in the
  instance's topological order, so every edge still goes from a sub-chunk to the same or a later one).  Cuts go
  first where they pay: just before an MoE dispatch op and just after an MoE combine op
  (`planner.ir.moe_structure`: the experts, with their all-to-alls, become sub-chunks of their own, apart from
  the attention before and the rest after); among those, greedily the one that minimises the heaviest
  sub-chunk's F + B + W.  When no such boundary is left, the heaviest sub-chunk is halved (balanced on
  F + B + W).
* **Costs** (`subchunk_costs`).  F, B, W of a sub-chunk are the sums over its ops (`TrainingCosts.stage_ticks`;
  without per-op costs, B = W = F), so the sub-chunks' F, B, W sum to the piece's *exactly*: the piece clamps
  its B and W to at least one tick (`ModelCosts.stage_cost`); a sub-chunk gets at least one tick too, taken
  from its piece's largest sub-chunk of that kind, so that the sums still match (a piece with fewer ticks of B or
  W than k gets fewer sub-chunks, `fine_pipeline`).  Activation memory: every
  stashed tensor of the piece belongs to the first sub-chunk that stashes it (allocated at that sub-chunk's
  forward, freed with its B when only input gradients read it, else with its W), private stash to its op; the
  sub-chunks' activation bytes (and the part B frees) therefore also sum to the piece's, and are freed sub-chunk
  by sub-chunk (finer freeing).  Not modelled: a tensor owned by sub-chunk i that a later sub-chunk's W also
  reads is freed with W of sub-chunk i, which may run before that later W.  Parameters: the sum of its ops'.
  All-to-all (`a2a_at`): ``experts`` (this module's default, what the model does) — `ModelCosts.a2a_tick` of the
  sub-chunk's ops: the dispatch ops sit in the experts' sub-chunk, so its dispatch runs before it and its
  combine after it, backward mirrored (`planner.pipeline.unroll`); the compute stream then waits for the
  all-to-all between two sub-chunks of one micro-batch unless the schedule runs another micro-batch meanwhile.
  ``piece`` — where the stage-level model puts them (what the baselines are measured with): the piece's
  dispatch before its first sub-chunk's forward and the combine after its last one (backward mirrored:
  `StageCost.a2a_kinds`; plan-compare's default, ``--subchunk-a2a``).
* **Hops.**  Between two sub-chunks of one piece: 0 (same device, `unroll` then adds a plain edge, no send).
  From a piece's last sub-chunk: the piece's hop (every tensor crossing the piece boundary, `ModelCosts.hop_ticks`).
* **Chains.**  Each chain (c_0, c_1, ...) of the stage-level pipeline becomes (subs(c_0)..., subs(c_1)..., ...);
  every placement (fixed, V, DualPipe's two chains) is kept: a sub-chunk sits on its piece's device.

`expand_schedule` turns a stage-level schedule into a sub-chunk schedule: F(s, m) -> the forwards of s's
sub-chunks in chain order, B(s, m) -> their input gradients in reverse, W(s, m) -> their weight gradients in
reverse (each after its B), BW the same; an overlapped pair F&B is un-paired (its forward's expansion, then its
backward's).  With the all-to-alls at the piece boundaries (``piece``) it runs, simulated on the sub-chunk
pipeline, exactly as long as the stage-level schedule (each block of sub-chunk tasks lasts what the piece's task
lasted and waits for what it waited for; the tests check it on every baseline).  With ``experts`` it is longer
by the all-to-all time it leaves exposed between sub-chunks (on the bundled MoE, DualPipe's expansion +0.9 % at
k = 3, the stage-level opplan's +4 %): the stage-level model hid that cost.

`auto_granularity` picks k (``plan-compare --granularity auto``; the default there is 1): the largest of the policy's
`auto_granularities` whose sub-chunk pipeline has at most `fine_task_limit` compute tasks (`ComparePolicy`; a size whose
model CP-SAT builds and keeps its warm start on within plan-compare's default budget; above it CP-SAT does not improve
the warm start within such a budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, ComparePolicy
from planner.compare.model_costs import ModelCosts
from planner.errors import InputError
from planner.pipeline.unroll import StageCost, TrainingPipeline
from planner.schedule.actions import Action, ActionKind, OverlapAction
from planner.schedule.program import Schedule

__all__ = ["A2A_AT", "FinePipeline", "auto_granularity", "expand_schedule",
           "fine_pipeline", "moe_boundaries", "split_piece", "subchunk_costs"]

A2A_AT = ("experts", "piece")  # where a piece's all-to-alls sit among its sub-chunks (module docstring)


@dataclass(frozen=True)
class FinePipeline:
    """A sub-chunk pipeline: `pipeline` has one stage per sub-chunk; `subs[s]` are the sub-chunk stages of the
    stage-level pipeline's stage s, in chain order; `positions[s]` their op positions; `k` the granularity
    asked for (a piece with fewer ops gets fewer sub-chunks)."""

    pipeline: TrainingPipeline
    subs: tuple[tuple[int, ...], ...]
    positions: tuple[tuple[tuple[int, ...], ...], ...]
    k: int

    @property
    def num_compute_tasks(self) -> int:
        return 3 * self.pipeline.num_stages * self.pipeline.num_microbatches


def moe_boundaries(costs: ModelCosts, positions: Sequence[int]) -> list[int]:
    """Indices i (0 < i < len(positions)) where a cut before positions[i] separates MoE work: before a dispatch
    op, after a combine op (`planner.ir.moe_structure`; none without `costs.moe`)."""
    if costs.moe is None:
        return []
    order, names = costs.instance.topological_order, costs.instance.task_names
    at = {names[order[q]]: i for i, q in enumerate(positions)}
    out: set[int] = set()
    for layer in costs.moe.layers:
        out.update(at[n] for n in layer.dispatch_ops if n in at)
        out.update(at[n] + 1 for n in layer.combine_ops if n in at)
    return sorted(i for i in out if 0 < i < len(positions))


def _op_work(costs: ModelCosts, positions: Sequence[int], device: int) -> list[int]:
    """F + B + W ticks of each op at `positions` on `device` (B = W = F without per-op costs)."""
    order = costs.instance.topological_order
    tasks = [order[q] for q in positions]
    tr = costs.training
    if tr is None:
        return [3 * int(costs.instance.duration_tick[t, device]) for t in tasks]
    return [int(tr.forward_tick[t, device]) + int(tr.input_grad_tick[t, device]) + int(tr.weight_grad_tick[t, device])
            for t in tasks]


def split_piece(costs: ModelCosts, positions: Sequence[int], device: int, k: int) -> tuple[tuple[int, ...], ...]:
    """`positions` (one piece, sorted) cut into at most k contiguous sub-chunks (module docstring: MoE boundaries
    first, greedily by the heaviest sub-chunk's work, then balanced halving)."""
    positions = tuple(positions)
    work = _op_work(costs, positions, device)
    prefix = [0]
    for x in work:
        prefix.append(prefix[-1] + x)

    def heaviest(cuts: Sequence[int]) -> int:
        b = [0, *sorted(cuts), len(positions)]
        return max(prefix[j] - prefix[i] for i, j in zip(b, b[1:], strict=False))

    cuts: set[int] = set()
    moe = moe_boundaries(costs, positions)
    while len(cuts) + 1 < min(k, len(positions)):
        options = [i for i in moe if i not in cuts]
        if options:
            cuts.add(min(options, key=lambda i: (heaviest([*cuts, i]), i)))
            continue
        b = [0, *sorted(cuts), len(positions)]
        lo, hi = max(((i, j) for i, j in zip(b, b[1:], strict=False) if j - i >= 2),
                     key=lambda r: (prefix[r[1]] - prefix[r[0]], -r[0]))
        # the cut of [lo, hi) whose larger half is smallest
        cuts.add(min(range(lo + 1, hi), key=lambda c: (max(prefix[c] - prefix[lo], prefix[hi] - prefix[c]), c)))
    b = [0, *sorted(cuts), len(positions)]
    return tuple(positions[i:j] for i, j in zip(b, b[1:], strict=False))


def _spread_to(values: list[int], total: int) -> list[int]:
    """`values` (each >= 0, summing to at most `total`) with every entry at least 1 and summing to `total`: the
    shortfall and each zero's tick come from the largest entries (the piece clamps its own B and W to one tick)."""
    out = list(values)
    out[max(range(len(out)), key=lambda i: out[i])] += total - sum(out)
    for i, v in enumerate(out):
        if v == 0:
            j = max(range(len(out)), key=lambda x: out[x])
            if out[j] < 2:
                raise InputError(f"a piece of {total} ticks cannot be split into {len(out)} sub-chunks of at "
                                 f"least one tick each", fix="use a smaller --granularity")
            out[j] -= 1
            out[i] = 1
    return out


def subchunk_costs(costs: ModelCosts, subs: Sequence[Sequence[int]], device: int, *,
                   a2a_at: str = "experts") -> tuple[StageCost, ...]:
    """The `StageCost` of each sub-chunk of one piece (`subs`: its sub-chunks' positions, in order) on `device`
    (module docstring: F, B, W, activation and parameter bytes sum to the piece's `ModelCosts.stage_cost`;
    `a2a_at` where the all-to-alls sit, one of `A2A_AT`)."""
    if a2a_at not in A2A_AT:
        raise InputError(f"unknown all-to-all placement {a2a_at!r}", fix=f"use one of {', '.join(A2A_AT)}")
    order, inst = costs.instance.topological_order, costs.instance
    tasks = [[order[q] for q in sub] for sub in subs]
    whole = costs.stage_cost([t for ts in tasks for t in ts], device)
    fs = [sum(int(inst.duration_tick[t, device]) for t in ts) for ts in tasks]
    params = [sum(int(inst.param_bytes[t]) for t in ts) for ts in tasks]
    a2a = [costs.a2a_tick(ts) if costs.a2a else 0 for ts in tasks]
    kinds: list[tuple[str, ...] | None] = [None] * len(tasks)
    if a2a_at == "piece" and len(tasks) > 1:  # the piece's all-to-alls where the stage level has them
        a2a = [int(whole.a2a_tick)] + [0] * (len(tasks) - 2) + [int(whole.a2a_tick)]
        first: tuple[str, ...] = ("DISPATCH_F", "COMBINE_B")
        last: tuple[str, ...] = ("COMBINE_F", "DISPATCH_B")
        kinds = [first, *([None] * (len(tasks) - 2)), last]
    tr = costs.training
    if tr is None:
        bs = ws = fs
        act = [sum(int(inst.activation_bytes[t]) for t in ts) for ts in tasks]
        freed = [0] * len(tasks)
    else:
        bs = [tr.stage_ticks(ts, device)[1] for ts in tasks]
        ws = [tr.stage_ticks(ts, device)[2] for ts in tasks]
        act, freed = _sub_activation(costs, tasks)
    bs = _spread_to(list(bs), int(whole.input_grad_tick))
    ws = _spread_to(list(ws), int(whole.weight_grad_tick))
    return tuple(StageCost(f, b, w, activation_bytes=a, param_bytes=pb, activation_freed_by_b_bytes=fr, a2a_tick=x,
                           a2a_kinds=kd)
                 for f, b, w, a, pb, fr, x, kd in zip(fs, bs, ws, act, params, freed, a2a, kinds, strict=True))


def _sub_activation(costs: ModelCosts, tasks: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """(activation bytes, part freed by B) per sub-chunk: each stashed tensor owned by the first sub-chunk that
    stashes it, only-B tensors decided over the whole piece (as `TrainingCosts.stage_activation_bytes`)."""
    tr = costs.training
    assert tr is not None
    owner: dict[str, int] = {}
    until_w: set[str] = set()
    until_b: set[str] = set()
    act = [0] * len(tasks)
    freed = [0] * len(tasks)
    for i, ts in enumerate(tasks):
        for t in ts:
            op = tr.ops[t]
            if op is None:  # a task graph: its output, held until W (as the piece's accounting)
                act[i] += int(tr.output_bytes[t])
                continue
            for x in (*op.stash_w, *op.stash_b):
                owner.setdefault(x, i)
            until_w.update(op.stash_w)
            until_b.update(op.stash_b)
            act[i] += op.private_bytes
            if not op.private_until_w:
                freed[i] += op.private_bytes
    only_b = until_b - until_w
    for x, i in owner.items():
        nbytes = tr.tensor_bytes.get(x, 0)
        act[i] += nbytes
        if x in only_b:
            freed[i] += nbytes
    return act, freed


def fine_pipeline(costs: ModelCosts, name: str, p: int, m: int, k: int, *, a2a_at: str = "experts") -> FinePipeline:
    """The sub-chunk pipeline of the schedule `name`'s pipeline on `costs` (module docstring), k sub-chunks per
    piece (fewer where a piece has fewer ops, or too few ticks of B or W for k); `a2a_at` one of `A2A_AT`."""
    if k < 1:
        raise InputError(f"granularity must be >= 1, got {k}")
    coarse = costs.pipeline(name, p, m)
    lay = costs.layout(name, p, m)
    stages: list[StageCost] = []
    hops: list[int] = []
    std: list[int] = []
    subs: list[tuple[int, ...]] = []
    positions: list[tuple[tuple[int, ...], ...]] = []
    split_of: dict[tuple[tuple[int, ...], int], tuple[tuple[tuple[int, ...], ...], tuple[StageCost, ...]]] = {}
    for s, pos in enumerate(lay.pieces):
        dev = lay.stage_to_device[s]
        # DualPipe's two copies of a chunk are split alike (identical devices give identical splits anyway)
        if (pos, dev) not in split_of:
            split_of[pos, dev] = _split_with_costs(costs, pos, dev, k, a2a_at)
        parts, sub_costs = split_of[pos, dev]
        first = len(stages)
        stages += sub_costs
        hops += [0] * (len(parts) - 1) + [int(lay.hops[s])]
        std += [dev] * len(parts)
        subs.append(tuple(range(first, len(stages))))
        positions.append(parts)
    chains = tuple(tuple(x for s in chain for x in subs[s]) for chain in lay.chains)
    pipe = TrainingPipeline(tuple(stages), coarse.num_microbatches, p, tuple(std), chains, 0, f"{name}-k{k}",
                            coarse.overlap_tick, tuple(hops), coarse.comm_stream, coarse.fb_overlap)
    return FinePipeline(pipe, tuple(subs), tuple(positions), k)


def _split_with_costs(costs: ModelCosts, pos: tuple[int, ...], device: int, k: int,
                      a2a_at: str) -> tuple[tuple[tuple[int, ...], ...], tuple[StageCost, ...]]:
    """`split_piece` and `subchunk_costs` of one piece, with fewer sub-chunks where k of them cannot each get a
    tick of B and W (a piece without parameters has W = 1 tick: it stays whole)."""
    for j in range(k, 0, -1):
        parts = split_piece(costs, pos, device, j)
        try:
            return parts, subchunk_costs(costs, parts, device, a2a_at=a2a_at)
        except InputError:
            if j == 1:
                raise
    raise AssertionError("unreachable: k >= 1")


def expand_schedule(schedule: Schedule, fine: FinePipeline, name: str | None = None) -> Schedule:
    """A stage-level schedule of the pipeline `fine` was made from, as a schedule of the sub-chunk pipeline
    `fine` (module docstring): sub-chunk forwards in chain order, backwards in reverse; pairs un-paired."""
    def expand(a: Action) -> list[Action]:
        order = fine.subs[a.stage] if a.kind is ActionKind.F else tuple(reversed(fine.subs[a.stage]))
        return [Action(x, a.kind, a.microbatch) for x in order]

    rows = tuple(tuple(x for a in row if a.is_compute  # SEND/RECV: the communication streams order those
                       for part in ((a.forward, a.backward) if isinstance(a, OverlapAction) else (a,))
                       for x in expand(part))
                 for row in schedule.actions)
    std = [0] * fine.pipeline.num_stages
    for s, xs in enumerate(fine.subs):
        for x in xs:
            std[x] = schedule.stage_to_device[s]
    return Schedule(rows, len(std), schedule.num_microbatches, tuple(std), name or schedule.name)


def auto_granularity(coarse: TrainingPipeline, policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> int:
    """k for the planned row (module docstring): the largest of `policy.auto_granularities` with at most
    `policy.fine_task_limit` compute tasks, else 1 (the stage-level pipeline is already as large as CP-SAT
    handles)."""
    tasks = 3 * coarse.num_stages * coarse.num_microbatches
    return next((k for k in policy.auto_granularities if k * tasks <= policy.fine_task_limit), 1)
