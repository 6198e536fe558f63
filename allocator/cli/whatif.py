"""`fairbroker whatif SCENARIO`: every scheduler x mode on the same paired seeds, with
intervals, a ranking and a recommendation (allocator/sim/whatif.py does the work)."""

from __future__ import annotations

import json
import sys

import click

from allocator.cli.engine_options import engine_options
from allocator.cli.option_types import LazyChoice, choice_of
from allocator.cli.outputs import check_output_file, check_stdout, plot_suffixes


def _schedulers() -> LazyChoice:
    return choice_of("allocator.policy", "COMPARED_SCHEDULERS")


def _split(
    value: str | None, choice: LazyChoice, option: str, default: tuple[str, ...]
) -> tuple[str, ...]:
    if not value:
        return default
    names = tuple(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))
    for name in names:
        if name not in choice.choices:
            raise click.BadParameter(choice.get_invalid_choice_message(name, None),
                                     param_hint=option)  # fmt: skip
    return names


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--seeds", type=click.IntRange(2, 1000), default=10, show_default=True,
              help="How many paired seeds, from --seed on; every configuration sees the same jobs "
              "at a seed.")
@click.option("--schedulers", default=None, metavar="A,B,...",
              help="Schedulers to compare (default: all).")
@click.option("--modes", default=None, metavar="A,B",
              help="Modes to compare (default: characterized,oblivious).")
@engine_options(exclude=("scheduler", "mode"))
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write the allocation small multiples here and the summary bar chart "
              "beside it (NAME-summary.png).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def whatif(
    scenario: str,
    seeds: int,
    schedulers: str | None,
    modes: str | None,
    engine,
    plot: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Compare every scheduler x mode on a batch SCENARIO over paired seeds."""
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.scenarios.batch import load_batch
    from allocator.sim.whatif import run_whatif
    from allocator.state import Mode

    check_stdout()
    names = _split(schedulers, _schedulers(), "--schedulers", COMPARED_SCHEDULERS)
    chosen_modes = _split(modes, choice_of("allocator.state", "Mode"), "--modes",
                          tuple(str(m) for m in Mode))  # fmt: skip
    if plot:
        check_output_file(plot, "--plot", plot_suffixes())
    batch = load_batch(scenario)
    total = len(names) * len(chosen_modes) * seeds
    done = [0]

    def progress(label: str, seed: int) -> None:
        done[0] += 1
        click.echo(f"  [{done[0]}/{total}] {label} seed {seed}", err=True)

    report = run_whatif(batch, names, chosen_modes, seeds, engine,
                        None if quiet or as_json else progress)  # fmt: skip
    written = report.plot(plot) if plot else []
    if as_json:
        payload = report.to_json()
        payload["figures"] = [str(p) for p in written]
        click.echo(json.dumps(payload))
        return
    click.echo(report.render())
    for path in written:
        click.echo(f"figure written to {path}")
    sys.stdout.flush()
