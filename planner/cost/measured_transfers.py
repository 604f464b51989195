"""What a run's transfers cost its ranks, from its report, for a re-plan (`plan-solve --measured run.json`).

A run report's time breakdown (`planner.execute.run_breakdown`) splits each rank's time into its ops, the
receives it waited for and the sends it made.  Per transfer, summed over the ranks:

* per send    = send_s / send events: the sender packing, posting and reaping its sends, time taken from its ops;
* per receive = (post_s + recv_late_s) / receives: the receiver posting the receive, and waiting for the data
                after the sending op had ended (the transport and the receiver's wake-up).

A real model's transfers can cost a rank several times what the probe of `plan-calibrate` measures (16-float
messages between tiny ops): a receive posted while the transport reads another message waits for it. So the
transfers of a real model cost what the run says, not what the probe does. A re-plan takes these figures instead of
the profile's: every link between two devices gets latency = per send + per receive (the receive's wait includes the
transport's own latency; the bytes term stays the link's, so a message's bytes are counted once more inside the
measured wait: a small excess), and the runtime replay (`planner.schedule.runtime_replay`)
charges them to the ranks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from planner.ir.topology import LOCAL, Topology

__all__ = ["measured_transfer_s", "with_transfer_latency"]


def measured_transfer_s(path: str | Path) -> tuple[float, float] | None:
    """(seconds per send, seconds per receive) of the run report at `path` (module docstring); None when it is no
    run report with a time breakdown, or its run made no transfer."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    rows = doc.get("time_breakdown") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    try:
        sends = sum(int(r["send_events"]) for r in rows)
        recvs = sum(int(r["recvs"]) for r in rows)
        send_s = sum(float(r["send_s"]) for r in rows)
        recv_s = sum(float(r["post_s"]) + float(r["recv_late_s"]) for r in rows)
    except (KeyError, TypeError, ValueError):
        return None
    if sends == 0 or recvs == 0:
        return None
    return send_s / sends, recv_s / recvs


def with_transfer_latency(topology: Topology, latency_s: float) -> Topology:
    """`topology` with every link between two distinct devices at `latency_s` (bandwidths kept)."""
    links = tuple(tuple(link if link is LOCAL or i == j else dataclasses.replace(link, latency_s=latency_s)
                        for j, link in enumerate(row)) for i, row in enumerate(topology.links))
    return dataclasses.replace(topology, links=links)
