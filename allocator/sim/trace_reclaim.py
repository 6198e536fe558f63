"""Reclaim in the trace simulator (issue 22): each task is an executor of its task group.

A reclaimed task runs on for the grace; if it finishes within it, nothing is lost. Otherwise
it is killed when the grace ends. The seconds it ran are lost (counted per user), and it goes
back to the front of its group's queue with its whole duration, to be run again. The
decisions are `allocator.sim.reclaim_sim.SimReclaim`'s, as in the batch simulator.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from allocator.sim.reclaim_sim import SimReclaim

#: Event kinds, after trace_sim's own.
TASK_DONE, KILL = 5, 6


class TraceReclaim:
    def __init__(self, sim: Any) -> None:  # a TraceSimulator (which imports this module)
        self.sim = sim
        self.core = SimReclaim(sim.engine, sim.config)
        self._ids = itertools.count()
        self.tasks: dict[int, tuple[int, int, float, float]] = {}  # group, agent, start, s
        self.of_group: list[set[int]] = [set() for _ in sim.names]
        users = len(sim.workload.users)
        self.reclaimed = np.zeros(users, dtype=np.int64)
        self.work_lost = np.zeros(users)

    def launch(self, g: int, agent: int, duration: float) -> None:
        """A task of group g starts on `agent`; it ends after `duration` unless killed."""
        sim = self.sim
        task = next(self._ids)
        self.tasks[task] = (g, agent, sim.now, duration)
        self.of_group[g].add(task)
        self.core.started(str(task), sim.names[g], sim.workload.agent_names[agent], sim.now)
        sim._at(sim.now + duration, TASK_DONE, task)

    def _forget(self, task: int) -> tuple[int, int, float, float] | None:
        entry = self.tasks.pop(task, None)
        if entry is not None:
            self.of_group[entry[0]].discard(task)
            self.core.gone(str(task))
        return entry

    def done(self, task: int) -> None:
        entry = self._forget(task)
        if entry is not None:  # else killed, or its user left
            self.sim._finish(entry[0], entry[1])

    def run(self, now: float) -> None:
        """At an allocation run: reclaim, each kill after the grace."""
        for decision in self.core.run(now):
            task = int(decision.executor)
            self.reclaimed[self.sim.group_user[self.tasks[task][0]]] += 1
            self.sim._at(now + self.core.grace, KILL, task)

    def kill(self, task: int) -> None:
        entry = self._forget(task)
        if entry is None:  # it finished within the grace
            return
        g, agent, start, duration = entry
        sim = self.sim
        u = sim.group_user[g]
        self.work_lost[u] += sim.now - start
        sim.engine.release(sim.names[g], sim.workload.agent_names[agent], 1)
        sim.queues[g].put_back(duration)
        sim.running[g] -= 1
        sim.pending += 1
        series = sim.series
        series.held[u] -= sim.demand_real[g]
        series.used -= sim.demand_real[g]
        series.running[u] -= 1
        if series.running[u] == 0:
            series.held[u] = 0.0
        series.changed()
        if sim.slots:
            sim.slot_busy -= 1
        if sim.agent_used is not None:
            sim.agent_used[agent] -= sim.demand[g]

    def left(self, g: int) -> None:
        """Group g's user left: its tasks were freed with it."""
        for task in list(self.of_group[g]):
            self._forget(task)

    def to_json(self) -> dict[str, object]:
        users = [u.name for u in self.sim.workload.users]
        return {
            "executors": int(self.reclaimed.sum()),  # tasks: each is an executor here
            "work_lost_s": round(float(self.work_lost.sum()), 3),
            "by_user": {
                name: {"executors": int(n), "work_lost_s": round(float(lost), 3)}
                for name, n, lost in zip(users, self.reclaimed, self.work_lost, strict=True)
                if n
            },
        }
