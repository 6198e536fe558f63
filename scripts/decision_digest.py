"""A digest of the allocator's decisions, to show a refactor changed none of them.

Runs the static fill on the papers' examples, Table I, every scheduler x mode on the paper
batch and the first three hours of the Google-like trace through the CLI, records every grant
the online engine makes (time, framework, agent, tasks) and the fill's allocations, and
prints one SHA-256 per case (JSON with --json). Run it before and after a change and diff:

    .venv/bin/python scripts/decision_digest.py > before.txt   # on the old commit
    .venv/bin/python scripts/decision_digest.py > after.txt
    diff before.txt after.txt
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys

from allocator.cli import cli
from allocator.engine import Engine

SCHEDULERS = ("drf", "psdsf", "rpsdsf", "tsf", "bfdrf")
MODES = ("characterized", "oblivious")
EXAMPLES = ("paper002-example", "paper000-example", "paper001-fig1")
# Keys whose values are measurements of this run, not decisions.
VOLATILE = {
    "seconds", "elapsed_s", "wall_s", "cpu_s", "time_s", "duration_s", "sim_s_per_wall_s",
    "fill_seconds",
}


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _run(argv: list[str], grants: list[tuple[float, str, str, int]]) -> str:
    grants.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main(argv, standalone_mode=False)
    text = out.getvalue()
    with contextlib.suppress(ValueError):
        text = json.dumps(_strip(json.loads(text)), sort_keys=True)
    return json.dumps([text, grants])


def cases() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for example in EXAMPLES:
        scenario = f"allocator/data/{example}.yaml"
        for scheduler in SCHEDULERS:
            for mode in MODES:
                argv = ["fill", scenario, "-s", scheduler, "--mode", mode, "--json", "-q",
                        "--no-optimum"]  # fmt: skip
                out.append((f"fill {example} {scheduler} {mode}", argv))
    out.append(("table1", ["table1", "--json"]))
    for scheduler in SCHEDULERS:
        for mode in MODES:
            argv = ["sim", "benchmarks/scenarios/paper-batch.yaml", "-s", scheduler,
                    "--mode", mode, "--json", "-q"]  # fmt: skip
            out.append((f"sim paper-batch {scheduler} {mode}", argv))
    for scheduler in ("drf", "bfdrf"):
        argv = ["sim", "benchmarks/scenarios/google-24h.yaml", "-s", scheduler,
                "--horizon", "10800", "--json", "-q"]  # fmt: skip
        out.append((f"sim google-24h 3h {scheduler}", argv))
    return out


def main() -> None:
    grants: list[tuple[float, str, str, int]] = []
    allocate = Engine.allocate

    def recording(self: Engine, now: float, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        made = allocate(self, now, *args, **kwargs)
        grants.extend((now, g.framework, g.agent, g.tasks) for g in made)
        return made

    Engine.allocate = recording  # type: ignore[method-assign]
    digests = {}
    for name, argv in cases():
        digest = hashlib.sha256(_run(argv, grants).encode()).hexdigest()[:16]
        digests[name] = f"{digest} ({len(grants)} grants)"
        print(f"{name}: {digests[name]}", file=sys.stderr if "--json" in sys.argv else sys.stdout)
    if "--json" in sys.argv:
        print(json.dumps(digests, indent=2))


if __name__ == "__main__":
    main()
