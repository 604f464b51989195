"""Plans and pipeline schedules: what runs where and when, and the tools that check, replay and draw it.

Modules (one idea each; import them directly, this package imports nothing eagerly):

* `plan` — `Plan`, `TaskPlacement` (the answer of every planning method)
* `plan_io` — versioned plan JSON, written atomically (`save_plan`, `load_plan`)
* `actions` — pipeline actions (F, B, W, BW, F&B pairs, SEND/RECV) and their compact string form
* `program` — `Schedule`: per-device ordered actions; glue to a `SchedulingInstance`
* `torch_csv` — import/export of the action CSV that `torch.distributed.pipelining` reads
* `memory` — memory intervals and per-device memory-over-time (shared by validator and simulator)
* `timeline` — `Timeline` (times, transfers, busy/idle, bubble ratio, memory) and `Transfer`
* `validate` — `validate_plan`, the solver-independent checker
* `simulate` — discrete-event replay of per-device orders, `retime_plan`
* `textgrid` — small device-by-time text pictures for error messages
* `trace` — Chrome trace JSON (Perfetto)
* `atomic` — atomic file writes
* `errors` — typed errors of this layer
"""
