"""Watching a live broker while reclaim plays out (tests of issue 22 with real Spark)."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AllocationWatch:
    """Samples a broker every 0.2 s until closed: agents over capacity, the executors each
    group was asked to give back (LEAVING), the most each group ran at once, the groups
    that ever rested, and how many samples had every one of `groups` running executors."""

    service: Any
    groups: tuple[str, ...]
    over: list[str] = field(default_factory=list)
    leaving: dict[str, set[str]] = field(default_factory=dict)
    most: Counter[str] = field(default_factory=Counter)
    rested: set[str] = field(default_factory=set)
    both_running: int = 0  # samples with every group running and wanting executors
    fair_while_both: Counter[str] = field(default_factory=Counter)  # most fair share then
    held_while_both: Counter[str] = field(default_factory=Counter)  # most running then
    #: (seconds since start, {group: (running, fair share, target)}) at every change
    timeline: list[tuple[float, dict[str, tuple[int, int, int]]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        broker = self.service.broker
        start = time.monotonic()
        while not self.stop.wait(0.2):
            allocation = broker.allocation()
            for agent in allocation.agents:
                for r, cap in agent.capacity.items():
                    if agent.allocated[r] > cap + 1e-9:
                        self.over.append(f"{agent.name}: {r} {agent.allocated[r]} > {cap}")
            running = Counter()
            for tenant in allocation.tenants:
                for e in tenant.executors:
                    if e.state == "LEAVING":
                        self.leaving.setdefault(tenant.group, set()).add(e.executor_id)
                    if e.state == "RUNNING":
                        running[tenant.group] += 1
            for group, n in running.items():
                self.most[group] = max(self.most[group], n)
            now = {t.group: (running[t.group], t.fair_share, t.target) for t in allocation.tenants}
            if not self.timeline or self.timeline[-1][1] != now:
                self.timeline.append((round(time.monotonic() - start, 1), now))
            # A driver that finished its job unregisters (target and fair share 0) while its
            # executors still run for a moment: that is not "both run".
            wanting = {t.group for t in allocation.tenants if t.target > 0}
            if all(running[g] and g in wanting for g in self.groups):
                self.both_running += 1
                for tenant in allocation.tenants:
                    group = tenant.group
                    self.fair_while_both[group] = max(
                        self.fair_while_both[group], tenant.fair_share
                    )
                    self.held_while_both[group] = max(self.held_while_both[group], running[group])
            with broker._lock:
                for tenant in broker.tenants.values():
                    if any(until > time.monotonic() for until in tenant.standing.rests.values()):
                        self.rested.add(tenant.group)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def rerun_tasks(log: str, executors: set[str]) -> set[int]:
    """Partitions whose first attempt ran on one of `executors`, was lost with it (Spark 4
    logs "failed because while it was being computed, its executor exited", 3.5 "Lost
    task") and that were started again."""
    started = r"Starting task (\d+)\.0 in stage 0\.0 \(TID \d+\) \([^,]*, ?executor (\w+),"
    first = {int(m[1]): m[2] for m in re.finditer(started, log)}
    failed = {
        int(m[1] or m[2])
        for m in re.finditer(
            r"task (\d+)\.0 in stage 0\.0 \(TID \d+\) failed because while it was being "
            r"computed, its executor exited|Lost task (\d+)\.0 in stage 0\.0", log
        )
    }  # fmt: skip
    again = {int(m[1]) for m in re.finditer(r"Starting task (\d+)\.[1-9] in stage 0\.0", log)}
    return {task for task in failed & again if first.get(task) in executors}
