"""Pipeline training on torch.distributed: a small MoE transformer, an own runtime for `Schedule` action orders
(F, B, W, BW, F&B pairs) on gloo ranks, a single-process reference and the gradient comparison.

* `model` — the MoE transformer built from `planner.ir.moe_config.MoEConfig` (`TRAIN_CONFIG` by default), its
  chunks, deterministic weights and micro-batches
* `runtime` — `StageLayout`, `run_rank_actions`: what one rank does (the communication rule is in its docstring)
* `launch` — `run_training_schedule` -> `TrainResult`; `TrainRunFailed`
* `reference` — `reference_step`, `compare_gradients` and the stated tolerance (`RTOL`, `ATOL`)

Import the modules directly; this package imports nothing eagerly.
"""
