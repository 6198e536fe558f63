"""Progress on stderr: one bar of finished jobs per group, and a status line of executors per
agent from the latest broker snapshot."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from tqdm import tqdm

from allocator.batch.allocation import AllocationSample


def _short(groups: Sequence[str]) -> dict[str, str]:
    """Shortest distinct prefixes (at least 2 letters) to label groups in the status line."""
    out: dict[str, str] = {}
    for g in groups:
        n = min(2, len(g))
        while n < len(g) and any(o != g and o.startswith(g[:n]) for o in groups):
            n += 1
        out[g] = g[:n]
    return out


class BatchProgress:
    """Bars on a terminal; on a pipe or file, one plain line each time a job finishes."""

    def __init__(self, jobs_per_group: Mapping[str, int], enabled: bool = True) -> None:
        self.enabled = enabled
        self.labels = _short(list(jobs_per_group))
        self.totals = dict(jobs_per_group)
        self.bars: dict[str, tqdm] = {}
        self.status: tqdm | None = None
        self.plain = not sys.stderr.isatty()
        self._last_done: dict[str, int] = {}
        if not enabled or self.plain:
            return
        width = max(len(g) for g in jobs_per_group)
        for position, (group, total) in enumerate(jobs_per_group.items()):
            self.bars[group] = tqdm(
                total=total,
                desc=f"{group:<{width}}",
                unit="job",
                position=position,
                file=sys.stderr,
                dynamic_ncols=True,
            )
        self.status = tqdm(
            total=0,
            position=len(jobs_per_group),
            bar_format="{desc}",
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def update(self, done: Mapping[str, int], sample: AllocationSample | None) -> None:
        if not self.enabled:
            return
        if self.plain:
            self._line(done, sample)
            return
        for group, bar in self.bars.items():
            bar.update(done.get(group, 0) - bar.n)
            if sample is not None:
                bar.set_postfix_str(f"{sample.running.get(group, 0)} executors", refresh=False)
            bar.refresh()
        if sample is not None and self.status is not None:
            agents = " ".join(
                f"{agent}:{self._counts(n)}" for agent, n in sample.agent_executors.items()
            )
            self.status.set_description_str(f"executors per agent: {agents or '-'}")

    def _line(self, done: Mapping[str, int], sample: AllocationSample | None) -> None:
        now = {g: done.get(g, 0) for g in self.totals}
        if now == self._last_done:
            return
        self._last_done = now
        jobs = ", ".join(f"{g} {n}/{self.totals[g]}" for g, n in now.items())
        agents = ""
        if sample is not None:
            agents = "; executors per agent: " + " ".join(
                f"{agent}:{self._counts(n)}" for agent, n in sample.agent_executors.items()
            )
        print(f"jobs done: {jobs}{agents}", file=sys.stderr, flush=True)

    def _counts(self, counts: Mapping[str, int]) -> str:
        """e.g. "pi2+wo1" for 2 pi and 1 wordcount executors, "0" for none."""
        return "+".join(f"{self.labels.get(g, g)}{n}" for g, n in counts.items() if n) or "0"

    def close(self) -> None:
        for bar in [*self.bars.values(), self.status]:
            if bar is not None:
                bar.close()
