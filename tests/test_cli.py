"""The command line as a user runs it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.commands import run_fairbroker

EXAMPLE = Path(__file__).resolve().parents[1] / "allocator" / "data" / "paper002-example.yaml"


def test_fill_json_is_one_object():
    done = run_fairbroker("fill", str(EXAMPLE), "--scheduler", "rpsdsf", "--trials", "5", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)  # exactly one JSON document on stdout
    assert out["scheduler"] == "rpsdsf"
    assert out["selection"] == "rrr"
    assert out["mode"] == "characterized"
    assert out["trials"] == 5 and out["seed"] == 0
    assert out["tasks"]["mean"] == {"f1": {"s1": 19, "s2": 2}, "f2": {"s1": 2, "s2": 19}}
    assert out["tasks"]["std"]["f1"]["s1"] == 0
    assert out["total"] == {"mean": 42, "std": 0}
    assert out["optimum"]["tasks"] == 42
    assert out["optimum"]["lp_tasks"] == pytest.approx(130 / 3)
    # (19*5 + 2*1) cpus and (19*1 + 2*5) mem on s1; symmetric on s2; out of 130 each.
    assert out["utilization"]["cpus"] == pytest.approx((95 + 2 + 10 + 19) / 130)


def test_fill_text_report():
    done = run_fairbroker(
        "fill", str(EXAMPLE), "-s", "drf", "--selection", "random", "--trials", "20"
    )
    assert done.returncode == 0, done.stderr
    assert "total tasks" in done.stdout and "optimum: 42.0 tasks" in done.stdout


def test_oblivious_tsf_says_it_uses_observed_demand():
    done = run_fairbroker("fill", str(EXAMPLE), "-s", "tsf", "--mode", "oblivious", "--json")
    assert done.returncode == 0, done.stderr
    assert any("observed" in note for note in json.loads(done.stdout)["notes"])


def test_table1_prints_paper_and_ours():
    done = run_fairbroker("table1", "--trials", "50", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["row"]: row for row in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"DRF", "TSF", "RRR-PS-DSF", "BF-DRF", "PS-DSF (joint)", "rPS-DSF"}
    assert rows["rPS-DSF"]["ours"]["mean"] == [19, 2, 2, 19]
    assert rows["DRF"]["paper"]["mean"] == [6.55, 4.69, 4.69, 6.55]


BASE = """
agents:
  - {name: s1, resources: {cpus: 10, mem: 10}}
  - {name: s2, resources: {cpus: 4, mem: 20}}
frameworks:
"""

BAD = {
    "negative": (BASE + "  - {name: f1, demand: {cpus: -1, mem: 1}}\n", "frameworks[0].demand"),
    "zero": (BASE + "  - {name: f1, demand: {cpus: 0, mem: 0}}\n", "frameworks[0].demand"),
    "nan": (BASE + "  - {name: f1, demand: {cpus: .nan, mem: 1}}\n", "frameworks[0].demand"),
    "missing": (BASE + "  - {name: f1}\n", "frameworks[0].demand: missing"),
    "too big": (BASE + "  - {name: f1, demand: {cpus: 11, mem: 1}}\n", "can never run"),
    "unknown resource": (BASE + "  - {name: f1, demand: {gpu: 1}}\n", "unknown resource"),
    "duplicate": (
        BASE + "  - {name: f1, demand: {cpus: 1}}\n  - {name: f1, demand: {mem: 1}}\n",
        "duplicate name",
    ),
    "malformed": (BASE + "  - {name: f1, demand: {cpus: 1\n", "malformed YAML"),
    "negative weight": (BASE + "  - {name: f1, demand: {cpus: 1}, weight: -2}\n", "weight"),
    "no agents": ("agents: []\nframeworks: [{name: f, demand: {cpus: 1}}]\n", "agents"),
    "unknown field": (BASE + "  - {name: f1, demand: {cpus: 1}, colour: red}\n", "colour"),
    # Without a resources: list any name an agent offers is a resource; a base resource's
    # misspelling would make a 0-cpu agent, so it is refused with the name meant.
    "agent cpu typo": (
        "agents: [{name: s1, resources: {cpu: 8, mem: 16}}]\n"
        "frameworks: [{name: f1, demand: {cpus: 1, mem: 1}}]\n",
        "agents[0].resources: cpu: unknown resource (did you mean cpus?)",
    ),
    "agent memory typo": (
        "agents: [{name: s1, resources: {cpus: 8, Memory: 16}}]\n"
        "frameworks: [{name: f1, demand: {cpus: 1}}]\n",
        "did you mean mem?",
    ),
    "agent unknown declared": (
        "resources: [cpus, mem]\nagents: [{name: s1, resources: {cpus: 8, mme: 16}}]\n"
        "frameworks: [{name: f1, demand: {cpus: 1}}]\n",
        "agents[0].resources.mme: unknown resource (did you mean mem?)",
    ),
}


def test_agent_resources_beyond_the_base_ones_are_accepted(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "agents: [{name: s1, resources: {cpus: 8, mem: 16, gpus: 2, disk: 100}}]\n"
        "frameworks: [{name: f1, demand: {cpus: 1, gpus: 1}}]\n"
    )
    done = run_fairbroker("fill", str(path), "--scheduler", "drf", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["mean"] == 2.0  # the 2 gpus bind


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenario_is_one_line_error(tmp_path, case):
    text, expected = BAD[case]
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    done = run_fairbroker("fill", str(path), "--scheduler", "drf")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert expected in lines[0]
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--scheduler", "fifo"], "--scheduler"),
        (["--scheduler", "drf", "--selection", "nearest"], "--selection"),
        (["--scheduler", "drf", "--trials", "0"], "--trials"),
    ],
)
def test_bad_options_are_one_line_errors(args, expected):
    done = run_fairbroker("fill", str(EXAMPLE), *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr


def test_missing_file(tmp_path):
    done = run_fairbroker("fill", str(tmp_path / "nope.yaml"), "--scheduler", "drf")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_fill_text_writes_every_large_number_alike(tmp_path):
    """Counts above 999 all with thousands separators (tasks, totals, grants, the bound)."""
    path = tmp_path / "big.yaml"
    path.write_text(
        "agents: [{name: s1, resources: {cpus: 2500, mem: 2500}}]\n"
        "frameworks: [{name: f1, demand: {cpus: 1, mem: 1}}]\n"
    )
    done = run_fairbroker("fill", str(path), "--scheduler", "drf")
    assert done.returncode == 0, done.stderr
    assert "2,500.00" in done.stdout and "2,500.00 grants per fill" in done.stdout
    assert "2,500.0 tasks (MILP)" in done.stdout
    assert not re.search(r"(?<![\d,.])\d{4,}", done.stdout), done.stdout
