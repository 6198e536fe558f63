"""The `fairbroker` command line."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from allocator.engine_config import EngineConfig

from allocator.cli.engine_options import CLOCK_AND_ROLES, engine_options
from allocator.cli.option_types import (
    SEED,
    ties_choice,
)
from allocator.cli.outputs import check_stdout
from allocator.errors import FairbrokerError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fairbroker")
def cli() -> None:
    """Fair multi-resource scheduling for heterogeneous clusters (DRF, PS-DSF, rPS-DSF, TSF,
    BF-DRF)."""


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@engine_options(scheduler_required=True, exclude=CLOCK_AND_ROLES)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Fills to run, trial t drawing from (seed, t) (the report gives mean and sd).",
)
@click.option(
    "--optimum/--no-optimum",
    default=None,
    help="Solve the MILP/LP bound (default: when the instance is small enough).",
)
@click.option(
    "--matrix/--no-matrix",
    default=None,
    help="Show x_{n,i} for every framework and agent (JSON: sparse, zero pairs left out). "
    "Default: text up to 8 agents, JSON up to 10,000 pairs.",
)
@click.option(
    "--max-grants",
    type=click.IntRange(min=1),
    default=10_000_000,
    show_default=True,
    help="Stop with an error after this many grants per fill (a units mistake cannot run "
    "for hours).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def fill(
    scenario: str,
    engine: EngineConfig,
    trials: int,
    optimum: bool | None,
    matrix: bool | None,
    max_grants: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Progressive filling of SCENARIO until no task fits anywhere, repeated TRIALS times
    (a static instance: no clock, no groups)."""
    from allocator.cli.fill_report import render_fill
    from allocator.scenarios.static import load_scenario
    from allocator.trials import run_trials

    check_stdout()
    cluster = load_scenario(scenario)
    summary = run_trials(
        cluster,
        engine.scheduler,
        engine.selection,
        engine.mode,
        engine.ties,
        trials,
        engine.seed,
        with_optimum=optimum,
        progress=not quiet and sys.stderr.isatty(),
        max_grants=max_grants,
        params=engine.policy_params(),
    )
    click.echo(json.dumps(summary.to_json(matrix)) if as_json else render_fill(summary, matrix))


@cli.command()
@click.option(
    "--trials",
    type=click.IntRange(min=2),
    default=2000,
    show_default=True,
    help="Fills per randomized row (the paper's rows are means over trials).",
)
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="Seed of the trials (trial t draws from (seed, t)).",
)
@click.option(
    "--ties",
    type=ties_choice(),
    default="random",
    show_default=True,
    help="Tie rule among equally fair choices (waste: the agent left least unusable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def table1(trials: int, seed: int, ties: str, as_json: bool) -> None:
    """Paper 002 Tables I and II beside ours, with the difference."""
    from allocator import table1 as table1_module

    check_stdout()
    rows = table1_module.compare(trials, seed, ties, progress=not as_json and sys.stderr.isatty())
    if as_json:
        click.echo(
            json.dumps(
                {"trials": trials, "seed": seed, "ties": ties, "rows": [r.to_json() for r in rows]}
            )
        )
    else:
        click.echo(table1_module.render(rows))


def _add_live_commands() -> None:
    from allocator.cli.compare import compare
    from allocator.cli.live import COMMANDS
    from allocator.cli.sim import sim
    from allocator.cli.solve import solve
    from allocator.cli.state import state
    from allocator.cli.teardown import teardown
    from allocator.cli.whatif import whatif
    from spark_shim.submit import submit_command

    for command in (*COMMANDS, compare, sim, submit_command, whatif, solve, teardown, state):
        cli.add_command(command)


_add_live_commands()


#: Errors writing the output that the user can act on (a full disk, a closed pipe's cousins).
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF, errno.EROFS}


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        pass


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    try:
        cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="fairbroker",
            standalone_mode=False,
        )
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:  # `fairbroker fill ... | head`: the reader has what it wanted
        _silence_stdout()
        sys.exit(141)
    except OSError as error:
        if error.errno not in _WRITE_ERRORS:
            raise
        _silence_stdout()
        where = f" {error.filename}" if error.filename else " the output"
        click.echo(f"fairbroker: error: cannot write{where}: {error.strerror}", err=True)
        sys.exit(2)
    except click.exceptions.NoArgsIsHelpError as bare:
        click.echo(bare.ctx.get_help() if bare.ctx else "", err=True)
        sys.exit(2)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.Abort:
        click.echo("fairbroker: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        # one line: click lists a missing option's choices one per line
        message = " ".join(error.format_message().split())
        click.echo(f"fairbroker: error: {message}", err=True)
        sys.exit(2)
    except FairbrokerError as error:
        click.echo(f"fairbroker: error: {error}", err=True)
        sys.exit(2)
