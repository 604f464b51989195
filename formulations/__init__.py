"""The mathematical models, each written once against `formulations.model_api.ModelBuilder`, and their solvers.

* `model_api`: the solver-neutral interface (variables, linear constraints, no_overlap, cumulative, hints, solve).
* `backends`: CP-SAT (default), SCIP, CBC, HiGHS adapters; `get_backend`, `available_backends`.
* `placement`: the placement-and-ordering formulation (its module docstring is the model).
* `solve_instance.solve_placement`: instance in, checked `Plan` out (or a typed error).
* `stg_bench.run_stg_benchmark`: the STG development benchmark.
"""
