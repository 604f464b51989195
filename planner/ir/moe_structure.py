"""Mixture-of-experts layers found from the op graph's structure, never from op names (`find_moe_layers`).

Exported models name their ops ``node_GatherND_12``; what identifies an MoE layer is its dataflow.  Per layer:

1. **Router.**  A ``TopK`` whose input is, through ops that keep values per element (`_PASS`: casts, reshapes,
   an added bias or scale that is a constant, a ``Where`` that masks scores), a ``Softmax`` or ``Sigmoid`` of a
   ``MatMul``/``Gemm`` with a constant weight; or a ``TopK`` straight over such a matmul whose values go into a
   ``Softmax`` (softmax after top-k).  Group-limited routing (DeepSeek-V3: top-k inside groups, top groups, then a
   masked top-k over all experts) runs several TopKs over one router: the layer's is the one over most experts.
   The reduced axis is the one whose size the TopK changes: its input size there is the number of experts
   E, its output size k (1 <= k < E).  The matmul's other input is the hidden state X (tokens x hidden: hidden is
   X's last dimension, tokens the product of the others).  The router ops are the matmul-to-TopK chain and every
   op downstream of the TopK that is not token data (masks, gates, indices) up to the layer's end.
2. **Token data.**  X and the tensors that are X reshaped or cast (`_SHAPE`) are the layer's tokens; the ops fed
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
   gated by its own sigmoid), reported apart and not dispatched.

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

__all__ = ["MoELayer", "MoEStructure", "find_moe_layers", "NO_MOE_LINE"]

MIB = 2**20
NO_MOE_LINE = "MoE: no MoE structure found (no top-k router over a softmax/sigmoid); no all-to-all modelled"

# ops that only reshape or re-type a tensor: X through them is still the same tokens
_SHAPE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "CastLike"})
# ops between router logits and TopK that keep per-expert values (with constant other operands)
_PASS = _SHAPE | frozenset({"Transpose", "Add", "Sub", "Mul", "Div", "Where"})
_SCORES = frozenset({"Softmax", "Sigmoid"})
_MATMUL = frozenset({"MatMul", "Gemm", "MatMulInteger", "Einsum", "FusedMatMul"})
_GATHER = frozenset({"Gather", "GatherND", "GatherElements"})
_MAX_SINKS = 64  # post-dominators tried as a layer's end: its combine is a few ops past the first


@dataclass(frozen=True)
class MoELayer:
    """One MoE layer: op names (the graph's op ids) by role, sizes, and bytes per micro-batch (module docstring)."""

    router_ops: tuple[str, ...]
    topk_op: str
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

    @property
    def topk_bytes(self) -> int:
        """tokens x k x hidden x element bytes: what a top-k dispatch moves without capacity padding."""
        return self.tokens * self.top_k * self.hidden * self.element_bytes


@dataclass(frozen=True)
class MoEStructure:
    """Every MoE layer of a graph, in topological order of their routers (empty: a dense model)."""

    layers: tuple[MoELayer, ...]

    @property
    def found(self) -> bool:
        return bool(self.layers)

    @property
    def dispatch_bytes(self) -> int:
        """Bytes dispatched by all layers in one micro-batch."""
        return sum(layer.dispatch_bytes for layer in self.layers)

    def summary_line(self) -> str:
        """``MoE: L layers, E experts, top-k K, dispatch X MiB per micro-batch`` or `NO_MOE_LINE`."""
        if not self.layers:
            return NO_MOE_LINE

        def values(xs: Iterable[int]) -> str:
            return "/".join(str(x) for x in sorted(set(xs)))

        n = len(self.layers)
        return (f"MoE: {n} layer{'s' if n != 1 else ''}, {values(x.experts for x in self.layers)} experts, "
                f"top-k {values(x.top_k for x in self.layers)}, dispatch {self.dispatch_bytes / MIB:.4g} MiB per "
                f"micro-batch")


@dataclass(frozen=True)
class _Router:
    topk: int  # op positions
    matmul: int
    chain: tuple[int, ...]  # matmul .. topk
    x: str  # the hidden-state tensor
    experts: int
    top_k: int


def find_moe_layers(graph: OpGraph) -> MoEStructure:
    """The MoE layers of `graph` found from its structure (module docstring); op names are never read."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.writes}
    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for t in op.reads:
            consumers.setdefault(t, []).append(i)
    by_matmul: dict[int, _Router] = {}
    for i, op in enumerate(graph.ops):
        if op.op_type == "TopK":
            r = _router(graph, i, producer, consumers)
            # group-limited routing (DeepSeek-V3) runs several TopKs over one router's scores: top-k inside each
            # group, top groups, then top-k over all experts; the one over the most experts is the layer's
            if r is not None and (r.matmul not in by_matmul or r.experts >= by_matmul[r.matmul].experts):
                by_matmul[r.matmul] = r
    routers = [by_matmul[k] for k in sorted(by_matmul)]
    if not routers:
        return MoEStructure(())
    token_sets = [_token_tensors(graph, r.x, producer, consumers) for r in routers]
    entries = [_token_entries(graph, toks, set(r.chain), consumers) for r, toks in zip(routers, token_sets,
                                                                                          strict=True)]
    sinks = _post_dominators(graph, entries)
    layers = []
    for r, entry, chain in zip(routers, entries, sinks, strict=True):
        # the layer's end: the nearest post-dominator with a combine before it (a single entry, such as a batched
        # dispatch, post-dominates itself: the experts and the combine come later on the chain)
        for sink in chain:
            layer = _layer(graph, r, entry, sink, producer)
            if layer is not None:
                layers.append(layer)
                break
    return MoEStructure(tuple(layers))


# ----- 1. routers -------------------------------------------------------------------------------------------------


def _is_const(graph: OpGraph, tensor: str, producer: Mapping[str, int]) -> bool:
    """A tensor no op produces that is not a graph input: an initializer (folded constants are initializers)."""
    return tensor not in producer and tensor not in graph.graph_inputs


def _data_input(graph: OpGraph, op: Op, producer: Mapping[str, int]) -> str | None:
    """The one non-constant input of a pass-through op (None when it has several: it mixes two data tensors)."""
    data = [t for t in op.inputs if t and not _is_const(graph, t, producer)]
    if op.op_type == "Where":  # masked_fill: the condition is a mask, the data the one non-constant branch
        data = [t for t in op.inputs[1:] if t and not _is_const(graph, t, producer)]
    if op.op_type in ("Reshape", "Squeeze", "Unsqueeze"):  # shape operands may be computed; the data is input 0
        return op.inputs[0] if op.inputs and op.inputs[0] else None
    return data[0] if len(data) == 1 else None


def _walk_back(graph: OpGraph, tensor: str, producer: Mapping[str, int], chain: list[int]) -> int | None:
    """The first producer upstream of `tensor` that is not a pass-through op (`_PASS`); appends what it passes."""
    for _ in range(64):  # a chain of casts and reshapes is short; the bound keeps a malformed graph finite
        p = producer.get(tensor)
        if p is None:
            return None
        op = graph.ops[p]
        if op.op_type not in _PASS:
            return p
        nxt = _data_input(graph, op, producer)
        if nxt is None:
            return None
        chain.append(p)
        tensor = nxt
    return None


def _weighted_matmul(graph: OpGraph, op: Op, producer: Mapping[str, int]) -> str | None:
    """The data input of a matrix product with one constant weight operand, else None."""
    if op.op_type not in _MATMUL:
        return None
    ins = [t for t in op.inputs if t]
    data = [t for t in ins if not _is_const(graph, t, producer)]
    if len(data) != 1 or len(ins) < 2:
        return None
    return data[0]


def _gathered_weight(graph: OpGraph, op: Op, producer: Mapping[str, int]) -> tuple[str, tuple[int, ...]] | None:
    """For a matrix product whose weight operand is rows of a constant table picked by index (an expert's weights
    gathered per token: ``gate_up_proj[expert_ids]`` in transformers' batched experts), that operand and the ops
    that make it (the gather and the reshapes after it); else None."""
    if op.op_type not in _MATMUL:
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
                if g.inputs and _is_const(graph, g.inputs[0], producer):
                    return t, tuple(chain)
                break
            if g.op_type not in _SHAPE or not g.inputs:
                break
            src = g.inputs[0]
    return None


def _router(graph: OpGraph, i: int, producer: Mapping[str, int], consumers: Mapping[str, list[int]]) -> _Router | None:
    op = graph.ops[i]
    if not op.inputs or len(op.writes) < 2:
        return None
    src, dst = graph.tensors.get(op.inputs[0]), graph.tensors.get(op.outputs[0])
    if src is None or dst is None or len(src.shape) != len(dst.shape):
        return None
    changed = [a for a, (m, n) in enumerate(zip(src.shape, dst.shape, strict=True)) if m != n]
    if len(changed) != 1:
        return None
    experts, top_k = src.shape[changed[0]], dst.shape[changed[0]]
    if not (1 <= top_k < experts):
        return None
    chain: list[int] = []
    p = _walk_back(graph, op.inputs[0], producer, chain)
    if p is None:
        return None
    if graph.ops[p].op_type in _SCORES:
        chain.append(p)
        x_in = _data_input(graph, graph.ops[p], producer)
        p = _walk_back(graph, x_in, producer, chain) if x_in else None
    elif not _softmax_after(graph, op.outputs[0], consumers):
        return None
    if p is None:
        return None
    x = _weighted_matmul(graph, graph.ops[p], producer)
    info = graph.tensors.get(x) if x else None
    if x is None or info is None or len(info.shape) < 2:
        return None
    return _Router(i, p, tuple(sorted({p, *chain, i})), x, int(experts), int(top_k))


def _softmax_after(graph: OpGraph, values: str, consumers: Mapping[str, list[int]]) -> bool:
    """Whether the TopK values reach a Softmax through pass-through ops (softmax after top-k)."""
    todo, seen = [values], set()
    while todo:
        t = todo.pop()
        for c in consumers.get(t, ()):
            if c in seen:
                continue
            seen.add(c)
            op = graph.ops[c]
            if op.op_type == "Softmax":
                return True
            if op.op_type in _PASS:
                todo.extend(op.writes)
    return False


# ----- 2. token data and the layer's end --------------------------------------------------------------------------


def _token_tensors(graph: OpGraph, x: str, producer: Mapping[str, int],
                   consumers: Mapping[str, list[int]]) -> frozenset[str]:
    """X and the tensors that are X reshaped or cast, upstream and downstream (`_SHAPE` ops)."""
    out = {x}
    t = x
    while t in producer and graph.ops[producer[t]].op_type in _SHAPE and graph.ops[producer[t]].inputs:
        t = graph.ops[producer[t]].inputs[0]
        out.add(t)
    todo = list(out)
    while todo:
        t = todo.pop()
        for c in consumers.get(t, ()):
            op = graph.ops[c]
            if op.op_type in _SHAPE and op.inputs and op.inputs[0] == t:
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
            if c in router_chain or (op.op_type in _SHAPE and all(w in tokens for w in op.writes)):
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
        own_weight = v in weight_gathers or (op.param_bytes > 0 and _weighted_matmul(graph, op, producer) is not None)
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


def _traffic(graph: OpGraph, r: _Router, dispatch: set[int], combine: set[int], branches: list[set[int]]
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


def _layer(graph: OpGraph, r: _Router, entry: tuple[int, ...], sink: int,
           producer: Mapping[str, int]) -> MoELayer | None:
    """The layer ending at `sink`, or None when no expert branch and combine lie before it."""
    ops = graph.ops
    succ, pred = graph.successors, graph.predecessors
    sink = _extend_sink(graph, r.topk, sink, producer)
    region = _forward(entry, succ, stop=sink)  # token ops, the sink included
    ancestors = _backward([sink], pred)
    routing = (_forward([r.topk], succ, stop=sink) & ancestors) - region
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
        router_ops=names(routing), topk_op=ops[r.topk].name, experts=r.experts, top_k=r.top_k, tokens=t.n_tokens,
        hidden=t.hidden, element_bytes=t.elem, expert_branches=tuple(names(p) for p in branches),
        shared_ops=names(v for piece in shared for v in piece), dispatch_ops=names(roles.dispatch),
        combine_ops=names(roles.combine), dispatch_bytes=t.dispatch_bytes, combine_bytes=t.combine_bytes,
        gathered=t.gathered, anchor_bytes=t.anchor)


def _extend_sink(graph: OpGraph, topk: int, sink: int, producer: Mapping[str, int]) -> int:
    """The layer's end moved past ops that also read routing data: they still place the merged expert outputs.
    The first op all expert paths pass may be a Concat of their rows; the ScatterND that puts the rows back at
    their tokens' positions (its indices computed from the router) is combine too."""
    for _ in range(8):  # a combine is a few ops deep; the bound keeps the walk short on any graph
        routed = _forward([topk], graph.successors, stop=sink) - {sink}
        nxt = None
        for s in graph.successors[sink]:
            op = graph.ops[s]
            others = [t for t in op.reads if t not in graph.ops[sink].writes and not _is_const(graph, t, producer)]
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
