"""Running plans for real: the torch.distributed runtime and code generation (the only package that imports torch).

* `ops/`        torch implementations of ONNX ops (registry `OPS`, `unsupported_ops(graph)`)
* `program`     the single-process executor (`prepared_graph`, `load_program`, `execute`, `default_feeds`)
* `partition`   plan -> per-rank op orders and transfers (no torch; deadlock-free by construction)
* `dist`        one rank's loop (`run_rank`), the local fork launcher (`launch_local`), fault handling
* `runner`      `run_plan`: hash check, launch, --check against onnxruntime, run.json + Chrome trace
* `torchrun`    `python -m planner.execute.torchrun`: the same run under torchrun (one host or many)
* `codegen`     `write_code`: one plain Python file per rank + a launcher (`plan-codegen`)
"""
