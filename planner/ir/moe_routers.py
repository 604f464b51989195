"""MoE routers found from the op graph's dataflow, never from op names (`find_routers`; used by `moe_structure`).

A router is a matrix product of the hidden state X (tokens x hidden) with a constant weight (the router's logits,
one column per expert), then ops that keep values per element (`PASS`: casts, reshapes, a constant scale or bias,
a ``Where`` or ``ScatterElements`` that masks scores, added noise), optionally a ``Softmax`` or ``Sigmoid``, then
the ops that pick experts.  The kinds of routing, by the op that picks:

* **top-k** (token choice): one ``TopK`` whose reduced axis is the experts' (its input size there is E, its output
  size k, 1 <= k < E); or a ``TopK`` straight over the logits whose values go into a ``Softmax`` (softmax after
  top-k).  Group-limited routing (DeepSeek-V3: top-k inside groups, top groups, then a masked top-k over all
  experts) runs several TopKs over one router: the layer's is the one over most experts.
* **top-1** (Switch Transformers): one ``ArgMax`` over the experts' axis of the scores or logits; k = 1.
* **sparse mixer** (PhiMoE): several ``ArgMax`` ops over one router's logits, each after the previous pick was
  masked out (a ``ScatterElements`` of -inf at the picked expert): k = the number of ArgMaxes (distinct inputs).
* **expert choice**: a ``TopK`` over the *tokens'* axis of the scores (the router's expert columns are another
  axis of its input): each expert picks its capacity C of the G tokens of its group; k is the average number of
  experts per token, E x C / G (rounded, at least 1).

**Noise and jitter.**  An ``Add``/``Mul``/``Sub`` between the logits and the pick whose other operand is *noise*
(a tensor computed from a ``Random*``/``Bernoulli``/``Multinomial`` op without passing a weighted product: noisy
top-k gating's ``randn * softplus(x W_noise)``) is passed through; so is a multiplicative or additive jitter of X
before the router's product (the product's input is then X times noise: X is taken from before the jitter).  Such
a router is reported `noisy`.  Exported in eval mode, most models drop their noise; the test exports keep it.

The router's ops (`Router.chain`) are every op that depends on X and feeds the pick: the logits' product, the
scores, the masks, the noise and the jitter.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from planner.ir.graph import Op, OpGraph

__all__ = ["Router", "find_routers", "is_const", "weighted_matmul", "SHAPE", "MATMUL"]

# ops that only reshape or re-type a tensor: X through them is still the same tokens
SHAPE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "CastLike"})
# ops between router logits and the pick that keep per-expert values (other operands constant, a mask or noise)
PASS = SHAPE | frozenset({"Transpose", "Add", "Sub", "Mul", "Div", "Where", "ScatterElements", "ScatterND"})
MATMUL = frozenset({"MatMul", "Gemm", "MatMulInteger", "Einsum", "FusedMatMul"})
_SCORES = frozenset({"Softmax", "Sigmoid"})
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                     "Multinomial"})
_NOISE_SEARCH = 48  # tensors searched upstream for a random source: noise is a few elementwise ops on a draw

TOP_K, TOP_1, SPARSE_MIXER, EXPERT_CHOICE = "top-k", "top-1", "sparse mixer", "expert choice"


@dataclass(frozen=True)
class Router:
    """One router: the ops that pick experts (`select`: a TopK, or the ArgMaxes in pick order), its logits'
    product, its ops (`chain`, sorted op positions), the hidden-state tensor X, E, k and the kind of routing."""

    select: tuple[int, ...]
    matmul: int
    chain: tuple[int, ...]
    x: str
    experts: int
    top_k: int
    kind: str
    noisy: bool = False
    capacity: int = 0  # expert choice: tokens each expert picks (0 otherwise)

    @property
    def first(self) -> int:
        """The first picking op: the layer's routing data starts there."""
        return self.select[0]


@dataclass(frozen=True)
class _Ctx:
    graph: OpGraph
    producer: Mapping[str, int]
    consumers: Mapping[str, list[int]]


def is_const(graph: OpGraph, tensor: str, producer: Mapping[str, int]) -> bool:
    """A tensor no op produces that is not a graph input: an initializer (folded constants are initializers)."""
    return tensor not in producer and tensor not in graph.graph_inputs


def weighted_matmul(graph: OpGraph, op: Op, producer: Mapping[str, int]) -> str | None:
    """The data input of a matrix product with one constant weight operand, else None."""
    if op.op_type not in MATMUL:
        return None
    ins = [t for t in op.inputs if t]
    data = [t for t in ins if not is_const(graph, t, producer)]
    if len(data) != 1 or len(ins) < 2:
        return None
    return data[0]


