"""allocator/scenarios/ is the bottom layer every driver reads its input through: loading any
format must not pull in a simulator, the live runner, the broker or the Spark shim."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import allocator.scenarios
from allocator.errors import ScenarioError
from allocator.scenarios.files import load_file
from allocator.scenarios.trace import load_trace

SCENARIOS = Path(allocator.scenarios.__file__).parent
FORBIDDEN = ("allocator.sim", "allocator.batch", "allocator.broker", "spark_shim")


def test_no_scenario_module_imports_a_driver_or_the_shim() -> None:
    modules = sorted(f"allocator.scenarios.{p.stem}" for p in SCENARIOS.glob("[!_]*.py"))
    assert "allocator.scenarios.batch" in modules and "allocator.scenarios.trace" in modules
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []


def test_errors_are_prefixed_with_the_scenario_but_csv_errors_name_their_own_file(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("a: 1\n")

    def refuse(data: object) -> object:
        raise ScenarioError(f"bad {data}")

    with pytest.raises(ScenarioError) as caught:
        load_file(scenario, refuse)
    assert str(caught.value) == f"{scenario}: bad {{'a': 1}}"

    (tmp_path / "machines.csv").write_text("name,cpus,mem\nm1,4,x\n")
    scenario.write_text(
        "kind: trace\ncluster: {csv: machines.csv}\n"
        "jobs: {list: [{user: u, tasks: 1, demand: {cpus: 1}, duration_s: 1}]}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_trace(scenario)
    assert str(caught.value) == f"{tmp_path / 'machines.csv'}:2: mem: not a number: 'x'"
