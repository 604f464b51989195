"""The helper files plan-codegen writes next to the generated code, so that the code needs only torch.

* ``p2p.py``: `planner.execute.codegen_p2p` as it is (send / receive one tensor).
* ``onnx_ops.py``, written only when some op has no direct torch translation (`planner.execute.codegen_ops`): this
  runtime's own ONNX op implementations (`planner/execute/ops/`, torch only) flattened into one module, plus
  ``onnx_op(op_type, inputs, attrs, ...)`` that runs one of them.  It is generated from the package source, so
  the helper and the runtime cannot drift apart; a test imports it and compares its registry with the runtime's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from planner.execute import codegen_p2p, ops

__all__ = ["onnx_ops_source", "p2p_source"]

_FAMILIES = ("elementwise", "shape", "nn", "quant", "reduce", "index", "resize", "rnn", "control")  # every ops module

_ONNX_OP = '''

def onnx_op(op_type, inputs, attrs, opset, output_shapes=(), output_dtypes=()):
    """Run ONNX op `op_type` on `inputs` (None for an omitted optional input) with the attributes `attrs`;
    returns one tensor per output named in output_shapes (None for an output the op leaves out)."""
    n = len(output_shapes)
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    ctx = OpContext(opset=opset, num_outputs=n, output_shapes=tuple(tuple(s) if s is not None else None
                                                                     for s in output_shapes),
                    output_dtypes=tuple(output_dtypes))
    out = list(OPS[op_type](list(inputs), dict(attrs), ctx))
    return out + [None] * (n - len(out))
'''


def p2p_source() -> str:
    return Path(codegen_p2p.__file__).read_text()


def _body(path: Path, *, stop_at: str | None = None) -> tuple[list[str], str]:
    """A module's import lines (without `__future__` and `planner` ones: the flattened module defines those names
    itself) and the rest of its source without its docstring; cut before the line starting with `stop_at`."""
    text = path.read_text()
    if stop_at is not None:
        text = text[:text.index(stop_at)]
    tree = ast.parse(text)
    lines = text.splitlines()
    imports: list[str] = []
    drop: set[int] = set()
    for node in tree.body:
        span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]:
            drop.update(span)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            drop.update(span)
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module != "__future__" and (module or "").split(".")[0] != "planner":
                imports.append(ast.unparse(node))
    body = "\n".join(line for i, line in enumerate(lines, start=1) if i not in drop).strip() + "\n"
    return imports, body


def onnx_ops_source() -> str:
    """The text of ``onnx_ops.py``: the runtime's op registry and every op family in one torch-only module."""
    root = Path(ops.__file__).parent
    modules = [("registry", _body(root / "__init__.py", stop_at="# Import the families"))]
    modules += [(family, _body(root / f"{family}.py")) for family in _FAMILIES]
    imports = sorted({line for _, (lines, _) in modules for line in lines}, key=lambda s: (s.startswith("from"), s))
    head = ('"""ONNX operators in torch, for the ops of the generated code that have no single torch call.\n\n'
            "Written by plan-codegen from opplan's runtime (planner/execute/ops/); needs only torch.\n"
            '"""\n\nfrom __future__ import annotations\n\n' + "\n".join(imports) + "\n")
    parts = [head] + [f"# --- {name} {'-' * (100 - len(name))}\n\n{body}" for name, (_, body) in modules]
    return "\n\n".join(parts) + _ONNX_OP
