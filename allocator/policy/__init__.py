"""The five schedulers: a fairness criterion plus the paper's default server selection."""

from __future__ import annotations

from dataclasses import dataclass

from allocator.errors import ScenarioError, did_you_mean
from allocator.policy.alpha_psdsf import AlphaPSDSF
from allocator.policy.base import Criterion
from allocator.policy.drf import DRF
from allocator.policy.fuga import Fuga
from allocator.policy.psdsf import PSDSF
from allocator.policy.rpsdsf import RPSDSF
from allocator.policy.selection import Selection
from allocator.policy.slots import Slots
from allocator.policy.ties import Ties
from allocator.policy.tsf import TSF


@dataclass(frozen=True)
class Scheduler:
    name: str
    title: str
    criterion: type[Criterion]
    default_selection: Selection


SCHEDULERS: dict[str, Scheduler] = {
    s.name: s
    for s in (
        Scheduler("drf", "DRF", DRF, Selection.RRR),
        Scheduler("tsf", "TSF", TSF, Selection.RRR),
        Scheduler("psdsf", "PS-DSF", PSDSF, Selection.RRR),
        Scheduler("rpsdsf", "rPS-DSF", RPSDSF, Selection.RRR),
        Scheduler("bfdrf", "BF-DRF", DRF, Selection.BESTFIT),
        # Paper 000's alphaPF-VDS as a progressive-filling key (alpha 3 by default).
        Scheduler("alpha-psdsf", "alpha-PS-DSF", AlphaPSDSF, Selection.RRR),
        # Paper 003: servers choose executor combinations (fairness vs skewness game).
        Scheduler("fuga", "FUGA", Fuga, Selection.FUGA),
        # Paper 001's Hadoop-style baseline: max-min on task (slot) counts; agents visited
        # in random order, as TaskTrackers heartbeat. Needs the trace simulator's slots.
        Scheduler("slots", "Slots", Slots, Selection.RRR),
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
    "PAPER_SCHEDULERS",
    "SCHEDULERS",
    "Criterion",
    "Scheduler",
    "Selection",
    "Ties",
    "scheduler",
]
