"""Models below opset 7: upgraded before the importer reads them, so that every op means what it means today.

Opset 7 changed the meaning of ops, not only their spelling: before it, Add, Sub, Mul, Div, Pow, Gemm, the
comparisons and the logical ops broadcast only when told (`broadcast=1`), and then by aligning the second input at
`axis`, not from the right; PRelu applied a 1-D slope of C values per channel (axis 1), where today's rule aligns it
with the last axis.  opplan's runtime, its FLOP counts and the torch code it writes follow today's rules, and
onnxruntime runs none of those old versions.  So a model below opset 7 (the pytorch-converted and pytorch-operator
files that the onnx wheel ships are opset 6) is converted first:

* onnx's version converter (`onnx_constants.upgrade_opset`, to opset `UPGRADE_OPSET`), whose adapters rewrite the
  legacy broadcasts (an Unsqueeze where `axis` needs one, the attributes dropped);
* then each PRelu whose slope is a 1-D initializer of C > 1 values with an input of rank > 2 has that slope
  reshaped to [C, 1, ..., 1]: the converter leaves PRelu as it is, and the old per-channel slope read by today's
  rule would meet the last axis instead (a shape error, or another result where the sizes happen to agree).

A model the converter cannot convert is refused with the opset and the fix; a model at opset 7 or above comes back
unchanged (the importer may still upgrade it later, for shape inference: `onnx_shapes.infer_shapes`).
"""

from __future__ import annotations

import onnx
from onnx import ModelProto, TensorProto

from planner.errors import InputError
from planner.ir.onnx_constants import UPGRADE_OPSET, upgrade_opset

__all__ = ["LEGACY_OPSET", "default_opset", "upgrade_legacy"]

LEGACY_OPSET = 7  # the first opset with today's broadcasting


def default_opset(model: ModelProto) -> int | None:
    """The version of the default (ai.onnx) domain the model imports, or None when it imports none."""
    versions = [int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return max(versions) if versions else None


def upgrade_legacy(model: ModelProto, shown: str) -> ModelProto:
    """`model` itself at opset `LEGACY_OPSET` or above (or without the default domain); below it, a converted copy
    (module docstring).  Raises `InputError` naming `shown` when onnx's converter cannot convert the model."""
    version = default_opset(model)
    if version is None or version >= LEGACY_OPSET:
        return model
    converted = upgrade_opset(model)
    if converted is None:
        raise InputError(f"opset {version} is below {LEGACY_OPSET}, where broadcasting changed meaning, and onnx's "
                         f"version converter cannot upgrade this model", path=shown,
                         fix=f"re-export the model at opset {LEGACY_OPSET} or above (e.g. {UPGRADE_OPSET})")
    _channel_slopes(converted)
    return converted


def _channel_slopes(model: ModelProto) -> None:
    """Reshape, in place, each PRelu's 1-D per-channel slope initializer to [C, 1, ..., 1] (module docstring); a
    slope that other nodes read too is copied first, so that only this PRelu sees the new shape."""
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    rank = {vi.name: len(vi.type.tensor_type.shape.dim)
            for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in graph.node:
        if node.op_type != "PRelu" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        slope = inits.get(node.input[1])
        r = rank.get(node.input[0], 0)
        if slope is None or len(slope.dims) != 1 or slope.dims[0] <= 1 or r <= 2:
            continue
        if readers.get(slope.name, 0) > 1:  # shared: this PRelu gets its own reshaped copy
            copy = TensorProto()
            copy.CopyFrom(slope)
            copy.name = f"{slope.name}/per_channel/{node.name or node.output[0]}"
            graph.initializer.append(copy)
            node.input[1] = copy.name
            slope = copy
        dims = [int(slope.dims[0])] + [1] * (r - 2)
        del slope.dims[:]
        slope.dims.extend(dims)
        for vi in graph.input:  # an IR 3 model lists its initializers among the inputs too
            if vi.name == slope.name and vi.type.tensor_type.HasField("shape"):
                del vi.type.tensor_type.shape.dim[:]
                for d in dims:
                    vi.type.tensor_type.shape.dim.add().dim_value = d
