"""`fairbroker compare SCENARIO`: the batch live under Mesos's default (DRF, oblivious) and
under rPS-DSF characterized, side by side with the simulator's prediction (allocator.batch.
compare); what `make run` shows."""

from __future__ import annotations

import click

from allocator.cli.option_types import FiniteFloat


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option(
    "--out", type=click.Path(file_okay=False), default="results/compare", show_default=True,
    help="compare.json, and per run (SCHEDULER-MODE/) its job logs, broker state and "
    "result.json.",
)  # fmt: skip
@click.option("--job-timeout", type=FiniteFloat(min=1), default=600.0, show_default=True,
              help="Seconds a job may run before it is stopped and counted as failed.")
@click.option(
    "--seeds", type=click.IntRange(min=1, max=100), default=3, show_default=True,
    help="Seeds of the simulator's prediction.",
)  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
def compare(scenario: str, out: str, job_timeout: float, seeds: int, quiet: bool) -> None:
    """Run SCENARIO's Spark batch live twice on an embedded cluster of its agents, under
    Mesos's default (DRF, oblivious offers) and under rPS-DSF characterized, and print both
    side by side with the simulator's prediction; writes OUT/compare.json.

    Each run's broker is stopped with every executor it launched before the next run starts,
    also on an error or Ctrl-C."""
    import json

    from allocator.batch import compare as side_by_side
    from allocator.cli.outputs import check_stdout, prepare_output_dir
    from allocator.engine_config import EngineConfig
    from allocator.scenarios.batch import load_batch

    check_stdout()
    spec = load_batch(scenario)
    workdir = prepare_output_dir(out, "--out")
    note = side_by_side.emulation_note(spec)
    if note and not quiet:
        click.echo(note, err=True)
    data = side_by_side.run_compare(
        spec, scenario, EngineConfig.mesos("drf"), workdir, job_timeout=job_timeout,
        progress=not quiet, seeds=seeds, say=lambda line: click.echo(line, err=True),
    )  # fmt: skip
    path = workdir / "compare.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    click.echo(side_by_side.render(data, note))
    click.echo(f"\nwrote {path}; per run, job logs and result.json in {workdir}/SCHEDULER-MODE/")
    failed = sum(r["jobs_failed"] for r in data["runs"])
    if failed:
        raise click.ClickException(f"{failed} job(s) failed; see their logs")
