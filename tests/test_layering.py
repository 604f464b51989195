"""The one-way layering of docs/architecture.md ("Layer map"), read from the import statements with `ast`.

Three rules:

* third-party: onnx only in planner/ir/; torch only in planner/execute/; solver libraries only in
  formulations/backends/.  Planning, simulating and drawing must work without torch.
* internal order: every module of planner/ and formulations/ belongs to one layer of `LAYERS` (lowest first) and
  imports only modules of its own layer or of layers below it.  Imports inside functions count too.
* no import cycles among modules at module level (what runs when a module is first imported), and none either when
  imports inside functions count too, over planner/, formulations/ and experiments/: a circle there is two modules
  that each need the other, however late the import runs.
* a sub-package of planner/ is one layer: its __init__ and the modules beside it share a row, so importing the
  package (`from planner.data import X`) is as high as its highest module and an arrow back up cannot hide behind
  a low __init__.

`LAYERS` is the written-down order; a new module needs a row (a module with no layer fails the test), and moving a
module between layers is a one-line change here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]

# library top-level module -> the only folder(s) (relative to the repo) allowed to import it
RESTRICTED = {
    "onnx": "planner/ir",
    # the executor runs segments of a plan on onnxruntime as one of its engines (planner/execute/engines.py)
    "onnxruntime": ("planner/ir", "planner/execute"),
    "torch": "planner/execute",
    "ortools": "formulations/backends",
    "pulp": "formulations/backends",
    "highspy": "formulations/backends",
    "pyscipopt": "formulations/backends",
}

# The internal order, lowest first: (layer, paths relative to the repo).  A path ending in "/" is a folder (all
# modules under it); the longest matching path decides a module's layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # errors, and where the bundled hardware profiles are (planner.bundled_profiles imports nothing of the planner)
    ("errors", ("planner/__init__.py", "planner/errors.py", "planner/bundled_profiles.py")),
    ("ir", ("planner/ir/",)),
    ("cost", ("planner/cost/",)),
    ("passes", ("planner/passes/",)),
    # model file -> passes -> costed instance; needs ir, cost and passes only
    ("prepare", ("planner/prepare.py",)),
    ("schedule", ("planner/schedule/",)),
    # presentation of values from the layers below (Gantt/what-if pictures, inspection summaries, rich tables);
    # above schedule (pictures draw Timelines), below everything that computes plans
    ("plot/report", ("planner/plot.py", "planner/report.py", "planner/report_format.py")),
    ("coarsen", ("planner/coarsen/",)),
    ("heuristics", ("planner/heuristics/",)),
    ("pipeline", ("planner/pipeline/",)),
    # formulations: model_api < backends < driver < models (each model module holds its solve path on the driver)
    ("formulations.model_api", ("formulations/__init__.py", "formulations/model_api.py", "formulations/stop.py")),
    ("formulations.backends", ("formulations/backends/",)),
    ("formulations.driver", ("formulations/driver.py",)),
    ("formulations.models", ("formulations/",)),  # placement, solve_instance, stages, pipeline, pipeline_step
    ("search", ("planner/search/",)),  # the searches' budgets and phases (planner/search/__init__.py and below)
    # the pipeline search: neighbourhoods, time shares and starts over the pipeline models below it
    ("search.pipeline", ("planner/search/pipeline/",)),
    ("decompose/solve", ("planner/decompose.py", "planner/lns.py", "planner/segment_lns.py", "planner/solve.py",
                         "planner/runtime_choice.py", "planner/run_advice.py")),
    ("compare/whatif", ("planner/compare/", "planner/whatif.py")),
    # a calibration as plan-calibrate and opplan.calibrate make it, over planner/execute/ (imported inside its calls)
    ("execute", ("planner/execute/", "planner/calibration.py")),
    # the commands, and planner.data: the bundled model and its generators (which build models on planner.ir)
    ("cli", ("planner/cli.py", "planner/cli_args.py", "planner/cli_calibrate.py", "planner/cli_compare.py",
             "planner/cli_compare_args.py", "planner/cli_compare_sweep.py",
             "planner/cli_interrupt.py", "planner/cli_outputs.py", "planner/cli_run.py", "planner/data/")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}

SOURCES = sorted(p for top in ("planner", "formulations") for p in (REPO / top).rglob("*.py"))
# the studies and benches: outside the layers (they may import any of them), but no circles among them
EXPERIMENTS = sorted((REPO / "experiments").rglob("*.py"))
INTERNAL_ROOTS = ("planner", "formulations", "experiments")


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def layer_of(rel: str) -> str:
    """The layer of a module path (relative to the repo); KeyError names a module that has no layer."""
    best = None
    for name, paths in LAYERS:
        for p in paths:
            if (rel == p or (p.endswith("/") and rel.startswith(p))) and (best is None or len(p) > len(best[1])):
                best = (name, p)
    if best is None:
        raise KeyError(f"{rel} has no layer in tests/test_layering.py LAYERS; add it where it belongs")
    return best[0]


# ------------------------------------------------------------------------------------------------ import reading
def _imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports anywhere in the file (third-party rule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_file(module: str) -> Path | None:
    """The file of an internal module (planner.x.y -> planner/x/y.py or planner/x/y/__init__.py), or None."""
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_module_level(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Runs when the module is imported: not inside a function, and not under `if TYPE_CHECKING:`."""
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return False
    return True


