"""Pipeline training on torch.distributed: a small MoE transformer, an own runtime for `Schedule` action orders
(F, B, W, BW, F&B pairs) on gloo ranks — stage-level or operator-level (sub-chunks of one rank handing over
locally) — a single-process reference and the gradient comparison.

* `model` — the MoE transformer built from `planner.ir.moe_config.MoEConfig` (`TRAIN_CONFIG` by default), as four
  operator-cluster units per layer (attention | dispatch | experts | combine), cuts of them into chunks (whole
  layers by default, any unit boundary allowed), the tensors crossing each boundary, deterministic weights and
  micro-batches
* `unit_costs` — each unit's FLOPs (FlopCounterMode, matrix-product rule for B and W) and the `TrainingPipeline` of a
  cut and placement, for planning schedules this runtime then runs
* `runtime` — `StageLayout`, `run_rank_actions`: what one rank does (the communication rule is in its docstring)
* `launch` — `run_training_schedule` -> `TrainResult`; `TrainRunFailed`
* `reference` — `reference_step`, `compare_gradients` and the stated tolerance (`RTOL`, `ATOL`)

Import the modules directly; this package imports nothing eagerly.
"""
