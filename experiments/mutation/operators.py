"""The mutants of one module: small, plausible one-line bugs generated from its syntax tree.

A mutation point is one node of the tree and one replacement.  Points are listed in a fixed order (`ast.walk`
from the module root, then the replacement order below), so point i names the same edit as long as the source is
unchanged.  Each point carries a key that survives edits elsewhere in the file (the stripped source line, the
column and the edit), used to match the documented equivalent mutants.

Operators (what a careless one-character edit does):
    compare     <  <=  >  >=  ==  !=  in  not-in  is  is-not   swapped with its neighbour (< <-> <=, == <-> !=, ...)
    binop       +  <->  -,  *  ->  //,  // -> *,  % -> //,  | <-> &
    augassign   +=  <->  -=
    boolop      and <-> or
    not         `not x` -> `x`
    number      integer constant n -> n + 1  (0 -> 1, 1 -> 2, -1 -> 0)
    bool        True <-> False
    minmax      max(...) <-> min(...)
    call-stmt   a statement that is only a call (`b.add(...)`, `_memory(m)`) -> `pass`
    loop        continue <-> break

Not mutated: docstrings and other string constants, f-strings, type annotations, `raise` statements (their
messages are checked by the tests where they matter and mutating them is noise), decorators.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

_CMP_SWAP: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_BIN_SWAP: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv,
    ast.BitOr: ast.BitAnd, ast.BitAnd: ast.BitOr, ast.Div: ast.Mult,
}
_AUG_SWAP: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add}
_SYMBOL = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
    ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
    ast.FloorDiv: "//", ast.Mod: "%", ast.BitOr: "|", ast.BitAnd: "&", ast.Div: "/", ast.And: "and", ast.Or: "or",
}


@dataclass(frozen=True)
class Mutant:
    """One edit: `index` in the module's point list, where it is and what it does."""

    index: int
    line: int
    col: int
    edit: str
    source_line: str
    repeat: int = 0  # how many earlier points share line text, column and edit (nested `a + b + 1` ops share a column)

    @property
    def key(self) -> str:
        """Stable identity: the edited line's text, the column and the edit (line numbers move with edits), and
        ` #n` for the n-th point with those three (n >= 2)."""
        base = f"{self.source_line} @{self.col}: {self.edit}"
        return f"{base} #{self.repeat + 1}" if self.repeat else base


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, f-strings, raise statements and what they contain."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            for sub in ast.walk(node):
                skip.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                mark(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for dec in node.decorator_list:
                mark(dec)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
            for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                mark(a.annotation)
        if isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        if isinstance(node, (ast.JoinedStr, ast.Raise)):
            mark(node)
    return skip


def _edits(node: ast.AST) -> Iterator[tuple[str, object]]:
    """(description, how) for every mutation of `node` itself; `how` is interpreted by `_apply`."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            new = _CMP_SWAP.get(type(op))
            if new is not None:
                yield f"{_SYMBOL[type(op)]} -> {_SYMBOL[new]}", ("cmp", i, new)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
        new = _BIN_SWAP[type(node.op)]
        yield f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", ("bin", new)
    elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG_SWAP:
        new = _AUG_SWAP[type(node.op)]
        yield f"{_SYMBOL[type(node.op)]}= -> {_SYMBOL[new]}=", ("aug", new)
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", ("bool", new)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not x -> x", ("drop_not",)
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield f"{node.value} -> {not node.value}", ("const", not node.value)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield f"{node.value} -> {node.value + 1}", ("const", node.value + 1)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        new_name = "min" if node.func.id == "max" else "max"
        yield f"{node.func.id}() -> {new_name}()", ("rename", new_name)
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "call statement -> pass", ("pass",)
    elif isinstance(node, ast.Continue):
        yield "continue -> break", ("break",)
    elif isinstance(node, ast.Break):
        yield "break -> continue", ("continue",)


def _points(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
    skip = _skipped_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        for edit, how in _edits(node):
            out.append((node, edit, how))
    return out


def list_mutants(source: str) -> list[Mutant]:
    """Every mutation point of `source`, in the fixed order."""
    lines = source.splitlines()
    out: list[Mutant] = []
    seen: dict[tuple[str, int, str], int] = {}
    for i, (node, edit, _how) in enumerate(_points(ast.parse(source))):
        text = lines[node.lineno - 1].strip()
        same = (text, node.col_offset, edit)
        out.append(Mutant(i, node.lineno, node.col_offset, edit, text, seen.get(same, 0)))
        seen[same] = seen.get(same, 0) + 1
    return out


def _apply(node: ast.AST, how: tuple) -> ast.AST:
    kind = how[0]
    if kind == "cmp":
        node.ops[how[1]] = how[2]()
    elif kind in ("bin", "aug", "bool"):
        node.op = how[1]()
    elif kind == "drop_not":
        return node.operand
    elif kind == "const":
        node.value = how[1]
    elif kind == "rename":
        node.func = ast.Name(id=how[1], ctx=ast.Load())
    elif kind == "pass":
        return ast.Pass()
    elif kind == "break":
        return ast.Break()
    elif kind == "continue":
        return ast.Continue()
    return node


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, how: tuple) -> None:
        self.target, self.how = target, how

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return ast.copy_location(_apply(node, self.how), node)
        return super().generic_visit(node)


def mutated_code(source: str, filename: str, index: int):
    """The code object of `source` with mutation point `index` applied (None: the original)."""
    tree = ast.parse(source)
    if index is not None:
        node, _edit, how = _points(tree)[index]
        tree = _Replace(node, how).visit(tree)
        ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec")
