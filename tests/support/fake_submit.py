"""A stand-in for spark-submit: a small Python driver that answers like the real apps (Pi, a
Python word count of the generated input), sleeps, and can fail, hang or leave a child
behind, so the live batch runner is tested in seconds."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

FAKE_DRIVER = r"""
import math, os, subprocess, sys, time
job = os.environ["FAKE_JOB"]
state = os.environ["FAKE_STATE"]
open(os.path.join(state, job + ".pid"), "w").write(str(os.getpid()))
open(os.path.join(state, job + ".ca"), "w").write(os.environ.get("FAIRBROKER_CA_FILE", "-"))
if os.environ.get("FAKE_CHILD"):  # a grandchild, as spark-submit's JVM has
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(os.path.join(state, job + ".child"), "w").write(str(child.pid))
print("some driver log line", file=sys.stderr, flush=True)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0.2")))
script, args = os.path.basename(sys.argv[1]), sys.argv[2:]
if script == "pi.py":
    samples = int(args[0]) * int(args[1])
    value = float(os.environ.get("FAKE_PI", math.pi))
    print(f"RESULT pi={value} inside=0 samples={samples}", flush=True)
elif script == "wordcount.py":
    words = open(args[0]).read().split()
    print(f"RESULT words={len(words)} distinct={len(set(words))}", flush=True)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@dataclass
class FakePlan:
    argv: list[str]
    env: dict[str, str]


class FakeSubmit:
    """Stands in for spark_submit_command; `env_for(job)` adds per-job behaviour."""

    def __init__(self, tmp: Path, env_for: Mapping[str, dict[str, str]] | None = None):
        tmp.mkdir(parents=True, exist_ok=True)
        self.driver = tmp / "fake_driver.py"
        self.driver.write_text(FAKE_DRIVER)
        self.state = tmp / "state"
        self.state.mkdir(exist_ok=True)
        self.env_for = env_for or {}
        self.calls: list[dict[str, object]] = []
        self.lock = threading.Lock()

    def __call__(self, app_args: Sequence[str], **options: object) -> FakePlan:
        conf = dict(options["conf"])  # type: ignore[call-overload]
        job = conf["spark.app.name"]
        with self.lock:
            self.calls.append({"app_args": list(app_args), **options})
        env = {"FAKE_JOB": job, "FAKE_STATE": str(self.state), **self.env_for.get(job, {})}
        return FakePlan([sys.executable, str(self.driver), *app_args], env)

    def pids(self) -> list[int]:
        return [
            int(p.read_text()) for p in [*self.state.glob("*.pid"), *self.state.glob("*.child")]
        ]
