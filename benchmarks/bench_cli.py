"""Benchmark: how long the command line takes to answer (issue 17 target: under 0.3 s).

Times `fairbroker --help`, `--version`, one shell-completion request for a command name and
one for a --scheduler value, and `fairbroker status` against a running broker (started here on
free loopback ports), each the median of several runs of the installed command.
Results go to benchmarks/results/cli.json and cli.md.

    python -m benchmarks.bench_cli [--repeat N]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SECONDS = 0.3
COMMAND = [str(Path(sys.executable).with_name("fairbroker"))]


def _time(args: list[str], env: dict[str, str] | None, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(
            [*COMMAND, *args], env=env, capture_output=True, check=False, timeout=60
        )
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _completion(words: str) -> dict[str, str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    return dict(os.environ, _FAIRBROKER_COMPLETE="bash_complete", COMP_WORDS=words,
                COMP_CWORD=str(cword))  # fmt: skip


@click.command()
@click.option("--repeat", default=7, show_default=True)
def main(repeat: int) -> None:
    from allocator.broker.server import BrokerOptions, BrokerService

    cases: list[tuple[str, list[str], dict[str, str] | None]] = [
        ("fairbroker --help", ["--help"], None),
        ("fairbroker --version", ["--version"], None),
        ("TAB: fairbroker s", [], _completion("fairbroker s")),
        ("TAB: fill x --scheduler r", [], _completion("fairbroker fill x --scheduler r")),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as state:
        options = BrokerOptions(http_port=0, grpc_port=0, state_dir=Path(state), persist=False)
        with BrokerService(options) as service:
            cases.append(("fairbroker status (HTTP port)",
                          ["status", "--broker", service.http_address], None))
            cases.append(("fairbroker status (gRPC port)",
                          ["status", "--broker", service.grpc_address], None))  # fmt: skip
            for name, args, env in cases:
                seconds = _time(args, env, repeat)
                rows.append({"command": name, "median_s": round(seconds, 3),
                             "meets_target": seconds < TARGET_SECONDS})  # fmt: skip
                click.echo(f"{name}: {seconds:.3f} s", err=True)
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "repeat": repeat, "target_seconds": TARGET_SECONDS}  # fmt: skip
    (RESULTS / "cli.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2) + "\n")
    lines = [f"# Command-line response time (median of {repeat}; target {TARGET_SECONDS} s)", "",
             "| command | median s | under target |", "|---|---|---|"]  # fmt: skip
    lines += [f"| `{r['command']}` | {r['median_s']} | {r['meets_target']} |" for r in rows]
    (RESULTS / "cli.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
