"""Training pipelines: unrolled F/B/W tasks and the hand-designed baseline schedules.

Modules (import them directly; this package imports nothing eagerly):

* `unroll` — `StageCost`, `TrainingPipeline`: stages x micro-batches -> a `SchedulingInstance` whose tasks are
  named by action strings (``0F3``), with the training dependencies, placement and activation memory
* `metrics` — per-schedule figures: makespan, bubble, pipeline memory (activations from F to W, parameters per
  stage copy)
* `generators` — GPipe, 1F1B, interleaved 1F1B, and `RequirementError`, the typed error every generator raises
  when its published conditions on p and m are not met
* `zero_bubble` — ZB-H1, ZB-H2, ZB-V
* `dualpipe` — DualPipe (bidirectional) and DualPipeV
* `registry` — every generator by name, with the pipeline (stage split, placement) it runs on; `UnitCosts`
* `streams` — simulate a baseline with per-device communication streams (sends first come, first served)
* `mirror` — the fold of a symmetric DualPipe placement onto half its devices (symmetric schedules, half the tasks)
* `greedy` — the constructive list schedule that warm-starts the planned schedule
* `stream_greedy` — its twin for pipelines with communication streams (sends, all-to-alls), in-flight limits by
  Little's law

The comparison of these schedules with the planned one (which needs `formulations/`) is `planner.compare`, one
layer above.
"""
