"""The `fairbroker` command line."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from allocator.cli_fuga import fuga_options
from allocator.cli_types import (
    SEED,
    choice_of,
    mode_choice,
    scheduler_choice,
    selection_choice,
    ties_choice,
)
from allocator.errors import FairbrokerError
from allocator.outputs import check_output_file, check_stdout, plot_suffixes


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fairbroker")
def cli() -> None:
    """Fair multi-resource scheduling for heterogeneous clusters (DRF, PS-DSF, rPS-DSF, TSF,
    BF-DRF)."""


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@fuga_options
@click.option(
    "--scheduler",
    "-s",
    type=scheduler_choice(),
    required=True,
    help="Fairness criterion.",
)
@click.option(
    "--selection",
    type=selection_choice(),
    default=None,
    help="Server selection (default: the scheduler's, RRR or bestfit for BF-DRF).",
)
@click.option("--mode", type=mode_choice(), default="characterized", show_default=True)
@click.option("--ties", type=ties_choice(), default="random", show_default=True)
@click.option("--trials", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
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
    scheduler: str,
    selection: str | None,
    mode: str,
    ties: str,
    trials: int,
    seed: int,
    optimum: bool | None,
    matrix: bool | None,
    max_grants: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Progressive filling of SCENARIO until no task fits anywhere, repeated TRIALS times."""
    from allocator.fill_report import render_fill
    from allocator.scenario import load_scenario
    from allocator.trials import run_trials

    check_stdout()
    cluster = load_scenario(scenario)
    summary = run_trials(
        cluster,
        scheduler,
        selection,
        mode,
        ties,
        trials,
        seed,
        with_optimum=optimum,
        progress=not quiet and sys.stderr.isatty(),
        max_grants=max_grants,
    )
    click.echo(json.dumps(summary.to_json(matrix)) if as_json else render_fill(summary, matrix))