def internal_imports(path: Path) -> list[tuple[Path, int, bool]]:
    """(imported internal module file, line, at module level) for every import of planner/, formulations/ or
    experiments/.

    ``from P import name`` counts as importing ``P.name`` when that is a module, else ``P``; relative imports are
    resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: list[tuple[Path, int, bool]] = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                modules.append(sub if _module_file(sub) is not None else base)
        for module in modules:
            if module.split(".")[0] not in INTERNAL_ROOTS:
                continue
            target = _module_file(module)
            if target is not None and target != path:
                found.append((target, node.lineno, _is_module_level(node, parents)))
    return found


# ------------------------------------------------------------------------------------------------ rules
@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_restricted_imports_stay_in_their_layer(path: Path) -> None:
    rel = _rel(path)
    for module in _imports(path) & RESTRICTED.keys():
        allowed = RESTRICTED[module]
        folders = (allowed,) if isinstance(allowed, str) else allowed
        assert any(rel.startswith(f + "/") for f in folders), \
            f"{rel} imports {module}, which only {' and '.join(f + '/' for f in folders)} may import"


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_internal_imports_run_down_the_layers(path: Path) -> None:
    rel = _rel(path)
    own = layer_of(rel)
    upward = []
    for target, line, _ in internal_imports(path):
        if _rel(target).startswith("experiments/"):
            upward.append(f"{rel}:{line}: imports {_rel(target)}; the library never imports the studies")
            continue
        theirs = layer_of(_rel(target))
        if RANK[theirs] > RANK[own]:
            upward.append(f"{rel}:{line}: {own} -> {theirs} ({_rel(target)}) runs back up")
    assert not upward, "\n".join(upward)


def _module_graph(sources: list[Path] = SOURCES, inside_functions: bool = False) -> nx.DiGraph:
    """Module-level imports (with `inside_functions`, every import); importing a.b.c also runs the __init__ of
    every package above it that the importer is not inside of (those are already being imported when the importer
    runs)."""
    graph = nx.DiGraph()
    for path in sources:
        graph.add_node(_rel(path))
        own_packages = {p / "__init__.py" for p in path.parents}
        for target, _, module_level in internal_imports(path):
            if not (module_level or inside_functions):
                continue
            targets = [target] + [p / "__init__.py" for p in target.parents if (p / "__init__.py").is_file()]
            for t in targets:
                if t != path and t not in own_packages and REPO in t.parents:
                    graph.add_edge(_rel(path), _rel(t))
    return graph


def _cycles(graph: nx.DiGraph) -> list[list[str]]:
    """One cycle per strongly connected group of modules (a group of two or more is a cycle)."""
    out = []
    for group in nx.strongly_connected_components(graph):
        if len(group) > 1:
            out.append([u for u, _ in nx.find_cycle(graph.subgraph(group))])
    return out


def test_no_module_level_import_cycles() -> None:
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join([*c, c[0]]) for c in cycles)


def test_no_import_cycles_even_inside_functions() -> None:
    cycles = _cycles(_module_graph(SOURCES + EXPERIMENTS, inside_functions=True))
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " -> ".join([*c, c[0]]) for c in cycles)


def test_a_sub_package_is_one_layer() -> None:
    # planner/ and formulations/ themselves span every layer (their __init__ sits at the bottom); below them, a
    # package's __init__ and the modules directly beside it share one layer.
    mixed = []
    for init in SOURCES:
        folder = init.parent
        if init.name != "__init__.py" or folder in (REPO / "planner", REPO / "formulations"):
            continue
        own = layer_of(_rel(init))
        others = {f"{_rel(p)} ({layer_of(_rel(p))})" for p in folder.glob("*.py") if layer_of(_rel(p)) != own}
        if others:
            mixed.append(f"{_rel(init)} ({own}) beside {', '.join(sorted(others))}")
    assert not mixed, "a package split across layers:\n" + "\n".join(mixed)


def test_every_module_has_a_layer() -> None:
    missing = []
    for path in SOURCES:
        try:
            layer_of(_rel(path))
        except KeyError as exc:
            missing.append(str(exc))
    assert not missing, "\n".join(missing)


def test_planning_works_without_torch(tmp_path: Path) -> None:
    # torch blocked: the planning commands import and plan a small task graph (imports of planner.execute happen
    # only inside plan-run / plan-codegen).
    graph = tmp_path / "g.json"
    graph.write_text('{"tasks": [{"id": "a", "duration": 5}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],'
                     ' "edges": [{"src": "a", "dst": "b", "comm": 15}, {"src": "a", "dst": "c", "comm": 1}]}')
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        import planner.cli, planner.cli_compare, planner.cli_run, planner.compare.pipelines, planner.whatif
        status = planner.cli.solve_main(["--graph", {str(graph)!r}, "--devices", "2", "--method", "heft",
                                         "--no-pictures", "--quiet", "--out", {str(tmp_path / "p.json")!r}])
        assert status == 0, status
        assert not [m for m in sys.modules if m.startswith("planner.execute")]
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]


# ------------------------------------------------------------------------------------------------ the checker itself
def test_layering_check_sees_real_imports(tmp_path: Path) -> None:
    # Guard against a checker that passes because it reads nothing.
    probe = tmp_path / "probe.py"
    probe.write_text("import torch.nn\nfrom onnx import helper\nfrom . import x\n")
    assert _imports(probe) == {"torch", "onnx"}
    assert len(SOURCES) > 5


def test_layering_check_sees_an_upward_import() -> None:
    # planner/solve.py imports planner.coarsen.refine (below) and formulations.backends (below); the graph sees
    # both, and an import of planner.solve from planner/schedule would be an arrow back up.
    solve = REPO / "planner" / "solve.py"
    targets = {_rel(t) for t, _, _ in internal_imports(solve)}
    assert "planner/coarsen/refine.py" in targets and "formulations/backends/__init__.py" in targets
    assert RANK[layer_of("planner/schedule/plan.py")] < RANK[layer_of("planner/solve.py")]
    assert layer_of("formulations/placement.py") == "formulations.models"
    assert layer_of("formulations/backends/cpsat.py") == "formulations.backends"
    graph = _module_graph()
    assert graph.has_edge("planner/solve.py", "planner/coarsen/refine.py")
    graph.add_edge("planner/coarsen/refine.py", "planner/solve.py")  # a made-up cycle is found
    assert _cycles(graph)
    # the bundled data package holds the model generators, which build on planner.ir: importing it from planner/ir
    # would run back up
    assert RANK[layer_of("planner/data/__init__.py")] > RANK[layer_of("planner/ir/hardware.py")]
    assert RANK[layer_of("planner/bundled_profiles.py")] < RANK[layer_of("planner/ir/hardware.py")]


def test_cycle_check_sees_imports_inside_functions_and_experiments() -> None:
    # experiments/bench.py imports its sections inside functions; only the every-import graph sees them
    bench = [REPO / "experiments" / "bench.py"]
    assert not _module_graph(bench).has_edge("experiments/bench.py", "experiments/bench_heft.py")
    graph = _module_graph(bench, inside_functions=True)
    assert graph.has_edge("experiments/bench.py", "experiments/bench_heft.py")
    graph.add_edge("experiments/bench_heft.py", "experiments/bench.py")
    assert frozenset(_cycles(graph)[0]) == {"experiments/bench.py", "experiments/bench_heft.py"}
