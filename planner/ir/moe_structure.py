"""Mixture-of-experts layers found from the op graph's structure, never from op names (`find_moe_layers`).

Exported models name their ops ``node_GatherND_12``; what identifies an MoE layer is its dataflow.  Per layer:

1. **Router** (`planner.ir.moe_routers`).  A product of the hidden state X (tokens x hidden: hidden is X's last
   dimension, tokens the product of the others) with a constant weight, its logits or their softmax/sigmoid, and
   the ops that pick experts: a ``TopK`` over the experts (top-k), one ``ArgMax`` (top-1, Switch Transformers),
   several ``ArgMax`` each after masking the previous pick (sparse mixer, PhiMoE), or a ``TopK`` over the tokens
   (expert choice); noise added to the logits or a jitter of X is passed through.  The router ops are every op
   from X to the picks and every op downstream of the picks that is not token data (masks, gates, indices) up to
   the layer's end.  A router with no layer after it is named in the no-MoE line (what was seen instead).
2. **Token data.**  X and the tensors that are X reshaped or cast (`SHAPE`) are the layer's tokens; the ops fed
   by them, other than the router, carry token data.  The layer ends at their immediate post-dominator (the first
   op every path from the tokens to the graph outputs passes), moved on past ops whose other inputs are routing
   data (a ScatterND that puts concatenated expert rows back at their tokens' positions): the combine's last op.
3. **Dispatch and combine.**  A token op with a routing input (a tensor the router ops produce) is a *dispatch* op
   when no weighted op (a matrix product with a constant weight) lies between X and it (a Gather/GatherND/Slice/Mul
   that picks or masks tokens for one expert), and a *combine* op when one does (a Mul by routing weights, a
   ScatterND/ScatterElements by routing indices); everything downstream of a combine op up to the layer's end
   (the Add/Concat/ScatterND that merges experts) is combine too.
   A matrix product whose weight operand is rows of a constant table gathered by routing indices (every token
   slot picks its expert's matrices: transformers' `batched_mm` experts, ``gate_up_proj[expert_ids]``) is an
   expert's weighted op, not a gate; its weight gathers belong to its branch.
4. **Expert branches.**  The remaining token ops that are weighted or follow a dispatch, split into connected
   pieces (X, the dispatch inputs and the combine are not links between them).  A piece that starts at a dispatch
   op or ends in a combine op with a routing input is an expert branch (a per-expert subgraph, or one batched
   branch whose matmuls carry the expert dimension); a piece with neither is a *shared* expert (Qwen2-MoE's,
   gated by its own sigmoid), reported apart and not dispatched; `MoELayer.shared_experts` counts the pieces.

Bytes, per micro-batch (one run of the graph):

* When every dispatch op gathers a static selection of the tokens (fewer rows than there are tokens; e.g. a
  capacity-sized Gather; for one batched branch, fewer than tokens x experts: an experts x capacity buffer),
  the dispatched bytes are the sum of the dispatch outputs and the combined bytes the sum of the expert
  branches' outputs into the combine (capacity padding included: that is what a fixed-size all-to-all moves).
* Otherwise (experts run densely on every token with a routing-weight mask, the dispatch masks all tokens, or its
  size depends on data and was bounded at import) the graph does not say how many tokens each expert gets: the
  dispatched and combined bytes are then what a top-k dispatch moves, tokens x k x hidden x element bytes.

`MoELayer.anchor_bytes` spreads the dispatched bytes over the ops that hold them (the dispatch ops, or each expert
branch's first op when there are none), so that a pipeline piece holding some of a layer's experts is charged
their share.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx

from planner.ir.graph import Op, OpGraph
from planner.ir.moe_routers import EXPERT_CHOICE, MATMUL, SHAPE, TOP_K, Router, find_routers, is_const, weighted_matmul

__all__ = ["MoELayer", "MoEStructure", "find_moe_layers", "NO_MOE_LINE"]

MIB = 2**20
NO_MOE_LINE = ("MoE: no MoE structure found (no router: no TopK or ArgMax over the output of a product with a "
               "constant weight); no all-to-all modelled")

_GATHER = frozenset({"Gather", "GatherND", "GatherElements"})
_MAX_SINKS = 64  # post-dominators tried as a layer's end: its combine is a few ops past the first


@dataclass(frozen=True)
class MoELayer:
    """One MoE layer: op names (the graph's op ids) by role, sizes, and bytes per micro-batch (module docstring)."""

    router_ops: tuple[str, ...]
    topk_op: str  # the first op that picks experts: the TopK, or the first ArgMax
    experts: int
    top_k: int
    tokens: int
    hidden: int
    element_bytes: int
    expert_branches: tuple[tuple[str, ...], ...]
    shared_ops: tuple[str, ...]
    dispatch_ops: tuple[str, ...]
    combine_ops: tuple[str, ...]
    dispatch_bytes: int
    combine_bytes: int
    gathered: bool  # dispatch ops gather a static subset of tokens (bytes from the graph), else top-k estimate
    anchor_bytes: Mapping[str, int]  # op name -> its share of `dispatch_bytes` (sums to it)
    routing: str = TOP_K  # the kind of router (`planner.ir.moe_routers`): top-k, top-1, sparse mixer, expert choice
    noisy: bool = False  # the router adds noise to its logits or jitters its input
    capacity: int = 0  # expert choice: the tokens each expert picks (0 for the other kinds)
    shared_experts: int = 0  # dense experts beside the routed ones, every token through each (`shared_ops`)

    @property
    def topk_bytes(self) -> int:
        """tokens x k x hidden x element bytes: what a top-k dispatch moves without capacity padding."""
        return self.tokens * self.top_k * self.hidden * self.element_bytes


@dataclass(frozen=True)
class MoEStructure:
    """Every MoE layer of a graph, in topological order of their routers (empty: a dense model)."""

    layers: tuple[MoELayer, ...]
    unused_routers: tuple[str, ...] = ()  # with no layer: what was seen of routers without experts after them

    @property
    def found(self) -> bool:
        return bool(self.layers)

    @property
    def dispatch_bytes(self) -> int:
        """Bytes dispatched by all layers in one micro-batch."""
        return sum(layer.dispatch_bytes for layer in self.layers)

    def summary_line(self) -> str:
        """``MoE: L layers, E experts, top-k K, dispatch X MiB per micro-batch``, then the routing kinds other than
        top-k and the shared experts when there are; without layers, `NO_MOE_LINE` or what was seen instead."""
        if not self.layers:
            if self.unused_routers:
                return (f"MoE: no MoE structure found ({'; '.join(self.unused_routers)}); no all-to-all "
                        f"modelled")
            return NO_MOE_LINE

        def values(xs: Iterable[int]) -> str:
            return "/".join(str(x) for x in sorted(set(xs)))

        n = len(self.layers)
        line = (f"MoE: {n} layer{'s' if n != 1 else ''}, {values(x.experts for x in self.layers)} experts, "
                f"top-k {values(x.top_k for x in self.layers)}, dispatch {self.dispatch_bytes / MIB:.4g} MiB per "
                f"micro-batch")
        kinds = sorted({_kind_words(x) for x in self.layers} - {TOP_K})
        if kinds:
            line += f"; routing: {', '.join(kinds)}"
        if any(x.shared_experts for x in self.layers):
            line += f"; shared experts per layer: {values(x.shared_experts for x in self.layers)}"
        return line


def _kind_words(layer: MoELayer) -> str:
    """The routing kind as the summary line says it: ``expert choice (capacity 16)``, ``top-k with noise``."""
    words = layer.routing
    if layer.routing == EXPERT_CHOICE:
        words += f" (capacity {layer.capacity})"
    return words + (" with noise" if layer.noisy else "")


def _unused_router(graph: OpGraph, r: Router) -> str:
    """What a router with no layer after it is, in words (the no-MoE line says what was seen)."""
    pick = graph.ops[r.first].op_type
    many = f"{len(r.select)} {pick}s" if len(r.select) > 1 else f"a{'n' if pick[0] in 'AEIOU' else ''} {pick}"
    return f"{many} over {r.experts} logits with no expert dispatch found after it"


def _counted(notes: list[str]) -> tuple[str, ...]:
    """Each distinct note once, with how many times it was seen when more than once."""
    out = []
    for note in dict.fromkeys(notes):
        n = notes.count(note)
        out.append(note if n == 1 else f"{note} (x{n})")
    return tuple(out)


def find_moe_layers(graph: OpGraph) -> MoEStructure:
    """The MoE layers of `graph` found from its structure (module docstring); op names are never read."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.writes}
    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for t in op.reads:
            consumers.setdefault(t, []).append(i)
    routers = find_routers(graph, producer, consumers)
    if not routers:
        return MoEStructure(())
    token_sets = [_token_tensors(graph, r.x, producer, consumers) for r in routers]
    entries = [_token_entries(graph, toks, set(r.chain), consumers) for r, toks in zip(routers, token_sets,
                                                                                          strict=True)]
    sinks = _post_dominators(graph, entries)
    layers = []
    unused: list[str] = []
    for r, entry, chain in zip(routers, entries, sinks, strict=True):
        # the layer's end: the nearest post-dominator with a combine before it (a single entry, such as a batched
        # dispatch, post-dominates itself: the experts and the combine come later on the chain)
        for sink in chain:
            layer = _layer(graph, r, entry, sink, producer)
            if layer is not None:
                layers.append(layer)
                break
        else:
            unused.append(_unused_router(graph, r))
    return MoEStructure(tuple(layers), _counted(unused) if not layers else ())


# ----- 1. routers -------------------------------------------------------------------------------------------------


def _gathered_weight(graph: OpGraph, op: Op, producer: Mapping[str, int]) -> tuple[str, tuple[int, ...]] | None:
    """For a matrix product whose weight operand is rows of a constant table picked by index (an expert's weights
    gathered per token: ``gate_up_proj[expert_ids]`` in transformers' batched experts), that operand and the ops
    that make it (the gather and the reshapes after it); else None."""
    if op.op_type not in MATMUL:
        return None
    for t in op.inputs:
        chain: list[int] = []
        src = t
        for _ in range(8):  # a few reshapes at most between the gather and the product
            p = producer.get(src)
            if p is None:
                break
            g = graph.ops[p]
            chain.append(p)
            if g.op_type in _GATHER:
                if g.inputs and is_const(graph, g.inputs[0], producer):
                    return t, tuple(chain)
                break
            if g.op_type not in SHAPE or not g.inputs:
                break
            src = g.inputs[0]
    return None



# ----- 2. token data and the layer's end --------------------------------------------------------------------------


def _token_tensors(graph: OpGraph, x: str, producer: Mapping[str, int],
                   consumers: Mapping[str, list[int]]) -> frozenset[str]:
    """X and the tensors that are X reshaped or cast, upstream and downstream (`SHAPE` ops)."""
    out = {x}
    t = x
    while t in producer and graph.ops[producer[t]].op_type in SHAPE and graph.ops[producer[t]].inputs:
        t = graph.ops[producer[t]].inputs[0]
        out.add(t)
    todo = list(out)
    while todo:
        t = todo.pop()
        for c in consumers.get(t, ()):
            op = graph.ops[c]
            if op.op_type in SHAPE and op.inputs and op.inputs[0] == t:
                for w in op.writes:
                    if w not in out:
                        out.add(w)
                        todo.append(w)
    return frozenset(out)


def _token_entries(graph: OpGraph, tokens: frozenset[str], router_chain: set[int],
                   consumers: Mapping[str, list[int]]) -> tuple[int, ...]:
    """The ops that read the tokens, other than the router and the reshapes inside the token tensors."""
    out = set()
    for t in tokens:
        for c in consumers.get(t, ()):
            op = graph.ops[c]
            if c in router_chain or (op.op_type in SHAPE and all(w in tokens for w in op.writes)):
                continue
            out.add(c)
    return tuple(sorted(out))


def _post_dominators(graph: OpGraph, entries: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Per layer, the post-dominators of its token entries, nearest first (`_MAX_SINKS` at most; empty when
    some path escapes to the graph outputs without meeting the others)."""
    exit_node = -1
    g = nx.DiGraph()
    g.add_node(exit_node)
    outputs = set(graph.graph_outputs)
    for i, op in enumerate(graph.ops):
        g.add_node(i)
        succ = graph.successors[i]
        for j in succ:
            g.add_edge(j, i)  # reversed: post-dominators are dominators of the reversed graph from the exit
        if not succ or any(t in outputs for t in op.writes):
            g.add_edge(exit_node, i)
    for k, entry in enumerate(entries):
        g.add_node(("x", k))
        for c in entry:
            g.add_edge(c, ("x", k))
    idom = nx.immediate_dominators(g, exit_node)
    out: list[tuple[int, ...]] = []
    for k, entry in enumerate(entries):
        chain: list[int] = []
        d = idom.get(("x", k)) if entry else None
        while isinstance(d, int) and d != exit_node and len(chain) < _MAX_SINKS:
            chain.append(d)
            d = idom.get(d)
        out.append(tuple(chain))
    return out


# ----- 3, 4. roles and bytes --------------------------------------------------------------------------------------


@dataclass
class _OpRoles:
    """What each token op of a layer's region does, from one pass in topological order."""

    weighted: dict[int, bool]  # the op or a token predecessor carries its own weight
    after_dispatch: dict[int, bool]  # the op is a dispatch or follows one
    combine: set[int]
    dispatch: set[int]
    gates: set[int]
    weight_gathers: dict[int, tuple[int, ...]]  # expert product -> the ops gathering its weights by routing


def _op_roles(graph: OpGraph, order: list[int], region: set[int], routing_tensors: set[str], sink: int,
              producer: Mapping[str, int]) -> _OpRoles:
    """Classify the region's ops (in `order`, topological) as weighted, dispatch, combine and gate."""
    ops, pred = graph.ops, graph.predecessors
    roles = _OpRoles({}, {}, set(), set(), set(), {})
    weighted, after_dispatch, combine, dispatch = roles.weighted, roles.after_dispatch, roles.combine, roles.dispatch
    gates, weight_gathers = roles.gates, roles.weight_gathers
    for v in order:
        tok_preds = [u for u in pred[v] if u in region]
        op = ops[v]
        gathered_weight = _gathered_weight(graph, op, producer)
        if gathered_weight is not None and gathered_weight[0] in routing_tensors:
            weight_gathers[v] = gathered_weight[1]
        own_weight = v in weight_gathers or (op.param_bytes > 0 and weighted_matmul(graph, op, producer) is not None)
        w = own_weight or any(weighted[u] for u in tok_preds)
        weighted[v] = w
        # weights picked by routing make the product an expert's, not a gate: its routing input is not counted
        skip = gathered_weight[0] if v in weight_gathers and gathered_weight else None
        routed = any(t in routing_tensors for t in op.reads if t != skip)
        if v == sink or any(u in combine for u in tok_preds) or (routed and w):
            combine.add(v)
            if routed and w:
                gates.add(v)
        elif routed:
            dispatch.add(v)
        after_dispatch[v] = v in dispatch or any(after_dispatch[u] for u in tok_preds)
    return roles


def _expert_pieces(graph: OpGraph, order: list[int], region: set[int], roles: _OpRoles
                   ) -> tuple[list[set[int]], list[set[int]]]:
    """(expert branches, shared pieces): the weighted or dispatched ops outside the combine, by component."""
    succ, pred = graph.successors, graph.predecessors
    candidates = {v for v in order if v not in roles.combine and (roles.weighted[v] or roles.after_dispatch[v])}
    pieces = _components(candidates, succ)
    branches: list[set[int]] = []
    shared: list[set[int]] = []
    for piece in pieces:
        # an expert is dispatched to, or weighted alone by routing data (a gate whose token inputs all come from
        # it); a piece that only joins a merge that reads routing data (a shared expert added into the combine's
        # ScatterND) is not
        weighted_alone = any(s in roles.gates and all(u in piece for u in pred[s] if u in region)
                             for v in piece for s in succ[v])
        is_expert = any(v in roles.dispatch for v in piece) or weighted_alone
        (branches if is_expert else shared).append(piece)
    return branches, shared


@dataclass(frozen=True)
class _Traffic:
    """A layer's token shape and the bytes its dispatch and combine move."""

    n_tokens: int
    hidden: int
    elem: int
    dispatch_bytes: int
    combine_bytes: int
    gathered: bool
    anchor: dict[str, int]


def _traffic(graph: OpGraph, r: Router, dispatch: set[int], combine: set[int], branches: list[set[int]]
             ) -> _Traffic:
    """The bytes dispatched and combined: the gathered rows' sizes when the dispatch gathers tokens, else the
    top-k tokens' size spread over the first ops of the branches (`anchor`: op -> bytes it stands for)."""
    ops, succ = graph.ops, graph.successors
    x_info = graph.tensors[r.x]
    hidden = int(x_info.shape[-1])
    numel = math.prod(x_info.shape)
    n_tokens = numel // hidden if hidden else 0
    elem = x_info.size_bytes // numel if numel else 0
    topk_bytes = n_tokens * r.top_k * hidden * elem
    # a batched branch (one for all experts) gathers up to tokens x experts rows, a per-expert one fewer than tokens
    rows_below = n_tokens * (r.experts if len(branches) == 1 else 1)
    gathered = bool(dispatch) and all(_gathers(graph, ops[v], hidden, rows_below) for v in dispatch)
    anchor: dict[str, int] = {}
    if gathered:
        for v in sorted(dispatch):
            anchor[ops[v].name] = sum(graph.tensors[t].size_bytes for t in ops[v].writes[:1] if t in graph.tensors)
        dispatch_bytes = sum(anchor.values())
        # what the expert branches hand to the combine
        combine_bytes = sum(graph.tensors[t].size_bytes for piece in branches for v in piece
                            for s in succ[v] if s in combine for t in ops[v].writes
                            if t in ops[s].reads and t in graph.tensors)
    else:
        dispatch_bytes = combine_bytes = topk_bytes
        firsts = [ops[v].name for v in sorted(dispatch)] or [ops[min(piece)].name for piece in branches]
        share, rest = divmod(dispatch_bytes, len(firsts))
        for j, name in enumerate(firsts):
            anchor[name] = share + (rest if j == 0 else 0)
    return _Traffic(n_tokens, hidden, elem, int(dispatch_bytes), int(combine_bytes), gathered, anchor)


def _layer(graph: OpGraph, r: Router, entry: tuple[int, ...], sink: int,
           producer: Mapping[str, int]) -> MoELayer | None:
    """The layer ending at `sink`, or None when no expert branch and combine lie before it."""
    ops = graph.ops
    succ, pred = graph.successors, graph.predecessors
    sink = _extend_sink(graph, r.select, sink, producer)
    region = _forward(entry, succ, stop=sink)  # token ops, the sink included
    ancestors = _backward([sink], pred)
    routing = (_forward(r.select, succ, stop=sink) & ancestors) - region
    routing |= set(r.chain)
    routing_tensors = {t for i in routing for t in ops[i].writes}
    order = sorted(region)
    roles = _op_roles(graph, order, region, routing_tensors, sink, producer)
    branches, shared = _expert_pieces(graph, order, region, roles)
    if not branches or not roles.gates:
        return None
    for piece in branches:  # an expert's weight gathers belong to its branch, not to the router
        for v in list(piece):
            piece.update(roles.weight_gathers.get(v, ()))
    routing -= {u for chain in roles.weight_gathers.values() for u in chain}
    t = _traffic(graph, r, roles.dispatch, roles.combine, branches)

    def names(idx: Iterable[int]) -> tuple[str, ...]:
        return tuple(ops[i].name for i in sorted(idx))

    return MoELayer(
        router_ops=names(routing), topk_op=ops[r.first].name, experts=r.experts, top_k=r.top_k, tokens=t.n_tokens,
        hidden=t.hidden, element_bytes=t.elem, expert_branches=tuple(names(p) for p in branches),
        shared_ops=names(v for piece in shared for v in piece), dispatch_ops=names(roles.dispatch),
        combine_ops=names(roles.combine), dispatch_bytes=t.dispatch_bytes, combine_bytes=t.combine_bytes,
        gathered=t.gathered, anchor_bytes=t.anchor, routing=r.kind, noisy=r.noisy, capacity=r.capacity,
        shared_experts=len(shared))


def _extend_sink(graph: OpGraph, select: tuple[int, ...], sink: int, producer: Mapping[str, int]) -> int:
    """The layer's end moved past ops that also read routing data: they still place the merged expert outputs.
    The first op all expert paths pass may be a Concat of their rows; the ScatterND that puts the rows back at
    their tokens' positions (its indices computed from the router) is combine too."""
    for _ in range(8):  # a combine is a few ops deep; the bound keeps the walk short on any graph
        routed = _forward(select, graph.successors, stop=sink) - {sink}
        nxt = None
        for s in graph.successors[sink]:
            op = graph.ops[s]
            others = [t for t in op.reads if t not in graph.ops[sink].writes and not is_const(graph, t, producer)]
            if any(producer.get(t) in routed for t in others):
                nxt = s
                break
        if nxt is None:
            return sink
        sink = nxt
    return sink


def _gathers(graph: OpGraph, op: Op, hidden: int, rows_below: int) -> bool:
    """Whether a dispatch op's output is a static selection of tokens (fewer rows than `rows_below`)."""
    if op.estimated:
        return False  # its size rests on a data-dependent bound
    outs = [graph.tensors[t] for t in op.writes if t in graph.tensors]
    if not outs or not outs[0].shape or outs[0].shape[-1] != hidden:
        return False
    return math.prod(outs[0].shape) // hidden < rows_below


def _forward(starts: Iterable[int], succ: tuple[tuple[int, ...], ...], *, stop: int) -> set[int]:
    """Ops reachable from `starts` (included), not going past `stop` (included)."""
    seen = set(starts)
    todo = deque(seen)
    while todo:
        v = todo.popleft()
        if v == stop:
            continue
        for s in succ[v]:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


def _backward(starts: Iterable[int], pred: tuple[tuple[int, ...], ...]) -> set[int]:
    seen = set(starts)
    todo = deque(seen)
    while todo:
        v = todo.popleft()
        for p in pred[v]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _components(nodes: set[int], succ: tuple[tuple[int, ...], ...]) -> list[set[int]]:
    """Connected pieces of `nodes` under the graph's edges among them, ordered by their first op."""
    g = nx.Graph()
    g.add_nodes_from(nodes)
    g.add_edges_from((v, s) for v in nodes for s in succ[v] if s in nodes)
    return sorted((set(c) for c in nx.connected_components(g)), key=min)
