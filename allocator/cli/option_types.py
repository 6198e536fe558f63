"""Click parameter types shared by the commands: choices loaded on first use, with
"did you mean ...?" for typos.

The choice lists live in modules that import numpy and pydantic; loading them only when a
command's options are parsed keeps `fairbroker --help` and shell completion fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

import click

from allocator.errors import did_you_mean


class LazyChoice(click.Choice):
    """A case-insensitive click.Choice whose values come from `load()` when first needed."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load
        self._values: tuple[str, ...] | None = None
        self.case_sensitive = False

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._values is None:
            self._values = tuple(str(v) for v in self._load())
        return self._values

    @choices.setter
    def choices(self, values: Iterable[str]) -> None:
        self._values = tuple(values)

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        if ctx is not None and ctx.resilient_parsing:
            return value  # shell completion: do not load the choices to complete other words
        return super().convert(value, param, ctx)

    def get_invalid_choice_message(self, value: object, ctx: click.Context | None) -> str:
        known = ", ".join(self.choices)
        return f"{value!r} is not one of {known}{did_you_mean(str(value), self.choices)}"


def choice_of(module: str, name: str) -> LazyChoice:
    """Choices from `module.name`: an enum's values or a mapping's keys, imported lazily."""

    def load() -> list[str]:
        source = getattr(importlib.import_module(module), name)
        return [str(getattr(item, "value", item)) for item in source]

    return LazyChoice(load)


def ties_choice() -> LazyChoice:
    return choice_of("allocator.policy", "Ties")


#: How a batch's jobs are admitted (allocator.admission): `sim` and `batch` alike.
ADMISSION_OPTION = click.option(
    "--admission", type=choice_of("allocator.admission", "Policy"), default=None,
    help="Batches: admit the jobs as one pool by fcfs, sjf or wfq (default: the scenario's "
    "admission: sections, else each submission queue runs its jobs in turn).",
)  # fmt: skip

#: Seeds feed numpy's SeedSequence, which takes non-negative integers.
SEED = click.IntRange(min=0)


class FiniteFloat(click.FloatRange):
    """A float in range that is also finite (click's FloatRange lets nan and inf through)."""

    name = "number"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class DefaultInHelp(click.Option):
    """An option whose help names a default that lives in a module too heavy to import for
    every command (`default_from="module:NAME"`, `{default}` in the help): read only when
    the help is shown, so the text cannot drift from the code."""

    def __init__(self, *args: Any, default_from: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._default_from = default_from
        self._template = self.help or ""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        module, _, name = self._default_from.partition(":")
        self.help = self._template.format(default=getattr(importlib.import_module(module), name))
        return super().get_help_record(ctx)
