"""The real-model corpus: write models users actually have, then import, plan and run each on gloo
ranks against onnxruntime, and tabulate the result.

    python -m experiments.corpus --out DIR [--only NAME ...] [--exporter legacy|dynamo] [--skip-run]

writes the models under `DIR` and `DIR/corpus.csv` (one row per model file; columns in `COLUMNS`).  Sources:

* `torch`: the tiny torch modules of `experiments/corpus_models.py` (GPT-2, BERT, Mixtral- and Qwen2-MoE layers,
  an OCR detector with Resize, LSTM and GRU models, a sample-rate `If` switch, a Conv+BN classifier), each exported
  with both torch exporters: `legacy` (`torch.onnx.export(..., dynamo=False)`, TorchScript; the `If` model is
  scripted) and `dynamo` (`dynamo=True, external_data=False`, onnxscript).  A failed export is a row too.
* `onnx-light`: the onnx wheel's light CNNs (`onnx/backend/test/data/light/*.onnx`) with every shipped weight
  (one `ConstantOfShape` of a single value each, which would make the outputs uniform) replaced by a seeded random
  initializer in a copy, and the final softmax dropped (it saturates on random logits); node names are kept.
* `package`: `.onnx` files shipped inside installed packages (onnxruntime's `datasets/`), as shipped.
* `onnx-data`: the 140 small model files the onnx wheel ships beside its node tests (pytorch-converted and
  pytorch-operator, old PyTorch exports at opset 6, and simple), as shipped, fed their shipped inputs, and checked
  against their shipped outputs too (column `max_abs_vs_shipped`); not in the default sources (`--source onnx-data`).
* `transformers`: Hugging Face's own Mixtral, Qwen2-MoE, DeepSeek-V3 and GPT-2 model classes with tiny configs and
  random weights, dynamo-exported (`experiments/hf_models.py`, which says why their experts export as
  `batched_mm`); not in the default sources (it needs `transformers`, a test dependency): `--source transformers`.
* `edges`: one model per class the importer, cost model or runtime found hard (`experiments/corpus_edges.py`:
  global pooling as an AveragePool with ceil_mode, a dynamically quantized model, a contrib op without onnx shape
  inference, a data-dependent op), built from transformers' and torch's classes, onnxruntime's quantizer and the
  onnx wheel's node tests; not in the default sources: `--source edges`.

Each model is imported as written (no pre-processing; only the `--input-value` a user would give, e.g. the sample
rate), planned with HEFT on the bundled `cpu-4.yaml` (4 devices), and run on `RANKS` gloo ranks with the runner's
`--check` (onnxruntime on the original file).  When HEFT keeps every op on one device, the check runs a round-robin
plan instead so that tensors do cross ranks (column `run_plan`).  Feeds are the modules' example inputs (token ids
below the vocabulary size) or, for the other sources, the runner's deterministic defaults.  Column `moe` holds the
MoE layers found from each graph's structure (`planner.ir.moe_structure`: layers, experts, top-k, routing kind),
the line plan-inspect prints; the command prints it under each MoE model's line.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from planner.cli import solve_main
from planner.execute.program import prepared_graph
from planner.execute.runner import run_plan
from planner.ir.moe_structure import NO_MOE_LINE, find_moe_layers
from planner.ir.onnx_legacy import default_opset
from planner.schedule.plan_io import load_plan

REPO = Path(__file__).resolve().parents[1]
HW = REPO / "hardware_profiles" / "cpu-4.yaml"
EXPORTERS = ("legacy", "dynamo")
LEGACY_OPSET = 17
# the light CNNs in the corpus (the others are the same kinds of layers at 100-550 MB of weights)
LIGHT_MODELS = ("squeezenet", "shufflenet", "inception_v1", "densenet121")
# the onnx wheel's small model files beside its node tests, with shipped inputs (the `onnx-data` source)
ONNX_DATA_FOLDERS = ("pytorch-converted", "pytorch-operator", "simple")
PACKAGE_MODELS = ("onnxruntime/datasets/mul_1.onnx", "onnxruntime/datasets/sigmoid.onnx",
                  "onnxruntime/datasets/logreg_iris.onnx")
# the check: max relative error (an output's max abs error / its max |onnxruntime value|) at most REL_TOL, or the
# max abs error at most ATOL for outputs that are all near zero
REL_TOL = 1e-4
ATOL = 1e-6
RANKS = {"default": 2, "gpt2": 3, "bert": 3, "mixtral_moe": 4, "qwen2_moe": 4, "hf_mixtral": 4, "hf_qwen2_moe": 4,
         "hf_deepseek_v3": 4, "hf_gpt2": 3, "light_inception_v1": 3,
         "light_densenet121": 4}
COLUMNS = ("model", "kind", "source", "exporter", "export", "ops", "op_types", "import", "moe", "makespan_s",
           "lower_bound_s", "run_plan", "ranks", "transfers", "max_abs_error", "max_rel_error", "max_abs_vs_shipped",
           "result")

__all__ = ["CorpusEntry", "write_corpus", "evaluate", "main", "COLUMNS"]


@dataclass
class CorpusEntry:
    """One model file of the corpus (or a failed export: `path` None, `error` says why)."""

    name: str
    kind: str
    source: str
    exporter: str = ""
    path: Path | None = None
    feeds: dict[str, np.ndarray] | None = None
    input_values: dict[str, list[float]] = field(default_factory=dict)
    error: str = ""
    expected: dict[str, np.ndarray] | None = None  # outputs shipped with the model (the onnx-data source)

    @property
    def key(self) -> str:
        return f"{self.name}_{self.exporter}" if self.exporter else self.name


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters print progress and warnings; the table is the output."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _export_torch(out: Path, exporters: Sequence[str], only: set[str] | None) -> list[CorpusEntry]:
    # torch is imported here, not at the top: planning-only uses of this module (--skip-run on existing files)
    # and the package/light sources need no torch
    import logging

    import torch

    from experiments.corpus_models import SampleRateVADScripted, corpus_modules

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    entries = []
    for cm in corpus_modules():
        if only and cm.name not in only:
            continue
        module = cm.make()
        args = tuple(cm.inputs.values())
        feeds = {k: v.numpy() for k, v in cm.inputs.items() if k not in cm.input_values}
        for exporter in exporters:
            entry = CorpusEntry(cm.name, cm.kind, "torch", exporter, feeds=feeds, input_values=cm.input_values)
            path = out / f"{entry.key}.onnx"
            try:
                with _quiet():
                    if exporter == "dynamo":
                        torch.onnx.export(module, args, str(path), input_names=list(cm.inputs), dynamo=True,
                                          external_data=False)
                    else:
                        # TorchScript has no torch.cond: the legacy exporter needs the scripted twin for `If`
                        legacy = torch.jit.script(SampleRateVADScripted(module)) if cm.needs_cond else module
                        torch.onnx.export(legacy, args, str(path), input_names=list(cm.inputs), dynamo=False,
                                          opset_version=LEGACY_OPSET)
                entry.path = path
            except Exception as exc:  # an exporter failure is a corpus row, not a crash of the corpus
                entry.error = _one_line(exc)
            entries.append(entry)
            if cm.input_values and entry.path is not None:
                # the same file without --input-value: the If stays one op and runs at run time, here on the
                # other value (8 kHz: the nested If too)
                other = {k: np.full_like(v.numpy(), cm.other_values[k]) for k, v in cm.inputs.items()
                         if k in cm.other_values}
                entries.append(CorpusEntry(f"{cm.name}_unbound", f"{cm.kind}; not bound: If at run time", "torch",
                                           exporter, path=path, feeds={**feeds, **other}))
    return entries


def _export_transformers(out: Path, only: set[str] | None) -> list[CorpusEntry]:
    """The `transformers` source: each `HF_MODELS` entry exported with dynamo, then each `HF_ARCHITECTURES` entry
    with its exporter (a failed export is a row)."""
    from experiments.hf_models import (  # needs torch (see _export_torch)
        HF_ARCHITECTURES,
        HF_MODELS,
        export_hf_architecture,
        export_hf_model,
        input_ids,
    )

    entries = []
    for model in HF_MODELS:
        if only and model.name not in only:
            continue
        entry = CorpusEntry(model.name, model.kind, "transformers", "dynamo", feeds={"input_ids": input_ids()})
        try:
            with _quiet():
                entry.path = export_hf_model(model, out / f"{entry.key}.onnx")
        except Exception as exc:  # an exporter failure (or transformers missing) is a corpus row
            entry.error = _one_line(exc)
        entries.append(entry)
    for arch in HF_ARCHITECTURES:
        if only and arch.name not in only:
            continue
        entry = CorpusEntry(arch.name, arch.kind, "transformers", arch.exporter)
        try:
            with _quiet():
                entry.path, entry.feeds = export_hf_architecture(arch, out / f"{entry.key}.onnx")
        except Exception as exc:  # as above
            entry.error = _one_line(exc)
        entries.append(entry)
    return entries


def _site_dir(package: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {package} package is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """A copy of `model` whose `ConstantOfShape` weights (constant shape input) are seeded random initializers.

    Scales keep activations of a deep ReLU network in range: fan-in scaled normals for tensors of rank >= 2,
    small normals for vectors; the variance and scale inputs of BatchNormalization are positive, near 1."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    positive, scale = set(), set()
    for node in graph.node:
        if node.op_type == "BatchNormalization":
            scale.add(node.input[1])
            positive.add(node.input[4])
    keep, replaced = [], []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        out = node.output[0]
        if out in positive:
            arr = 0.5 + rng.random(shape)
        elif out in scale:
            arr = 1.0 + 0.2 * rng.standard_normal(shape)
        elif len(shape) >= 2:
            arr = rng.standard_normal(shape) * np.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))
        else:
            arr = 0.1 * rng.standard_normal(shape)
        replaced.append(numpy_helper.from_array(arr.astype(np.float32), out))
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(replaced)
    # the shapes the ConstantOfShape nodes read are dead now: drop them, and (IR 3 lists initializers among the
    # inputs) their graph inputs too, or onnxruntime would ask for them as feeds
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    dead = {t.name for t in graph.initializer if t.name not in used}
    live = [t for t in graph.initializer if t.name not in dead]
    inputs = [vi for vi in graph.input if vi.name not in dead]
    del graph.initializer[:], graph.input[:]
    graph.initializer.extend(live)
    graph.input.extend(inputs)
    # no onnx.checker here: the light models are IR 3, which lists every initializer among the graph inputs; the
    # new initializers are left out of the inputs, as in onnxruntime's own IR 3 files (mul_1.onnx), which
    # onnxruntime runs and the importer reads as IR 4
    return model


