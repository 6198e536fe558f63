"""`fairbroker sim SCENARIO`: a job batch or a trace in virtual time through the online engine,
over one seed or several (mean and 95 % confidence interval per metric)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click

from allocator.cli.engine_options import engine_options
from allocator.cli.option_types import ADMISSION_OPTION, DefaultInHelp, FiniteFloat
from allocator.cli.outputs import check_output_file, check_stdout, plot_suffixes

#: Options that exist for one scenario kind only; given for the other, they are an error.
BATCH_ONLY = ("admission", "explain_at")
TRACE_ONLY = ("horizon", "slots_per_server")


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@engine_options()
@click.option(
    "--seeds", type=click.IntRange(min=1, max=1000), default=1, show_default=True,
    help="Run seeds SEED .. SEED+N-1 and report each metric's mean and 95 % interval.",
)  # fmt: skip
@click.option(
    "--compare", is_flag=True,
    help="Run every scheduler x mode (batches: and --scheduler/--mode under every admission "
    "policy); print one table.",
)  # fmt: skip
@ADMISSION_OPTION
@click.option(
    "--horizon", type=FiniteFloat(min=0, min_open=True), default=None,
    help="Traces: stop at this many simulated seconds (default: the scenario's).",
)  # fmt: skip
@click.option(
    "--slots-per-server", type=click.IntRange(min=1), default=None, cls=DefaultInHelp,
    default_from="allocator.policy.slots:DEFAULT_SLOTS_PER_SERVER",
    help="Traces, scheduler slots: slots of the largest server (default {default}).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--plot", type=click.Path(dir_okay=False), default=None,
    help="Write allocated CPU %/memory % over time to this PNG (the first seed's runs).",
)  # fmt: skip
@click.option(
    "--series", type=click.Path(dir_okay=False), default=None,
    help="Write the allocation time series to this CSV (the live batch's allocation.csv "
    "columns; the first seed); with --compare one file per run, NAME-SCHEDULER-MODE.csv.",
)  # fmt: skip
@click.option(
    "--explain", "explain_at", default=None, metavar="TENANT@TIME",
    help="Batches: instead of the run's results, why job TENANT waits at simulated second "
    "TIME (as `fairbroker explain` answers a live broker); with --json as JSON.",
)  # fmt: skip
@click.pass_context
def sim(ctx: click.Context, scenario: str, engine, seeds: int, compare: bool, **options) -> None:
    """Simulate a job batch or a trace (SCENARIO) in virtual time through the online engine."""
    from allocator.scenarios.kind import scenario_kind

    check_stdout()
    if options["plot"]:
        check_output_file(options["plot"], "--plot", plot_suffixes())
    if options["series"]:
        check_output_file(options["series"], "--series")
    kind = scenario_kind(scenario)
    _refuse_other_kind(ctx, BATCH_ONLY if kind == "trace" else TRACE_ONLY, kind)
    if options["explain_at"] is not None:
        _explain(scenario, engine, options, compare or seeds > 1)
        return
    quiet = options["quiet"] or options["as_json"] or not sys.stderr.isatty()
    if kind == "trace":
        runs = _trace_runs(scenario, engine, seeds, compare, options, quiet)
    else:
        runs = _batch_runs(scenario, engine, seeds, compare, options, quiet)
    first = [seed_runs[0][0] for seed_runs in runs.values()]
    if options["plot"]:
        from allocator.sim.plot import plot_runs

        plot_runs([(label, r.series) for label, r in zip(runs, first, strict=True)],
                  options["plot"], Path(scenario).stem)  # fmt: skip
    if options["series"]:
        _write_series(options["series"], runs, compare)
    summaries = {label: _summary(kind, [_payload(*r) for r in rs]) for label, rs in runs.items()}
    if options["as_json"]:
        payloads = list(summaries.values())
        click.echo(json.dumps({"runs": payloads} if compare else payloads[0]))
        return
    last = f" .. {engine.seed + seeds - 1}" if seeds > 1 else ""
    click.echo(f"{Path(scenario).stem}: level {engine.level}, trigger {engine.trigger}, "
               f"seed {engine.seed}{last}")  # fmt: skip
    if kind == "batch":
        b = next(iter(summaries.values()))
        click.echo(f"lower bound {b['makespan_bound_s']:.1f} s, the {b['bound_binding']} bound "
                   f"(fluid {b['bound_fluid_s']:.1f} s: capacity only; chain "
                   f"{b['bound_chain_s']:.1f} s: a queue's jobs with their overhead)")  # fmt: skip
    click.echo(_render(kind, list(summaries.values()), seeds))
    if engine.reclaims:
        click.echo(_reclaim_lines(list(summaries.values()), engine))
    if options["plot"]:
        click.echo(f"plot written to {options['plot']}")


def _explain(scenario: str, engine, options: dict, several: bool) -> None:
    """`--explain TENANT@TIME` on a batch: one run of the first seed up to TIME."""
    from allocator.admission import AdmissionConfig
    from allocator.explain import render
    from allocator.scenarios.batch import load_batch
    from allocator.sim.batch_sim import BatchSimulator

    if several:
        raise click.UsageError("--explain: one run only (no --compare, no --seeds above 1)")
    tenant, sep, when = str(options["explain_at"]).rpartition("@")
    try:
        time = float(when)
    except ValueError:
        time = float("nan")
    if not sep or not tenant or not (time >= 0 and time < float("inf")):
        raise click.UsageError(f"--explain: expected TENANT@SECONDS, got {options['explain_at']!r}")
    admission = options["admission"]
    pool = AdmissionConfig(admission) if admission else None
    simulator = BatchSimulator(load_batch(scenario), engine, admission=pool)
    answer = simulator.explain_at(tenant, time)
    if options["as_json"]:
        click.echo(json.dumps({"time": simulator.now, **answer.as_dict()}))
    else:
        click.echo(f"at {simulator.now:g} s (simulated):")
        click.echo(render(answer.as_dict()))


def _refuse_other_kind(ctx: click.Context, names: tuple[str, ...], kind: str) -> None:
    from click.core import ParameterSource

    for name in names:
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            flag = "--" + name.replace("_", "-")
            other = "batch" if kind == "trace" else "trace"
            raise click.UsageError(f"{flag}: only for {other} scenarios, not a {kind}")


# ---- batches -----------------------------------------------------------------------------
def _batch_runs(scenario, engine, seeds, compare, options, quiet) -> dict[str, list]:
    from allocator.admission import Policy
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.scenarios.batch import load_batch
    from allocator.sim.batch_sim import admission_label
    from allocator.sim.bound import makespan_bound
    from allocator.state import Mode

    batch = load_batch(scenario)
    admission = options["admission"]
    configs = [(engine, admission)]
    if compare:
        configs = [(engine.replace(scheduler=s, mode=m), admission)
                   for s in COMPARED_SCHEDULERS for m in Mode]  # fmt: skip
        already = admission or admission_label(batch)  # its row is there already
        configs += [(engine, str(p)) for p in Policy if str(p) != already]
    runs: dict[str, list] = {}
    for config, policy in configs:
        for seed in range(engine.seed, engine.seed + seeds):
            result = _simulate(batch, config.replace(seed=seed), policy, quiet)
            bound = makespan_bound(batch, seed)
            extra = {"makespan_bound_s": round(bound.seconds, 3), "bound_binding": bound.binding,
                     "bound_fluid_s": round(bound.fluid_s, 3),
                     "bound_chain_s": round(bound.chain_s, 3)}  # fmt: skip
            label = f"{config.scheduler}/{config.mode}"
            if result.admission != "queues":
                label += f"/{result.admission}"
            runs.setdefault(label, []).append((result, extra))
    return runs


def _simulate(batch, config, admission: str | None, quiet: bool):
    from tqdm import tqdm

    from allocator.admission import AdmissionConfig
    from allocator.sim.batch_sim import BatchSimulator

    pool = AdmissionConfig(admission) if admission else None
    simulator = BatchSimulator(batch, config, admission=pool)
    total = sum(g.queues * g.jobs_per_queue for g in batch.groups)
    label = f"{config.scheduler}/{config.mode} seed {config.seed}"
    with tqdm(total=total, desc=label, unit="job", disable=quiet, leave=False,
              file=sys.stderr) as bar:  # fmt: skip

        def progress(now: float, done: int) -> None:
            if done != bar.n:
                bar.update(done - bar.n)
                bar.set_postfix_str(f"t={now:,.0f}s", refresh=False)

        return simulator.run(progress=None if quiet else progress)


# ---- traces ------------------------------------------------------------------------------
def _trace_runs(scenario, engine, seeds, compare, options, quiet) -> dict[str, list]:
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.policy.slots import DEFAULT_SLOTS_PER_SERVER
    from allocator.scenarios.trace import load_trace
    from allocator.sim.trace_sim import run_trace
    from allocator.state import Mode

    workload = load_trace(scenario)
    configs = [engine]
    if compare:
        configs = [engine.replace(scheduler=s, mode=m) for s in COMPARED_SCHEDULERS for m in Mode]
    runs: dict[str, list] = {}
    for config in configs:
        for seed in range(engine.seed, engine.seed + seeds):
            result = run_trace(
                workload, config.replace(seed=seed), None if quiet else _trace_progress(config),
                slots_per_server=options["slots_per_server"] or DEFAULT_SLOTS_PER_SERVER,
                horizon_s=options["horizon"],
            )  # fmt: skip
            runs.setdefault(f"{config.scheduler}/{config.mode}", []).append((result, {}))
    return runs


def _trace_progress(config):
    def progress(now: float, done: int) -> None:
        click.echo(f"\r  {config.scheduler}/{config.mode}: t={now:,.0f}s, {done} tasks done",
                   err=True, nl=False)  # fmt: skip

    return progress


# ---- output ------------------------------------------------------------------------------
def _payload(result, extra: dict[str, Any]) -> dict[str, Any]:
    payload = result.to_json()
    payload.pop("series", None)
    return payload | extra


#: Metrics summarised over seeds and shown as columns, by scenario kind:
#: (column title, name, path in the payload, scale for display, digits).
METRICS = {
    "batch": (("makespan s", "makespan_s", ("makespan_s",), 1, 1),
              ("jct mean", "jct_mean_s", ("jct_s", "mean"), 1, 1),
              ("p95", "jct_p95_s", ("jct_s", "p95"), 1, 1),
              ("cpus %", "cpus", ("allocated", "cpus"), 100, 1),
              ("mem %", "mem", ("allocated", "mem"), 100, 1),
              ("fair", "fairness", ("fairness",), 1, 2),
              ("grants", "grants", ("grants",), 1, 0)),
    "trace": (("cpus %", "cpus", ("allocated", "cpus"), 100, 1),
              ("mem %", "mem", ("allocated", "mem"), 100, 1),
              ("fair", "fairness", ("fairness",), 1, 2),
              ("tasks done", "tasks_completed", ("tasks", "completed"), 1, 0),
              ("jct mean", "jct_mean_s", ("jct_s", "mean"), 1, 1),
              ("grants", "grants", ("grants",), 1, 0)),
}  # fmt: skip


def _get(payload: dict, path: tuple[str, ...]) -> float | None:
    value: Any = payload
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _summary(kind: str, payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """One seed: its payload. Several: the first seed's payload plus `seeds` (the seeds),
    `runs` (each seed's payload) and `estimates` (mean, 95 % half-width per metric)."""
    if len(payloads) == 1:
        return payloads[0]
    from allocator.sim.stats import estimate

    estimates = {}
    for _, name, path, *_ in METRICS[kind]:
        values = [_get(p, path) for p in payloads]
        if all(v is not None for v in values):
            e = estimate(values)  # type: ignore[arg-type]
            estimates[name] = {"mean": round(e.mean, 4), "half": round(e.half, 4), "n": e.n}
    return {**payloads[0], "seeds": [p["seed"] for p in payloads], "runs": payloads,
            "estimates": estimates}  # fmt: skip


def _cell(summary: dict, name: str, path: tuple[str, ...], scale: float, width: int, digits: int):
    estimates = summary.get("estimates")
    if estimates is not None:
        e = estimates.get(name)
        text = "-" if e is None else f"{e['mean'] * scale:.{digits}f}+-{e['half'] * scale:.{digits}f}"  # noqa: E501
    else:
        value = _get(summary, path)
        text = "-" if value is None else f"{value * scale:.{digits}f}"
    return f"{text:>{width}}"


def _render(kind: str, summaries: list[dict[str, Any]], seeds: int) -> str:
    wide = 8 if seeds == 1 else 15
    columns = METRICS[kind]
    head = f"{'scheduler':<12}{'mode':<15}"
    if kind == "batch":
        head += f"{'admission':<10}{'bound s':>9}"
    head += "".join(f"{title:>{max(wide, len(title) + 2)}}" for title, *_ in columns)
    lines = [head]
    for s in summaries:
        line = f"{s['scheduler']:<12}{s['mode']:<15}"
        if kind == "batch":
            bound = s.get("makespan_bound_s")
            line += f"{s['admission']:<10}{'-' if bound is None else f'{bound:.1f}':>9}"
        line += "".join(_cell(s, name, path, scale, max(wide, len(title) + 2), digits)
                        for title, name, path, scale, digits in columns)  # fmt: skip
        lines.append(line)
    if kind == "batch":
        lines += _admission_note(summaries)
    return "\n".join(lines)


def _reclaim_lines(summaries: list[dict[str, Any]], engine) -> str:
    """Per configuration: executors reclaimed and work lost (mean over the seeds)."""
    lines = [f"reclaim after {engine.reclaim_after:g} s, grace {engine.reclaim_grace:g} s "
             "(docs/reclaim.md, the simulator's model):"]  # fmt: skip
    for s in summaries:
        runs = [r["reclaim"] for r in s.get("runs", [s])]
        executors = sum(r["executors"] for r in runs) / len(runs)
        lost = sum(r["work_lost_s"] for r in runs) / len(runs)
        per_seed = " per seed" if len(runs) > 1 else ""
        lines.append(f"  {s['scheduler']}/{s['mode']}: {executors:g} executors reclaimed, "
                     f"{lost:.1f} executor-s of work lost{per_seed}")  # fmt: skip
    return "\n".join(lines)


def _admission_note(summaries: list[dict[str, Any]]) -> list[str]:
    """What rows under an admission policy measure, beside the `queues` rows they would
    otherwise be read against."""
    admitted = [s for s in summaries if s["admission"] != "queues"]
    if not admitted or len(admitted) == len(summaries):
        return []
    note = [
        "admission rows (" + ", ".join(s["admission"] for s in admitted) + "): every job of "
        "the batch in one admission pool (paper 004, docs/admission.md), under --scheduler "
        "and --mode only. Their JCT counts from each job's arrival, so it includes the wait "
        "in the pool; the queues rows' JCT counts from the job's submission by its queue, "
        "after the job before it: the two columns are not comparable.",
    ]
    keys = ("makespan_s", "jct_s")
    if len(admitted) > 1 and len({tuple(str(s.get(k)) for k in keys) for s in admitted}) == 1:
        note.append(
            "The admission policies give identical makespans and JCTs on this batch (they "
            "differ only where jobs differ in arrival, priority, deadline or work)."
        )
    return ["", *(textwrap.fill(text, width=100) for text in note)]


def _write_series(path: str, runs: dict[str, list], compare: bool) -> None:
    from allocator.sim.series import write_series_csv

    target = Path(path)
    for label, results in runs.items():
        name = f"{target.stem}-{label.replace('/', '-')}.csv"
        out = target.with_name(name) if compare else target
        write_series_csv(out, results[0][0].series)
