"""The engine's command-line options, defined once for every command that runs the engine.

`engine_options()` adds --scheduler, --mode, --selection, --level, --trigger, --ties, --seed,
--interval, --refuse-seconds and --role-weight (and FUGA's two) and hands the command one
`engine: EngineConfig`. A command leaves out the options that cannot apply to it (a static
`fill` has no clock and no roles); it never accepts an option only to ignore it.
`serve` uses `engine_flags()` instead: the same options with no defaults, so that a flag
not given leaves the value to the environment or the config file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import click

from allocator.cli_fuga import fuga_options
from allocator.cli_types import (
    SEED,
    FiniteFloat,
    choice_of,
    mode_choice,
    scheduler_choice,
    selection_choice,
    ties_choice,
)
from allocator.mesos_defaults import ALLOCATION_INTERVAL_SECONDS, REFUSE_SECONDS

#: Every option, in --help order, with its EngineConfig field.
ENGINE_FIELDS = (
    "scheduler", "mode", "selection", "level", "trigger", "ties", "seed", "interval",
    "refuse_seconds", "role_weights",
)  # fmt: skip
#: FUGA's options (allocator/cli_fuga.py), given to every command that runs the engine.
FUGA_FIELDS = ("fuga_k", "fuga_lambda")
#: What a command without a clock (a static fill) cannot use.
CLOCK_AND_ROLES = ("level", "trigger", "interval", "refuse_seconds", "role_weights")


def role_weights_of(values: Iterable[str]) -> dict[str, float]:
    """--role-weight GROUP=WEIGHT flags as a mapping, or a one-line usage error."""
    from allocator.engine_config import parse_role_weights
    from allocator.errors import FairbrokerError

    try:
        return parse_role_weights(values)
    except FairbrokerError as error:
        raise click.BadParameter(str(error)) from None


def _role_weights(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]):
    return role_weights_of(value) if value else None


def _options(defaults: dict[str, Any] | None, scheduler_required: bool) -> dict[str, Callable]:
    """Click decorators by field; `defaults` None: no defaults (serve's layers)."""
    d = (defaults or {}).get
    show = defaults is not None
    return {
        "scheduler": click.option(
            "--scheduler", "-s", type=scheduler_choice(), required=scheduler_required,
            default=d("scheduler"), show_default=show, help="Fairness criterion.",
        ),
        "mode": click.option(
            "--mode", type=mode_choice(), default=d("mode"), show_default=show,
            help="characterized: tenants declare their executor size; oblivious: a tenant is "
            "offered an agent's whole remainder.",
        ),
        "selection": click.option(
            "--selection", type=selection_choice(), default=None,
            help="Server selection (default: the scheduler's own; firstfit with drf is "
            "First-Fit DRFH).",
        ),
        "level": click.option(
            "--level", type=choice_of("allocator.policy.levels", "Level"), default=d("level"),
            show_default=show, help="role: groups first, then frameworks within (Mesos); "
            "framework: flat.",
        ),
        "trigger": click.option(
            "--trigger", type=choice_of("allocator.engine_config", "Trigger"),
            default=d("trigger"), show_default=show,
            help="tick: freed resources wait for the next allocation run (Mesos); release: "
            "at once.",
        ),
        "ties": click.option(
            "--ties", type=ties_choice(), default=d("ties"), show_default=show,
            help="Tie rule among equally fair choices (waste: the agent left least unusable).",
        ),
        "seed": click.option(
            "--seed", type=SEED, default=d("seed"), show_default=show,
            help="Seed of the allocator's random choices.",
        ),
        "interval": click.option(
            "--interval", type=FiniteFloat(min=0, min_open=True), default=d("interval"),
            show_default=show, help="Seconds between allocation runs (Mesos: 1).",
        ),
        "refuse_seconds": click.option(
            "--refuse-seconds", type=FiniteFloat(min=0), default=d("refuse_seconds"),
            show_default=show,
            help="How long declined resources stay hidden from the tenant (Mesos: 5).",
        ),
        "role_weights": click.option(
            "--role-weight", "role_weights", multiple=True, metavar="GROUP=WEIGHT",
            callback=None if defaults is None else _role_weights,
            help="Weight of a group (role) in two-level fairness (repeat; default 1; a batch "
            "file's group weights are the defaults).",
        ),
    }


def engine_options(
    scheduler: str | None = "rpsdsf", exclude: Iterable[str] = ()
) -> Callable[[Callable], Callable]:
    """The engine's options, passed to the command as one `engine: EngineConfig`
    (`scheduler` None: --scheduler is required). Bad combinations are one-line errors."""
    defaults = {
        "scheduler": scheduler, "mode": "characterized", "level": "role", "trigger": "tick",
        "ties": "random", "seed": 0, "interval": ALLOCATION_INTERVAL_SECONDS,
        "refuse_seconds": REFUSE_SECONDS,
    }  # fmt: skip
    chosen = [f for f in ENGINE_FIELDS if f not in set(exclude)]
    decorators = _options(defaults, scheduler_required=scheduler is None)

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {f: kwargs.pop(f) for f in (*chosen, *FUGA_FIELDS)}
            kwargs["engine"] = build_engine_config(values)
            return command(*args, **kwargs)

        for field in reversed(chosen):
            wrapper = decorators[field](wrapper)
        return fuga_options(wrapper)

    return decorate


def engine_flags(
    fields: Iterable[str] = ENGINE_FIELDS, fuga: bool = False
) -> Callable[[Callable], Callable]:
    """The same options without defaults, passed through as they are: for `serve` (flags >
    env > file > defaults; `fuga`: --fuga-k/--fuga-lambda as values too) and `configure`
    (a flag not given keeps the broker's value)."""
    decorators = _options(None, scheduler_required=False)
    chosen = [f for f in ENGINE_FIELDS if f in set(fields)]

    def decorate(func: Callable) -> Callable:
        if fuga:
            func = fuga_options(func)
        for field in reversed(chosen):
            func = decorators[field](func)
        return func

    return decorate


def build_engine_config(values: dict[str, Any]):
    from allocator.engine_config import EngineConfig
    from allocator.errors import FairbrokerError

    values = {k: v for k, v in values.items() if v is not None}
    try:
        return EngineConfig(**values)
    except FairbrokerError as error:
        raise click.UsageError(str(error)) from None
