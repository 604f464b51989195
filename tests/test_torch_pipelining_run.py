"""Every stage-level schedule `plan-compare` exports as ``<schedule>.torch.csv`` runs in PyTorch's own pipelining
runtime (``_PipelineScheduleRuntime._load_csv`` + ``step()``) on 2 and 4 forked gloo ranks, with the loss of every
micro-batch and the gradient of every parameter matching a single-process reference.

The model is a stack of Linear+ReLU stages (float64, seeded weights), one per stage of the schedule (p, or 2p for
the interleaved and V-shaped ones).  torch splits the batch into m micro-batches along dimension 0, computes the
mean-squared-error loss per micro-batch on the last stage and divides the accumulated gradients by m
(``scale_grads``, its default); the reference runs the same micro-batches through the whole stack in one process
and back-propagates the mean of their losses.  Tolerance: 1e-10 absolute (float64; only the summation order of
the gradient accumulation differs).

The planned ``opplan`` rows come from ``compare(p, m, UnitCosts(), ...)`` with a short time limit on the V-shaped
and the fixed placement, on unit costs and with overlapping F&B pairs (``OVERLAP_COSTS``), and on plan-compare's
default placement (which keeps DualPipe's two-direction placement when that is shorter: then the refusal below).
DualPipe's bidirectional schedule (two copies of the model, one per direction) is not one chain of stages and
torch's runtime refuses it: that test checks the refusal names the reason.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from planner.compare.pipelines import compare, write_outputs  # noqa: E402
from planner.errors import OpplanError  # noqa: E402
from planner.execute.procs import free_port, run_forked  # noqa: E402
from planner.execute.torch_pipelining import stages_of_rank, torch_schedule_runtime  # noqa: E402
from planner.pipeline.registry import UnitCosts  # noqa: E402
from planner.schedule.torch_csv import read_torch_csv, write_torch_csv  # noqa: E402

pytestmark = pytest.mark.dist

ATOL = 1e-10
WIDTH = 6
ROWS_PER_MICROBATCH = 2
COMM_TIMEOUT_S = 30
RUN_TIMEOUT_S = 120
PLAN_TIME_LIMIT_S = 3.0
SIZES = ((2, 4), (4, 8))  # (p ranks, m micro-batches); m a multiple of p for interleaved 1F1B
RUNNABLE = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipev", "opplan", "opplan-fixed",
            "opplan-overlap-v", "opplan-overlap-fixed")
TWO_DIRECTIONS = ("DualPipe holds two copies of the model, one per direction; torch's runtime runs one chain of "
                  "stages, each on one rank (test_two_direction_schedules_are_refused_with_the_reason)")
SCHEDULES = (*RUNNABLE, pytest.param("dualpipe", marks=pytest.mark.skip(reason=TWO_DIRECTIONS)))


class _RankFailed(Exception):
    pass


# F&B pairs that overlap (run in 0.6 of their two halves' time): the planned schedule then pairs forwards with
# backwards itself (on the fixed placement even a stage's own F and B), unlike any baseline on that placement
OVERLAP_COSTS = UnitCosts(fb_overlap=0.6)


def _write_planned(folder: Path, name: str, p: int, m: int, costs: UnitCosts, placement: str) -> str:
    """Plan with `compare` on `placement`, write ``<name>.torch.csv``; the placement it kept."""
    cmp = compare(p, m, costs, schedules=("dualpipe",), opplan_placement=placement, time_limit_s=PLAN_TIME_LIMIT_S)
    row = next(r for r in cmp.ok_rows() if r.name == "opplan")
    assert row.schedule is not None
    write_torch_csv(row.schedule, folder / f"{name}.torch.csv")
    return str(row.notes["placement"])


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[tuple[int, int], Path]:
    """Per (p, m), the folder where `write_outputs` put every schedule's CSV (the planned row on the V-shaped
    placement), plus planned schedules: on the fixed placement (``opplan-fixed``), with overlapping F&B pairs on
    the V-shaped and fixed placements (``opplan-overlap-v``, ``opplan-overlap-fixed``), and on
    plan-compare's default (``auto``) placement (``opplan-auto``, the placement it kept in
    ``opplan-auto.placement``)."""
    out = {}
    for p, m in SIZES:
        folder = tmp_path_factory.mktemp(f"torch_csv_p{p}_m{m}")
        write_outputs(compare(p, m, UnitCosts(), opplan_placement="v", time_limit_s=PLAN_TIME_LIMIT_S), folder,
                      pictures=False)
        _write_planned(folder, "opplan-fixed", p, m, UnitCosts(), "fixed")
        _write_planned(folder, "opplan-overlap-v", p, m, OVERLAP_COSTS, "v")
        _write_planned(folder, "opplan-overlap-fixed", p, m, OVERLAP_COSTS, "fixed")
        placement = _write_planned(folder, "opplan-auto", p, m, UnitCosts(), "auto")
        (folder / "opplan-auto.placement").write_text(placement)
        out[(p, m)] = folder
    return out


def _model(num_stages: int) -> list[torch.nn.Module]:
    torch.manual_seed(1234)
    return [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()).double() for _ in range(num_stages)]


def _batch(m: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(99)
    x = torch.randn(m * ROWS_PER_MICROBATCH, WIDTH, generator=gen, dtype=torch.float64)
    y = torch.randn(m * ROWS_PER_MICROBATCH, WIDTH, generator=gen, dtype=torch.float64)
    return x, y


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, target)


def _reference(stages: list[torch.nn.Module], x, y, m: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Per micro-batch losses and the gradients of the mean of them, in one process."""
    model = copy.deepcopy(torch.nn.Sequential(*stages))
    losses = [_loss(model(xk), yk) for xk, yk in zip(x.chunk(m), y.chunk(m), strict=True)]
    (sum(losses) / m).backward()
    grads = {f"{s}.{name}": p.grad.clone() for s, stage in enumerate(model) for name, p in stage.named_parameters()}
    return [float(v.detach()) for v in losses], grads


