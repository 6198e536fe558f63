"""Emulated work (docs/emulation.md): the apps' padded tasks return the real answer, and a
scenario's `task_s` reaches spark-submit as --task-seconds."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from allocator.batch.apps import prepare_apps
from allocator.errors import ScenarioError
from allocator.scenarios.batch import parse_batch
from spark_shim.apps import script


def load_app(name: str):
    spec = importlib.util.spec_from_file_location(f"app_{name}", script(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_padded_wordcount_counts_like_split():
    wordcount = load_app("wordcount")
    lines = ["the cat  sat", "", "on the\tmat the end"]
    expected = Counter(word for line in lines for word in line.split())
    assert dict(wordcount.count_padded(iter(lines), 0.0)) == dict(expected)
    assert expected["the"] == 3


def test_padded_pi_returns_the_count():
    pi = load_app("pi")
    assert pi.padded(0.0, pi.count_inside, 7, 2, 500) == pi.count_inside(7, 2, 500)


def batch(task_s: float) -> dict:
    job = {"work": 1}
    return {
        "agents": [{"name": "a", "resources": {"cpus": 8, "mem": 8192}}],
        "groups": [
            {
                "name": "pi",
                "queues": 1,
                "jobs_per_queue": 1,
                "spark": {"spark.executor.cores": 2, "spark.executor.instances": 1},
                "app": {"kind": "pi", "partitions": 3, "samples": 10, "task_s": task_s},
                "job": job,
            },
            {
                "name": "wordcount",
                "queues": 1,
                "jobs_per_queue": 1,
                "spark": {"spark.executor.instances": 1},
                "app": {"kind": "wordcount", "input_mb": 0.01, "task_s": task_s},
                "job": job,
            },
        ],
    }


def test_task_s_becomes_task_seconds(tmp_path: Path):
    apps = prepare_apps(parse_batch(batch(2.5)), tmp_path)
    assert apps["pi"].args[-2:] == ("--task-seconds", "2.5")
    assert apps["wordcount"].args[-2:] == ("--task-seconds", "2.5")
    plain = prepare_apps(parse_batch(batch(0)), tmp_path)
    assert all("--task-seconds" not in app.args for app in plain.values())


@pytest.mark.parametrize("task_s", [-1, 3600, float("inf")])
def test_task_s_out_of_range_is_refused(task_s: float):
    with pytest.raises(ScenarioError, match="task_s"):
        parse_batch(batch(task_s))
