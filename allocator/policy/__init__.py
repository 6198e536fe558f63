"""The schedulers: a fairness criterion plus its default server selection, each by name.

Eight are registered: paper 002's five (DRF, TSF, PS-DSF, rPS-DSF, BF-DRF), paper 000's
alpha-PS-DSF, paper 003's FUGA and paper 001's slot baseline. Criteria and selections are
plugins built by name from their own parameters (`registry.py`: `CRITERIA`, `SELECTIONS`);
importing this package imports every plugin module, which registers itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from allocator.errors import ScenarioError, did_you_mean

# Every criterion and selection module, imported so that each registers itself.
from allocator.policy import alpha_psdsf, drf, fuga, psdsf, rpsdsf, slots, tsf  # noqa: F401
from allocator.policy.base import CRITERIA, Criterion
from allocator.policy.selection import SELECTIONS, Selection
from allocator.policy.ties import Ties


@dataclass(frozen=True)
class Scheduler:
    name: str
    title: str
    #: Its criterion's name in `CRITERIA`.
    criterion_name: str
    default_selection: Selection

    def criterion(self, params: Mapping[str, object] | None = None) -> Criterion:
        """A fresh criterion; `params`: the plugins' parameters by name (see registry.py)."""
        return CRITERIA.build(self.criterion_name, params)


SCHEDULERS: dict[str, Scheduler] = {
    s.name: s
    for s in (
        Scheduler("drf", "DRF", "drf", Selection.RRR),
        Scheduler("tsf", "TSF", "tsf", Selection.RRR),
        Scheduler("psdsf", "PS-DSF", "psdsf", Selection.RRR),
        Scheduler("rpsdsf", "rPS-DSF", "rpsdsf", Selection.RRR),
        Scheduler("bfdrf", "BF-DRF", "drf", Selection.BESTFIT),
        # Paper 000's alphaPF-VDS as a progressive-filling key (alpha 3 by default).
        Scheduler("alpha-psdsf", "alpha-PS-DSF", "alpha-psdsf", Selection.RRR),
        # Paper 003: servers choose executor combinations (fairness vs skewness game).
        Scheduler("fuga", "FUGA", "fuga", Selection.FUGA),
        # Paper 001's Hadoop-style baseline: max-min on task (slot) counts; agents visited
        # in random order, as TaskTrackers heartbeat. Needs the trace simulator's slots.
        Scheduler("slots", "Slots", "slots", Selection.RRR),
    )
}


#: The five schedulers of paper 002 (what `--compare` and the paper reports run).
PAPER_SCHEDULERS = ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf")
#: What `fairbroker sim --compare` runs: the paper's five and the other placement policies.
COMPARED_SCHEDULERS = (*PAPER_SCHEDULERS, "fuga")


def scheduler(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name.lower()]
    except KeyError:
        known = ", ".join(SCHEDULERS)
        hint = did_you_mean(name, SCHEDULERS)
        raise ScenarioError(f"scheduler: unknown {name!r} (known: {known}){hint}") from None


__all__ = [
    "COMPARED_SCHEDULERS",
    "CRITERIA",
    "PAPER_SCHEDULERS",
    "SCHEDULERS",
    "SELECTIONS",
    "Criterion",
    "Scheduler",
    "Selection",
    "Ties",
    "scheduler",
]
