"""Walking an ONNX graph and naming its nodes: what the importer's checks, its shape inference and its graph
building share.

Subgraphs (If, Loop, Scan bodies) are walked depth first; tensors stored outside the file are told apart
(`is_external`).  Naming: an op is named after its ONNX node; a node with no name, or whose name an earlier node
already took, is named ``f"{op_type}_{i}"`` with i its index in the graph's node list (then ``_1``, ``_2``...
appended if even that is taken) -- `names_of_nodes`, and `node_names` for a model's main graph.  `captured_inputs`
are the outer-scope tensors a node's subgraphs read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

__all__ = ["CANON_DOMAIN", "CONTRIB_DOMAINS", "SHOW_ITEMS", "all_node_lists", "attr_graphs", "captured_inputs",
           "free_names", "has_subgraph", "is_external", "iter_graphs", "iter_tensors", "names_of_nodes", "node_names",
           "one_line"]


CANON_DOMAIN = {"ai.onnx": ""}

CONTRIB_DOMAINS = frozenset({"com.microsoft"})

SHOW_ITEMS = 5  # items listed in one error message


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def iter_graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """graph and all its subgraphs, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in attr_graphs(attr):
                yield from iter_graphs(sub)


def attr_graphs(attr: AttributeProto) -> list[GraphProto]:
    if attr.type == AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def iter_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    for g in iter_graphs(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == AttributeProto.TENSORS:
                    yield from attr.tensors


def all_node_lists(graph: GraphProto, prefix: str = "") -> Iterator[tuple[str, list[NodeProto]]]:
    """(name prefix, nodes) for the graph and every subgraph; subgraph nodes are shown as 'outer/inner'."""
    nodes = list(graph.node)
    yield prefix, nodes
    names = None
    for i, node in enumerate(nodes):
        for attr in node.attribute:
            for sub in attr_graphs(attr):
                if names is None:
                    names = names_of_nodes(nodes)
                yield from all_node_lists(sub, f"{prefix}{names[i]}/{attr.name}/")


def node_names(model: ModelProto) -> list[str]:
    """The op names the importer gives the main graph's nodes, in node order (used to rebuild nodes)."""
    return names_of_nodes(model.graph.node)


def names_of_nodes(nodes: Sequence[NodeProto]) -> list[str]:
    """The ONNX node name; unnamed or duplicate-named nodes get f'{op_type}_{index}' (made unique)."""
    used: set[str] = set()
    keep = [False] * len(nodes)
    for i, node in enumerate(nodes):
        if node.name and node.name not in used:
            used.add(node.name)
            keep[i] = True
    out: list[str] = []
    for i, node in enumerate(nodes):
        if keep[i]:
            out.append(node.name)
            continue
        base = cand = f"{node.op_type}_{i}"
        k = 0
        while cand in used:
            k += 1
            cand = f"{base}_{k}"
        used.add(cand)
        out.append(cand)
    return out


def free_names(graph: GraphProto) -> list[str]:
    """Names a (sub)graph reads from enclosing scopes, in order of first use."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {st.values.name for st in graph.sparse_initializer}
    local |= {o for n in graph.node for o in n.output}
    free: dict[str, None] = {}
    for node in graph.node:
        for t in node.input:
            if t and t not in local:
                free[t] = None
        for attr in node.attribute:
            for sub in attr_graphs(attr):
                for t in free_names(sub):
                    if t not in local:
                        free[t] = None
    return list(free)


def has_subgraph(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def captured_inputs(node: NodeProto) -> list[str]:
    """Outer-scope tensors the node's subgraphs read."""
    free: dict[str, None] = {}
    for a in node.attribute:
        for sub in attr_graphs(a):
            free.update(dict.fromkeys(free_names(sub)))
    return list(free)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 400 else text[:397] + "..."