def drop_final_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (changed in place) with a Softmax that produces a graph output removed, its input now the output.

    With random weights a classifier's softmax saturates (shufflenet: one class at 1.0, the rest 0.0), and a
    comparison of near one-hot vectors checks little; the logits are compared instead."""
    graph = model.graph
    outputs = {vi.name: vi for vi in graph.output}
    final = [n for n in graph.node if n.op_type == "Softmax" and n.output[0] in outputs]
    consumed = {i for n in graph.node for i in n.input}
    for node in final:
        if node.output[0] in consumed:  # someone else reads the probabilities: keep them
            continue
        vi = outputs[node.output[0]]
        vi.name = node.input[0]
        graph.node.remove(node)
    return model


def _write_light(out: Path, only: set[str] | None) -> list[CorpusEntry]:
    light = _site_dir("onnx") / "backend" / "test" / "data" / "light"
    entries = []
    for i, name in enumerate(LIGHT_MODELS):
        entry = CorpusEntry(f"light_{name}", "CNN (onnx wheel, random weights)", "onnx-light")
        if only and entry.name not in only:
            continue
        try:
            path = out / f"{entry.key}.onnx"
            model = randomize_weights(onnx.load(str(light / f"light_{name}.onnx")), seed=100 + i)
            onnx.save(drop_final_softmax(model), str(path))
            entry.path = path
        except Exception as exc:
            entry.error = _one_line(exc)
        entries.append(entry)
    return entries


def _package_models(only: set[str] | None) -> list[CorpusEntry]:
    entries = []
    for rel in PACKAGE_MODELS:
        package, _, rest = rel.partition("/")
        name = Path(rest).stem
        if only and name not in only:
            continue
        entry = CorpusEntry(name, f"shipped in {package}", "package", path=_site_dir(package) / rest)
        entries.append(entry)
    return entries


def _shipped_tensors(folder: Path, prefix: str, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The tensors shipped as ``test_data_set_0/<prefix>_<k>.pb`` beside a model, by their own name or else the
    k-th of `names` (the model's graph inputs or outputs)."""
    out = {}
    for k, pb in enumerate(sorted((folder / "test_data_set_0").glob(f"{prefix}_*.pb"))):
        tensor = onnx.load_tensor(str(pb))
        out[tensor.name or names[k]] = numpy_helper.to_array(tensor)
    return out