@cli.command()
@click.option("--trials", type=click.IntRange(min=2), default=2000, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--ties", type=ties_choice(), default="random", show_default=True)
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


def _simulate(
    batch, name: str, mode: str, level: str, trigger: str, seed: int, quiet: bool, admission=None
):
    from tqdm import tqdm

    from allocator.admission import AdmissionConfig
    from allocator.sim.simulator import BatchSimulator

    config = AdmissionConfig(admission) if admission else None
    simulator = BatchSimulator(
        batch, name, mode, level=level, trigger=trigger, seed=seed, admission=config
    )
    total = sum(g.queues * g.jobs_per_queue for g in batch.groups)
    with tqdm(
        total=total, desc=f"{name}/{mode}", unit="job", disable=quiet, leave=False, file=sys.stderr
    ) as bar:

        def progress(now: float, done: int) -> None:
            if done != bar.n:
                bar.update(done - bar.n)
                bar.set_postfix_str(f"t={now:,.0f}s", refresh=False)

        return simulator.run(progress=None if quiet else progress)


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@fuga_options
@click.option(
    "--scheduler",
    "-s",
    type=scheduler_choice(),
    default="rpsdsf",
    show_default=True,
)
@click.option("--mode", type=mode_choice(), default="characterized", show_default=True)
@click.option(
    "--level",
    type=choice_of("allocator.policy.levels", "Level"),
    default="role",
    show_default=True,
    help="role: groups first, then frameworks within (Mesos); framework: flat.",
)
@click.option(
    "--trigger",
    type=choice_of("allocator.engine", "Trigger"),
    default="tick",
    show_default=True,
    help="tick: freed resources wait for the next 1 s run (Mesos); release: at once.",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--compare",
    is_flag=True,
    help="Run every scheduler x mode, and --scheduler/--mode under every admission policy; "
    "print one table.",
)
@click.option(
    "--admission",
    type=choice_of("allocator.admission", "Policy"),
    default=None,
    help="Admit the batch's jobs as one pool by fcfs, sjf or wfq (default: the scenario's "
    "admission: sections, else each submission queue runs its jobs in turn).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write allocated CPU %/memory % over time to this PNG.",
)
@click.option(
    "--series",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the allocation time series to this CSV (the live batch's allocation.csv "
    "columns); with --compare one file per run, NAME-SCHEDULER-MODE.csv.",
)
def sim(
    scenario: str,
    scheduler: str,
    mode: str,
    level: str,
    trigger: str,
    seed: int,
    compare: bool,
    admission: str | None,
    as_json: bool,
    quiet: bool,
    plot: str | None,
    series: str | None,
) -> None:
    """Simulate a job batch or a trace (SCENARIO) in virtual time through the online engine."""
    from allocator.admission import Policy
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.sim.batch import load_batch
    from allocator.sim.bound import makespan_bound
    from allocator.sim.trace import scenario_kind
    from allocator.state import Mode

    check_stdout()
    if plot:
        check_output_file(plot, "--plot", plot_suffixes())
    if series:
        check_output_file(series, "--series")
    if scenario_kind(scenario) == "trace":
        if admission:
            raise click.UsageError("--admission: only for batch scenarios, not traces")
        _simulate_trace(scenario, scheduler, mode, level, trigger, seed, compare, as_json, quiet)
        return
    batch = load_batch(scenario)
    bound = makespan_bound(batch, seed)
    quiet = quiet or as_json or not sys.stderr.isatty()
    runs = [(scheduler, mode, admission)]
    if compare:
        runs = [(s, m, admission) for s in COMPARED_SCHEDULERS for m in Mode]
        runs += [(scheduler, mode, str(p)) for p in Policy if str(p) != admission]
    results = [_simulate(batch, s, m, level, trigger, seed, quiet, a) for s, m, a in runs]
    if plot:
        from allocator.sim.plot import plot_runs

        plot_runs([(f"{r.scheduler}/{r.mode}", r.series) for r in results], plot, batch.name)
    if series:
        _write_series(series, results, compare)
    payloads = []
    for result in results:
        payload = result.to_json()
        payload["makespan_bound_s"] = round(bound.seconds, 3)
        payload["bound_binding"] = bound.binding
        payloads.append(payload)
    if as_json:
        click.echo(json.dumps({"runs": payloads} if compare else payloads[0]))
        return
    head = (
        f"{'scheduler':<10}{'mode':<15}{'admission':<10}{'makespan s':>11}{'bound s':>9}"
        f"{'jct mean':>10}"
        f"{'p95':>8}{'cpus %':>8}{'mem %':>7}{'fair':>6}{'grants':>8}"
    )
    click.echo(f"{batch.name}: level {level}, trigger {trigger}, seed {seed}")
    click.echo(
        f"lower bound {bound.seconds:.1f} s, the {bound.binding} bound (fluid {bound.fluid_s:.1f}"
        f" s: capacity only; chain {bound.chain_s:.1f} s: a queue's jobs with their overhead)"
    )
    click.echo(head)
    for p in payloads:
        alloc = p["allocated"]
        click.echo(
            f"{p['scheduler']:<10}{p['mode']:<15}{p['admission']:<10}{p['makespan_s']:>11.1f}"
            f"{p['makespan_bound_s']:>9.1f}{p['jct_s']['mean']:>10.1f}{p['jct_s']['p95']:>8.1f}"
            f"{alloc.get('cpus', 0) * 100:>8.1f}"
            f"{alloc.get('mem', 0) * 100:>7.1f}{p['fairness']:>6.2f}{p['grants']:>8}"
        )
    if plot:
        click.echo(f"plot written to {plot}")


def _write_series(path: str, results: list, compare: bool) -> None:
    from allocator.sim.series import write_series_csv

    target = Path(path)
    for r in results:
        name = f"{target.stem}-{r.scheduler}-{r.mode}"
        if r.admission != "queues":
            name += f"-{r.admission}"
        out = target.with_name(f"{name}.csv") if compare else target
        write_series_csv(out, r.series)


def _simulate_trace(
    scenario: str,
    scheduler: str,
    mode: str,
    level: str,
    trigger: str,
    seed: int,
    compare: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Trace scenarios (`kind: trace`): task-level workloads, see docs/traces.md."""
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.sim.trace import run_trace
    from allocator.state import Mode

    runs = [(s, m) for s in COMPARED_SCHEDULERS for m in Mode] if compare else [(scheduler, mode)]
    payloads = []
    for name, run_mode in runs:
        result = run_trace(scenario, name, run_mode, level=level, seed=seed, trigger=trigger)
        payload = result.to_json()
        payload.pop("series", None)
        payloads.append(payload)
    if as_json:
        click.echo(json.dumps({"runs": payloads} if compare else payloads[0]))
        return
    click.echo(f"{scenario}: level {level}, trigger {trigger}, seed {seed}")
    click.echo(
        f"{'scheduler':<10}{'mode':<15}{'cpus %':>8}{'mem %':>7}{'fair':>6}"
        f"{'tasks done':>12}{'jct mean':>10}{'grants':>9}"
    )
    for p in payloads:
        jct = p["jct_s"]["mean"]
        click.echo(
            f"{p['scheduler']:<10}{p['mode']:<15}{p['allocated']['cpus'] * 100:>8.1f}"
            f"{p['allocated']['mem'] * 100:>7.1f}{p['fairness']:>6.2f}"
            f"{p['tasks']['completed']:>12}{'-' if jct is None else f'{jct:.1f}':>10}"
            f"{p['grants']:>9}"
        )


def _add_live_commands() -> None:
    from allocator.cli_live import COMMANDS
    from allocator.cli_solve import solve
    from allocator.cli_whatif import whatif
    from allocator.teardown import teardown
    from spark_shim.submit import submit_command

    for command in (*COMMANDS, submit_command, whatif, solve, teardown):
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
        click.echo(f"fairbroker: error: {error.format_message()}", err=True)
        sys.exit(2)
    except FairbrokerError as error:
        click.echo(f"fairbroker: error: {error}", err=True)
        sys.exit(2)