def find_routers(graph: OpGraph, producer: Mapping[str, int],
                 consumers: Mapping[str, list[int]]) -> list[Router]:
    """Every router of `graph` (module docstring), one per logits product, in topological order of the products."""
    ctx = _Ctx(graph, producer, consumers)
    by_matmul: dict[int, Router] = {}
    argmaxes: dict[int, list[tuple[int, Router]]] = {}
    for i, op in enumerate(graph.ops):
        if op.op_type == "TopK":
            r = _topk_router(ctx, i)
            # group-limited routing (DeepSeek-V3) runs several TopKs over one router's scores: top-k inside each
            # group, top groups, then top-k over all experts; the one over the most experts is the layer's
            if r is not None and (r.matmul not in by_matmul or r.experts >= by_matmul[r.matmul].experts):
                by_matmul[r.matmul] = r
        elif op.op_type == "ArgMax":
            r = _argmax_router(ctx, i)
            if r is not None:
                argmaxes.setdefault(r.matmul, []).append((i, r))
    for m, picks in argmaxes.items():
        if m in by_matmul:
            continue  # a TopK router's product: an ArgMax beside it reads its scores for something else
        by_matmul[m] = _merge_argmaxes(ctx, picks)
    return [_with_chain(ctx, by_matmul[k]) for k in sorted(by_matmul)]


# ----- walking back from the pick to the logits' product ---------------------------------------------------------


def _noise(ctx: _Ctx, tensor: str) -> bool:
    """Whether `tensor` is computed from a random draw without passing a weighted product (noise, not data)."""
    todo, seen = deque([tensor]), {tensor}
    while todo and len(seen) < _NOISE_SEARCH:
        p = ctx.producer.get(todo.popleft())
        if p is None:
            continue
        op = ctx.graph.ops[p]
        if op.op_type in _RANDOM:
            return True
        if weighted_matmul(ctx.graph, op, ctx.producer) is not None:
            continue
        for t in op.inputs:
            if t and t not in seen:
                seen.add(t)
                todo.append(t)
    return False


def _data_input(ctx: _Ctx, op: Op) -> tuple[str | None, bool]:
    """(The one data input of a pass-through op, whether another input was noise passed by); None when it mixes
    two data tensors."""
    graph, producer = ctx.graph, ctx.producer
    if op.op_type in ("Reshape", "Squeeze", "Unsqueeze", "ScatterElements", "ScatterND"):
        # shape operands may be computed; a scatter's indices and updates mask the data, input 0
        return (op.inputs[0] if op.inputs and op.inputs[0] else None), False
    data = [t for t in op.inputs if t and not is_const(graph, t, producer)]
    if op.op_type == "Where":  # masked_fill: the condition is a mask, the data the one non-constant branch
        data = [t for t in op.inputs[1:] if t and not is_const(graph, t, producer)]
    if len(data) == 2 and op.op_type in ("Add", "Sub", "Mul"):
        clean = [t for t in data if not _noise(ctx, t)]
        if len(clean) == 1:
            return clean[0], True
    return (data[0] if len(data) == 1 else None), False


def _walk_back(ctx: _Ctx, tensor: str, chain: list[int]) -> tuple[int | None, bool]:
    """The first producer upstream of `tensor` that is not a pass-through op, and whether noise was passed."""
    noisy = False
    for _ in range(64):  # a chain of casts and reshapes is short; the bound keeps a malformed graph finite
        p = ctx.producer.get(tensor)
        if p is None:
            return None, noisy
        op = ctx.graph.ops[p]
        if op.op_type not in PASS:
            return p, noisy
        nxt, passed = _data_input(ctx, op)
        if nxt is None:
            return None, noisy
        noisy |= passed
        chain.append(p)
        tensor = nxt
    return None, noisy


def _logits(ctx: _Ctx, tensor: str, chain: list[int], *, scores_optional: bool
            ) -> tuple[int, str, bool, bool] | None:
    """(The logits' product, X, whether a Softmax/Sigmoid lies between, whether noise was passed) upstream of
    `tensor`; None when it does not end at a product with a constant weight."""
    p, noisy = _walk_back(ctx, tensor, chain)
    scored = p is not None and ctx.graph.ops[p].op_type in _SCORES
    if scored and p is not None:
        chain.append(p)
        x_in, _ = _data_input(ctx, ctx.graph.ops[p])
        p, more = _walk_back(ctx, x_in, chain) if x_in else (None, False)
        noisy |= more
    elif not scores_optional:
        return None
    if p is None:
        return None
    x = weighted_matmul(ctx.graph, ctx.graph.ops[p], ctx.producer)
    info = ctx.graph.tensors.get(x) if x else None
    if x is None or info is None or len(info.shape) < 2:
        return None
    x, jittered = _without_jitter(ctx, x)
    return p, x, scored, noisy or jittered


def _without_jitter(ctx: _Ctx, x: str) -> tuple[str, bool]:
    """X from before a jitter (X times or plus noise) that only the router reads, and whether there was one."""
    jittered = False
    for _ in range(4):  # a jitter is one multiply or add; the bound keeps the walk short
        p = ctx.producer.get(x)
        op = ctx.graph.ops[p] if p is not None else None
        if op is None or op.op_type not in ("Mul", "Add"):
            break
        nxt, passed = _data_input(ctx, op)
        if nxt is None or not passed:
            break
        x, jittered = nxt, True
    return x, jittered


