"""The command line at its edges (issue 17): start-up cost, one-line errors for the
environment and bad numbers, output at scale. Every command runs as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import run_fairbroker

#: Modules the command line must not import before a command needs them (--help, shell
#: completion and `status` stay fast). Timings are in benchmarks/bench_cli.py.
HEAVY = ("numpy", "scipy", "matplotlib", "grpc", "google.protobuf", "pydantic", "pandas",
         "prometheus_client", "requests", "tqdm", "pymesos")  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, nothing on stdout, exactly one `fairbroker: error:` line on stderr."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fairbroker: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def complete(*words: str) -> list[str]:
    """What bash completion offers for the last of `words` (click's bash_complete protocol)."""
    env = dict(os.environ, _FAIRBROKER_COMPLETE="bash_complete",
               COMP_WORDS=" ".join(("fairbroker", *words)), COMP_CWORD=str(len(words)))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_cli_import_leaves_heavy_modules_alone():
    code = (
        "import json, sys; import allocator.cli; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_version_and_help():
    done = run_fairbroker("--version")
    assert done.returncode == 0 and done.stdout.startswith("fairbroker, version ")
    done = run_fairbroker("--help")
    assert done.returncode == 0
    for command in ("fill", "table1", "sim", "serve", "status", "configure", "submit"):
        assert f"  {command} " in done.stdout


def test_shell_completion_of_commands_and_choices():
    assert {"serve", "sim", "status", "submit"} <= set(complete("s"))
    assert complete("fill", "x.yaml", "--sch") == ["--scheduler"]
    assert complete("fill", "x.yaml", "--scheduler", "rp") == ["rpsdsf"]
    assert complete("serve", "--mode", "obl") == ["oblivious"]


def test_scheduler_typo_suggests_the_name():
    done = run_fairbroker("fill", "x.yaml", "--scheduler", "rpsdfs")
    one_line_error(done, "--scheduler", "did you mean rpsdsf?")
