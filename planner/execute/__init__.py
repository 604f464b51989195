"""Running plans for real: the torch.distributed runtime and code generation (the only package that imports torch).

* `ops/`        torch implementations of ONNX ops (registry `OPS`, `unsupported_ops(graph)`)
* `program`     the single-process executor (`prepared_graph`, `load_program`, `execute`, `default_feeds`)
* `partition`   plan -> per-rank op orders and transfers (no torch; deadlock-free by construction)
* `dist`        one rank's loop (`run_rank`), the local fork launcher (`launch_local`), fault handling
* `runner`      `run_plan`: hash check, launch, --check against onnxruntime, run.json + Chrome trace
* `run_report`  how good the prediction was: measured op times for `--measured`, busy and makespan measured vs
                simulated, the ops furthest from their cost, measured vs predicted peak tensor bytes (no torch)
* `memory_meter` the bytes of the distinct tensor storages a rank holds, and their peak
* `calibrate`   `plan-calibrate`'s measurements with N ranks at once; `calibrate_profile`: the hardware profile
                (YAML with provenance), the per-op CSV and the summary (no torch)
* `torchrun`    `python -m planner.execute.torchrun`: the same run under torchrun (one host or many)
* `codegen`     `write_code`: one plain PyTorch file per rank, weights, a launcher (`plan-codegen`); needs only torch
* `codegen_ops` one ONNX node -> its direct torch call (the arithmetic, matrix and network ops' emitters);
                `codegen_ops_tensor`: the emitters of the ops that move, select or reduce elements (shapes, indexing,
                reductions); `codegen_emit`: what the emitters share (their context, registry, literals, the helper
                call); `codegen_support`, `codegen_p2p`: the helper files written beside the code (send/receive;
                the runtime's ops flattened into `onnx_ops.py` for the rest)
* `torch_pipelining` `torch_schedule_runtime`: one of our exported ``<schedule>.torch.csv`` loaded into PyTorch's
                own pipelining runtime for a rank's stage modules (DualPipe's two directions excepted)
"""
