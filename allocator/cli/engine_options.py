"""The engine's command-line options, derived from `EngineConfig`'s fields for every command
that runs the engine.

Each field is one option: its name (`--refuse-seconds`, or the field's `Setting.flag`), its
default, its help text, its values (`Setting.choices`) and its range (`Setting.minimum`)
all come from `allocator/engine_config.py`, so a new field is a new option here without
being written again. `engine_options()` hands the command one `engine: EngineConfig`; a
command leaves out the options that cannot apply to it (a static `fill` has no clock and no
roles: the fields marked `online`); it never accepts an option only to ignore it. `serve`
uses `engine_flags()` instead: the same options with no defaults, so that a flag not given
leaves the value to the environment or the config file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import Field, fields
from typing import Any

import click

from allocator.cli.option_types import FiniteFloat, choice_of
from allocator.engine_config import EngineConfig, default_of, setting_of

#: Every option, in --help order: EngineConfig's fields.
ENGINE_FIELDS = tuple(item.name for item in fields(EngineConfig))
#: What a command without a clock (a static fill) cannot use.
CLOCK_AND_ROLES = tuple(item.name for item in fields(EngineConfig) if setting_of(item).online)


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


def _is_mapping(item: Field) -> bool:
    return item.default_factory is dict


def _click_type(item: Field) -> click.ParamType | None:
    spec = setting_of(item)
    if spec.choices:
        module, _, name = spec.choices.partition(":")
        return choice_of(module, name)
    low = spec.minimum
    if type(item.default) is int:
        return click.IntRange(min=low, min_open=spec.exclusive)
    if type(item.default) is float:
        return FiniteFloat(min=low, min_open=spec.exclusive)
    return None


def _option(item: Field, with_default: bool, required: bool = False) -> Callable:
    """The click decorator of one field; `with_default` False: no default (serve's layers)."""
    spec = setting_of(item)
    names = [spec.flag or "--" + item.name.replace("_", "-"), *([spec.short] if spec.short else [])]
    if _is_mapping(item):  # GROUP=WEIGHT, repeated
        return click.option(
            *names, item.name, multiple=True, metavar=spec.metavar, help=spec.help,
            callback=_role_weights if with_default else None,
        )  # fmt: skip
    if isinstance(item.default, tuple):  # a list of names, repeated
        return click.option(
            *names, item.name, multiple=True, metavar=spec.metavar, help=spec.help,
            default=None if not with_default else item.default,
        )  # fmt: skip
    default = default_of(item) if with_default and not required else None
    # click 8.3+ takes an explicit `default=None` as a value: a required option with it is
    # silently optional (`fill` without --scheduler ran DRF). Pass a default only if any.
    given = {"default": default} if default is not None else {}
    return click.option(
        *names, item.name, type=_click_type(item), required=required,
        show_default=with_default and default is not None, help=spec.help,
        metavar=spec.metavar, **given,
    )  # fmt: skip


def engine_options(
    scheduler_required: bool = False, exclude: Iterable[str] = ()
) -> Callable[[Callable], Callable]:
    """The engine's options, passed to the command as one `engine: EngineConfig`
    (`scheduler_required`: --scheduler has no default). Bad combinations are one-line
    errors."""
    chosen = [f for f in fields(EngineConfig) if f.name not in set(exclude)]

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {f.name: kwargs.pop(f.name) for f in chosen}
            kwargs["engine"] = build_engine_config(values)
            return command(*args, **kwargs)

        for item in reversed(chosen):
            required = scheduler_required and item.name == "scheduler"
            wrapper = _option(item, with_default=True, required=required)(wrapper)
        return wrapper

    return decorate


def engine_flags(names: Iterable[str] = ENGINE_FIELDS) -> Callable[[Callable], Callable]:
    """The same options without defaults, passed through as they are: for `serve` (flags >
    env > file > defaults) and `configure` (a flag not given keeps the broker's value)."""
    chosen = [f for f in fields(EngineConfig) if f.name in set(names)]

    def decorate(func: Callable) -> Callable:
        for item in reversed(chosen):
            func = _option(item, with_default=False)(func)
        return func

    return decorate


def build_engine_config(values: dict[str, Any]) -> EngineConfig:
    from allocator.errors import FairbrokerError

    values = {k: v for k, v in values.items() if v is not None and v != ()}
    try:
        return EngineConfig(**values)
    except FairbrokerError as error:
        raise click.UsageError(str(error)) from None