def _onnx_data_models(only: set[str] | None) -> list[CorpusEntry]:
    """The `onnx-data` source: the small model files the onnx wheel ships beside its node tests
    (`ONNX_DATA_FOLDERS`; pytorch-converted and pytorch-operator are old PyTorch exports at opset 6), as shipped,
    each fed the inputs shipped beside it and checked against the outputs shipped there (`CorpusEntry.expected`)."""
    entries = []
    for folder in ONNX_DATA_FOLDERS:
        for model_path in sorted((_site_dir("onnx") / "backend" / "test" / "data" / folder).glob("*/model.onnx")):
            name = model_path.parent.name
            if only and name not in only:
                continue
            model = onnx.load(str(model_path), load_external_data=False)
            inits = {t.name for t in model.graph.initializer}
            feeds = _shipped_tensors(model_path.parent, "input", [i.name for i in model.graph.input
                                                                   if i.name not in inits])
            expected = _shipped_tensors(model_path.parent, "output", [o.name for o in model.graph.output])
            entries.append(CorpusEntry(name, f"onnx wheel {folder} (opset {default_opset(model)})", "onnx-data",
                                       path=model_path, feeds=feeds or None, expected=expected or None))
    return entries


def _edge_models(out: Path, only: set[str] | None) -> list[CorpusEntry]:
    """The `edges` source (`experiments.corpus_edges`), written under `out`; a build that fails is a row."""
    from experiments.corpus_edges import EDGE_MODELS  # needs torch and transformers (see _export_torch)

    entries = []
    for name, build in EDGE_MODELS.items():
        if only and name not in only:
            continue
        try:
            with _quiet():
                m = build(out)
            entries.append(CorpusEntry(m.name, m.kind, "edges", m.exporter, path=m.path, feeds=m.feeds,
                                       expected=m.expected))
        except Exception as exc:  # as an exporter failure
            entries.append(CorpusEntry(name, "", "edges", error=_one_line(exc)))
    return entries