def _run_in_torch(csv_path: Path, p: int, m: int, stages: list[torch.nn.Module], x, y):
    """(losses from the rank holding the last stage, {stage.param: grad}) after one torch `step()`."""
    port = free_port()

    def body(rank: int):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=p,
                                timeout=timedelta(seconds=COMM_TIMEOUT_S))
        try:
            mods = {s: copy.deepcopy(stages[s]) for s in stages_of_rank(csv_path, rank)}
            runtime = torch_schedule_runtime(csv_path, rank, mods, m, _loss)
            losses: list[torch.Tensor] = []
            runtime.step(x, target=y, losses=losses)
            # numpy, not tensors: torch pickles tensors through shared memory, which a child leaving with
            # os._exit cannot serve
            grads = {f"{s}.{name}": prm.grad.numpy().copy() for s, mod in mods.items()
                     for name, prm in mod.named_parameters()}
            return [float(v.detach()) for v in losses], grads
        finally:
            dist.destroy_process_group()

    results = run_forked(p, body, timeout_s=RUN_TIMEOUT_S, what=f"torch pipelining of {csv_path.name}",
                         error=_RankFailed)
    losses = [v for rank_losses, _ in results for v in rank_losses]
    grads = {k: torch.from_numpy(g) for _, rank_grads in results for k, g in rank_grads.items()}
    return losses, grads


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("p,m", SIZES)
def test_exported_schedule_runs_in_torch_with_matching_gradients(exported, name, p, m):
    csv_path = exported[(p, m)] / f"{name}.torch.csv"
    assert csv_path.exists(), f"plan-compare wrote no {csv_path.name}"
    _check_against_reference(csv_path, p, m)


@pytest.mark.parametrize("p,m", SIZES)
def test_planned_schedule_on_the_default_placement_runs_or_is_refused(exported, p, m):
    # plan-compare's default tries DualPipe's two-direction placement too and keeps it when it is shorter
    csv_path = exported[(p, m)] / "opplan-auto.torch.csv"
    if (exported[(p, m)] / "opplan-auto.placement").read_text() == "dualpipe":
        _check_refused(csv_path, p, m)
    else:
        _check_against_reference(csv_path, p, m)


def _check_against_reference(csv_path: Path, p: int, m: int) -> None:
    name = csv_path.name
    num_stages = read_torch_csv(csv_path).num_stages
    assert num_stages in (p, 2 * p)
    stages = _model(num_stages)
    x, y = _batch(m)
    want_losses, want_grads = _reference(stages, x, y, m)
    got_losses, got_grads = _run_in_torch(csv_path, p, m, stages, x, y)
    assert got_losses == pytest.approx(want_losses, abs=ATOL)
    assert sorted(got_grads) == sorted(want_grads)
    for key, want in want_grads.items():
        assert torch.allclose(got_grads[key], want, rtol=0, atol=ATOL), f"{name}: gradient of {key} differs"
    assert any(float(g.abs().max()) > 0 for g in want_grads.values())  # the check compared something


def _check_refused(csv_path: Path, p: int, n_microbatches: int) -> None:
    stages = _model(read_torch_csv(csv_path).num_stages)
    x, y = _batch(n_microbatches)
    with pytest.raises(_RankFailed, match="refuses this schedule.*DualPipe's two directions are two chains"):
        _run_in_torch(csv_path, p, n_microbatches, stages, x, y)


@pytest.mark.parametrize("n_microbatches", [4, 2])  # m in all, or the m/2 each direction runs
def test_two_direction_schedules_are_refused_with_the_reason(exported, n_microbatches):
    _check_refused(exported[(2, 4)] / "dualpipe.torch.csv", 2, n_microbatches)


def test_modules_that_do_not_match_the_csv_are_refused(exported):
    csv_path = exported[(2, 4)] / "1f1b.torch.csv"
    assert stages_of_rank(csv_path, 0) == (0,) and stages_of_rank(csv_path, 1) == (1,)
    assert stages_of_rank(exported[(2, 4)] / "zb-v.torch.csv", 0) == (0, 3)
    with pytest.raises(OpplanError, match="rank 5 has no row"):
        stages_of_rank(csv_path, 5)
    # checked before any process group is needed
    with pytest.raises(OpplanError, match=r"rank 0 runs stages \[0\], but modules were given for \[1\]"):
        torch_schedule_runtime(csv_path, 0, {1: _model(1)[0]}, 4, _loss)
