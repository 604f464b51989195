"""The run-time probe: what a rank of `plan-run` gets from the machine right now, measured as `plan-calibrate` did.

Each rank of a run calls `probe(rank, world, sizes)` right before its timed repetitions and right after them, all
ranks at once (a barrier first), with the sizes the plan's profile was calibrated at (`machine_scale.probe_sizes`):
the same timing code as `planner.execute.calibrate` (a block of calls of `sizes.block_s`, once per size instead of
five times), so that each figure is the profile's own kind of figure (`machine_scale.FIGURES`):

* `launch_overhead`  median over the five one-element ops of `calibrate.tiny_program` through `run_node`;
* `float_flops`      median over the profile's matmul and conv sizes of FLOPs / (time per call - a bare one-element
                     torch call);
* `link_latency`, `link_bandwidth`  the ping-pong of `calibrate.p2p_samples` over the profile's message sizes
                     between rank pairs (0-1, 2-3, ...), its robust line; absent on one rank or an idle odd rank.

About 20 blocks of 20 ms plus the messages' round trips: a few tenths of a second on an idle machine per probe.
"""

from __future__ import annotations

import statistics
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from planner.execute.calibrate import Sizes, p2p_samples, per_call_s, rate_samples, tiny_program
from planner.execute.machine_scale import ProbeSizes
from planner.execute.program import run_node

__all__ = ["probe"]


def probe(rank: int, world: int, sizes: ProbeSizes) -> dict[str, float]:
    """This rank's figures now (module docstring); every rank of the group must call it at the same time."""
    if world > 1:
        dist.barrier()
    out: dict[str, float] = {}
    with torch.inference_mode():
        program, nodes, env = tiny_program()
        out["launch_overhead"] = statistics.median(
            per_call_s(partial(run_node, node, env, program), sizes.block_s) for node in nodes)
        one = torch.ones(1)
        call_s = per_call_s(lambda: torch.add(one, one), sizes.block_s)
        rates: list[float] = []
        for m, k, n in sizes.matmul:
            a, b = torch.rand(m, k), torch.rand(k, n)
            rates += rate_samples(2.0 * m * k * n, partial(torch.matmul, a, b), call_s, sizes.block_s, 1)
        for cin, hw, cout, kernel in sizes.conv:
            x, w = torch.rand(1, cin, hw, hw), torch.rand(cout, cin, kernel, kernel)
            rates += rate_samples(2.0 * cout * hw * hw * cin * kernel * kernel,
                                  partial(F.conv2d, x, w, padding=kernel // 2), call_s, sizes.block_s, 1)
        out["float_flops"] = statistics.median(rates)
        if world > 1 and len(sizes.message_bytes) >= 2:
            p2p = p2p_samples(rank, world, Sizes((), (), 0, sizes.message_bytes, sizes.block_s), 1)
            if "p2p_latency" in p2p:
                out["link_latency"] = p2p["p2p_latency"][0]
                out["link_bandwidth"] = p2p["p2p_bandwidth"][0]
    return out
