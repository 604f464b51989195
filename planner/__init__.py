"""opplan's library.  Layers, lowest first; a module imports only from its own layer or the layers below it
(`tests/test_layering.py` holds the same order as data and enforces it, with a check for import cycles):

    errors.py, bundled_profiles.py  typed errors; where the bundled hardware profiles are (imports nothing else)
    ir/                             OpGraph, Topology, ONNX and task-graph import, units (the one bytes formatter)
    cost/                           compute and communication in integer ticks -> SchedulingInstance; pin/forbid rules
    passes/                         constant folding, dead-code elimination, cloning
    prepare.py                      model file -> passes -> costed op-level instance (every command starts here)
    schedule/                       Plan, Action IR, validator, simulator, trace, plan files
    plot.py, report.py,             pictures (Gantt, what-if), inspection/plan summaries, rich tables: presentation
      report_format.py              of the values below, used by the upper layers
    coarsen/                        clustering, contraction, expansion, refinement between search rounds
    heuristics/                     HEFT, list scheduling, baselines, memory bounds
    pipeline/                       training-pipeline IR and the hand-designed schedules
    formulations/ (top-level pkg)   model_api < backends < models < driver
    decompose.py, solve.py          bounds by decomposition and the bi-level search
    compare/, whatif.py             baselines vs the planned pipeline schedule; memory sweeps
    execute/                        torch runtime and code generation (the only place that imports torch)
    cli.py, cli_compare.py, cli_run.py, data/ (the bundled model and its generators)
"""