def write_corpus(out: str | Path, *, exporters: Sequence[str] = EXPORTERS, only: Sequence[str] = (),
                 sources: Sequence[str] = ("torch", "onnx-light", "package")) -> list[CorpusEntry]:
    """Write the corpus's model files under `out` (package models are used where they are installed)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(only) or None
    entries: list[CorpusEntry] = []
    if "torch" in sources:
        entries += _export_torch(out, exporters, wanted)
    if "onnx-light" in sources:
        entries += _write_light(out, wanted)
    if "package" in sources:
        entries += _package_models(wanted)
    if "transformers" in sources:
        entries += _export_transformers(out, wanted)
    if "onnx-data" in sources:
        entries += _onnx_data_models(wanted)
    if "edges" in sources:
        entries += _edge_models(out, wanted)
    return entries


def _plan(entry: CorpusEntry, out: Path, method: str) -> tuple[Path, list[str]]:
    """The plan file plan-solve wrote with `method`, and the warning lines it printed (e.g. ops the runtime cannot
    run: the row's result names them where the run is refused)."""
    plan = out / f"{entry.key}.{method}.plan.json"
    argv = ["--model", str(entry.path), "--hw", str(HW), "--method", method, "--out", str(plan), "--no-pictures",
            "--quiet", "--format", "json"]
    for k, v in entry.input_values.items():
        argv += ["--input-value", f"{k}={','.join(str(int(x)) if float(x).is_integer() else str(x) for x in v)}"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = solve_main(argv)
    if rc != 0:
        raise RuntimeError(err.getvalue().strip() or f"plan-solve exited {rc}")
    return plan, [line for line in err.getvalue().splitlines() if line.startswith("warning: ")]


def evaluate(entry: CorpusEntry, out: str | Path, *, run: bool = True, ranks: int | None = None) -> dict[str, Any]:
    """Import, plan (HEFT) and run one corpus model; the CSV row (never raises: a failing step is the `result`)."""
    out = Path(out)
    row: dict[str, Any] = {c: "" for c in COLUMNS}
    row.update(model=entry.name, kind=entry.kind, source=entry.source, exporter=entry.exporter,
               export="failed" if entry.error else "ok")
    if entry.path is None:
        row["result"] = f"export failed: {entry.error}"
        return row
    step, warned = "import", list[str]()
    try:
        graph = prepared_graph(entry.path, None, entry.input_values or None)
        row["ops"] = graph.num_ops
        row["op_types"] = " ".join(sorted({op.op_type for op in graph.ops}))
        row["import"] = "ok"
        # the MoE layers found from the graph's structure, as plan-inspect prints them (experts, top-k, routing)
        row["moe"] = find_moe_layers(graph).summary_line()
        step = "plan"
        plan_path, warned = _plan(entry, out, "heft")
        plan = load_plan(plan_path)
        tick = plan.tick_s or 1.0
        row["makespan_s"] = f"{plan.makespan_tick * tick:.3e}"
        row["lower_bound_s"] = f"{plan.lower_bound_tick * tick:.3e}"
        run_path, row["run_plan"] = plan_path, "heft"
        if len({p.device for p in plan.placements}) < 2:
            run_path, row["run_plan"] = _plan(entry, out, "round_robin")[0], "round_robin"
        if not run:
            row["result"] = "planned (not run)"
            return row
        step = "run"
        nproc = ranks or RANKS.get(entry.key, RANKS.get(entry.name, RANKS["default"]))
        feeds = {k: v for k, v in entry.feeds.items() if k in graph.graph_inputs} if entry.feeds else None
        outcome = run_plan(run_path, nproc=nproc, check=True, feeds=feeds, comm_timeout_s=60, run_timeout_s=300)
        rep = outcome.report
        row.update(ranks=rep["world_size"], transfers=rep["transfers"], max_abs_error=f"{rep['max_abs_error']:.2e}",
                   max_rel_error=f"{rep['max_rel_error']:.2e}")
        within = rep["max_rel_error"] <= REL_TOL or rep["max_abs_error"] <= ATOL
        row["result"] = "ok" if within else f"mismatch: max rel error {rep['max_rel_error']:.2e} > {REL_TOL:g}"
        if entry.expected:  # the outputs shipped beside the file: a second reference, independent of onnxruntime
            off = _shipped_error(outcome.outputs, entry.expected)
            row["max_abs_vs_shipped"] = f"{off:.2e}"
            if within and not off <= max(ATOL, REL_TOL * max(float(np.nanmax(np.abs(v), initial=0.0))
                                                              for v in entry.expected.values())):
                row["result"] = f"mismatch: max abs error {off:.2e} against the shipped outputs"
    except Exception as exc:  # one model's failure is its row; the corpus goes on
        if step == "import":
            row["import"] = "failed"
        row["result"] = f"{step} failed: {_one_line(exc)}"
        if step == "run" and warned:  # plan-solve said so up front
            row["result"] = f"plan-solve {warned[0]}; {row['result']}"
        if os.environ.get("CORPUS_TRACEBACK"):
            traceback.print_exc()
    return row


def _shipped_error(outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """Max |ours - shipped| over the shipped outputs; NaN where the shipped value is NaN counts as 0, anywhere else
    as infinity (a NaN of ours where a number was shipped is wrong)."""
    worst = 0.0
    for name, want in expected.items():
        got = np.asarray(outputs[name], dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        both = np.isnan(got) & np.isnan(want)
        diff = np.where(both, 0.0, np.abs(got - want))
        worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)))
    return worst


def write_table(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _us(seconds: str) -> str:
    return f"{float(seconds) * 1e6:.1f} µs" if seconds else ""


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The corpus as a Markdown table (`--markdown`): one line per model file (errors without the file's folder)."""
    lines = ["| model | source | exporter | ops | import | HEFT makespan | lower bound | run plan, ranks, transfers "
             "| max abs error | max rel error | result |", "|---|---|---|---:|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        result = str(r["result"])
        for part in result.split():
            if os.sep in part and ".onnx" in part:
                result = result.replace(part, Path(part.rstrip(":")).name + (":" if part.endswith(":") else ""))
        run = f"{r['run_plan']}, {r['ranks']}, {r['transfers']}" if r["ranks"] != "" else ""
        cells = [r["model"], r["source"], r["exporter"] or "—", r["ops"], r["import"], _us(r["makespan_s"]),
                 _us(r["lower_bound_s"]), run, r["max_abs_error"], r["max_rel_error"], result]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model files, plans and corpus.csv")
    parser.add_argument("--only", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--exporter", action="append", choices=EXPORTERS, default=[], help="default: both")
    parser.add_argument("--source", action="append",
                        choices=("torch", "onnx-light", "package", "transformers", "onnx-data", "edges"), default=[],
                        help="default: torch, onnx-light, package")
    parser.add_argument("--skip-run", action="store_true", help="import and plan only")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args(argv)
    entries = write_corpus(args.out, exporters=args.exporter or EXPORTERS, only=args.only,
                           sources=args.source or ("torch", "onnx-light", "package"))
    rows = []
    for entry in entries:
        row = evaluate(entry, args.out, run=not args.skip_run)
        rows.append(row)
        print(f"{entry.key:28s} {row['ops']!s:>5} ops  {row['result']}", flush=True)
        if "MoE" in entry.kind or row["moe"] not in ("", NO_MOE_LINE):  # an MoE model, or a router seen
            print(f"{'':28s} {row['moe']}", flush=True)
    write_table(rows, args.out / "corpus.csv")
    if args.markdown:
        print(markdown_table(rows))
    ok = sum(r["result"] == "ok" for r in rows)
    print(f"{ok} of {len(rows)} ran and matched onnxruntime; table: {args.out / 'corpus.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
