"""Training-pipeline schedules compared on one cost model: the baselines and the planned schedule (``plan-compare``).

This package sits above `formulations/` (it solves the planned row with `formulations.pipeline` and cuts a model
into stages with `formulations.stages`); `planner/pipeline/` below it holds the pipeline IR and the hand-designed
schedules it compares.  Modules (import them directly; this package imports nothing eagerly):

* `pipelines` — `compare`: simulate every schedule on one cost model, solve the planned one, write compare.csv,
  Gantt charts, torch CSVs
* `model_costs` — a real model's op-level instance cut into p stages / 2p chunks (the model mode of plan-compare)
* `plot` — the side-by-side picture of plan-compare
"""
