"""Pin and forbid rules: restrict which devices may run which ops, by op-name pattern (``--pin``, ``--forbid``).

A rule is an fnmatch pattern over op names and a device name.  A pin allows only that device for every matching
op; a forbid excludes it.  Restricting means setting the other durations to `INELIGIBLE`, so every formulation,
heuristic and validator sees the rule without knowing about it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InputError


def apply_placement_rules(instance: SchedulingInstance, pins: Mapping[str, str], forbids: Mapping[str, str]
                          ) -> SchedulingInstance:
    """Restrict devices by op-name pattern (fnmatch): `pins[pattern] = device name` allows only that device,
    `forbids[pattern] = device name` excludes it.  A pattern that matches no op, or a device that does not exist,
    is an InputError (worded after the ``--pin``/``--forbid`` options); so is an op left with no device."""
    if not pins and not forbids:
        return instance
    duration = instance.duration_tick.copy()
    devices = {name: i for i, name in enumerate(instance.device_names)}
    for kind, rules in (("pin", pins), ("forbid", forbids)):
        for pattern, dev in rules.items():
            if dev not in devices:
                raise InputError(f"--{kind} {pattern}={dev}: no device named {dev!r}",
                                 fix=f"devices are {', '.join(instance.device_names[:4])}...")
            hits = [i for i, name in enumerate(instance.task_names) if fnmatch.fnmatchcase(name, pattern)]
            if not hits:
                raise InputError(f"--{kind} {pattern}={dev}: the pattern matches no op")
            d = devices[dev]
            for i in hits:
                if kind == "pin":
                    keep = duration[i, d]
                    duration[i, :] = INELIGIBLE
                    duration[i, d] = keep
                else:
                    duration[i, d] = INELIGIBLE
    stuck = [instance.task_names[i] for i in range(instance.num_tasks) if (duration[i] >= INELIGIBLE).all()]
    if stuck:
        raise InputError(f"pins and forbids leave {len(stuck)} ops with no device, e.g. {stuck[:3]}")
    return dataclasses.replace(instance, duration_tick=duration)