# ----- the picks ----------------------------------------------------------------------------------------------------


def _reduced_axis(src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The axis a reduction over `src` removes or shrinks to give `dst` (None when not one axis)."""
    if len(src) == len(dst):
        changed = [a for a, (m, n) in enumerate(zip(src, dst, strict=True)) if m != n]
        return changed[0] if len(changed) == 1 else None
    if len(src) == len(dst) + 1:
        fits = [a for a in range(len(src)) if tuple(src[:a]) + tuple(src[a + 1:]) == tuple(dst)]
        return fits[-1] if fits else None
    return None


def _topk_router(ctx: _Ctx, i: int) -> Router | None:
    graph = ctx.graph
    op = graph.ops[i]
    if not op.inputs or len(op.writes) < 2:
        return None
    src, dst = graph.tensors.get(op.inputs[0]), graph.tensors.get(op.outputs[0])
    if src is None or dst is None or len(src.shape) != len(dst.shape):
        return None
    axis = _reduced_axis(tuple(src.shape), tuple(dst.shape))
    if axis is None:
        return None
    size, kept = int(src.shape[axis]), int(dst.shape[axis])
    if not (1 <= kept < size):
        return None
    chain: list[int] = []
    found = _logits(ctx, op.inputs[0], chain, scores_optional=True)
    if found is None:
        return None
    p, x, scored, noisy = found
    if not scored and not _softmax_after(ctx, op.outputs[0]):
        return None
    columns = _columns(ctx, p)
    others = [int(n) for a, n in enumerate(src.shape) if a != axis]
    if columns and size != columns and columns in others:
        # the experts are another axis: each expert picks `kept` of the `size` tokens of its group
        top_k = max(1, round(columns * kept / size))
        return Router((i,), p, (), x, columns, top_k, EXPERT_CHOICE, noisy, kept)
    return Router((i,), p, (), x, size, kept, TOP_K, noisy)


def _argmax_router(ctx: _Ctx, i: int) -> Router | None:
    graph = ctx.graph
    op = graph.ops[i]
    src = graph.tensors.get(op.inputs[0]) if op.inputs else None
    dst = graph.tensors.get(op.outputs[0]) if op.outputs else None
    if src is None or dst is None:
        return None
    axis = _reduced_axis(tuple(src.shape), tuple(dst.shape))
    if axis is None or int(src.shape[axis]) < 2:
        return None
    found = _logits(ctx, op.inputs[0], [], scores_optional=True)
    if found is None:
        return None
    p, x, _, noisy = found
    return Router((i,), p, (), x, int(src.shape[axis]), 1, TOP_1, noisy)


def _merge_argmaxes(ctx: _Ctx, picks: list[tuple[int, Router]]) -> Router:
    """One router from the ArgMaxes over one product: top-1, or a sparse mixer's k picks (distinct inputs)."""
    inputs = {ctx.graph.ops[i].inputs[0] for i, _ in picks}
    first = picks[0][1]
    k = len(inputs)
    return Router(tuple(i for i, _ in picks), first.matmul, (), first.x, max(r.experts for _, r in picks),
                  k, TOP_1 if k == 1 else SPARSE_MIXER, any(r.noisy for _, r in picks))


def _columns(ctx: _Ctx, matmul: int) -> int:
    """The logits' last dimension (one column per expert), 0 when unknown."""
    outs = ctx.graph.ops[matmul].outputs
    info = ctx.graph.tensors.get(outs[0]) if outs else None
    return int(info.shape[-1]) if info is not None and info.shape else 0


def _softmax_after(ctx: _Ctx, values: str) -> bool:
    """Whether the TopK values reach a Softmax through pass-through ops (softmax after top-k)."""
    todo, seen = [values], set()
    while todo:
        t = todo.pop()
        for c in ctx.consumers.get(t, ()):
            if c in seen:
                continue
            seen.add(c)
            op = ctx.graph.ops[c]
            if op.op_type == "Softmax":
                return True
            if op.op_type in PASS:
                todo.extend(op.writes)
    return False


def _with_chain(ctx: _Ctx, r: Router) -> Router:
    """`r` with its ops: every op that reads X and feeds a pick, and the ops between (ops are in topological
    order, so the walk down from X stops at the last pick: in a deep model everything after it is later layers)."""
    graph = ctx.graph
    last = max(r.select)
    downstream: set[int] = set()
    todo = deque(c for c in ctx.consumers.get(r.x, ()) if c <= last)
    while todo:
        v = todo.popleft()
        if v in downstream:
            continue
        downstream.add(v)
        todo.extend(s for s in graph.successors[v] if s <= last)
    chain: set[int] = set()
    todo = deque(r.select)
    while todo:
        v = todo.popleft()
        if v in chain or v not in downstream:
            continue
        chain.add(v)
        todo.extend(graph.predecessors[v])
    chain |= {r.matmul, *r.select}
    return Router(r.select, r.matmul, tuple(sorted(chain)), r.x, r.experts, r.top_k, r.kind, r.noisy, r.capacity)
