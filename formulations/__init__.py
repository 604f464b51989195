"""The mathematical models, each written once against `formulations.model_api.ModelBuilder`, and one driver.

* `model_api`: the solver-neutral interface (variables, linear constraints, no_overlap, cumulative, hints, solve).
* `backends`: CP-SAT (default), SCIP, CBC, HiGHS adapters; `get_backend`, `available_backends`.
* `driver`: `Formulation` (what a model gives: build, hint, read back, explain infeasibility, convert its bound)
  and `solve_formulation`, the one solve driver (budget, hints, status mapping, fallback to the known solution,
  the bound and its one rounding rule `ceil_tick`, the resulting `PlanStatus`), returning a typed `Solved`.
* `placement`: the placement-and-ordering model (its module docstring is the model);
  `solve_instance.solve_placement`: instance in, checked `Plan` out (or a typed error).
* `stages`: the pipeline-stage model; `solve_stages` (warm-started by the exact DP of
  `planner.heuristics.stage_dp`).
* `pipeline`: the training-pipeline ordering model (`build_pipeline_model`); `solve_pipeline`.

A new formulation needs only its model (a `build_*_model` with one function per constraint family) and a
`Formulation` subclass with its read-back; the driver does the rest.  Heuristics and exact DPs that serve as warm
starts live in `planner.heuristics`; the STG benchmark in `experiments.stg_bench`.
"""
