"""--fuga-k and --fuga-lambda: FUGA's strategies per agent and fairness weight, for every
command that schedules (fill, sim, serve, batch)."""

from __future__ import annotations

import dataclasses

import click


def _set(name: str):
    def callback(ctx: click.Context, param: click.Parameter, value: object) -> None:
        if value is None or ctx.resilient_parsing:
            return
        from allocator.policy.fuga import Fuga

        # FugaParams checks the value and raises a one-line error naming it.
        Fuga.defaults = dataclasses.replace(Fuga.defaults, **{name: value})

    return callback


def fuga_options(func, as_values: bool = False):
    """The two options; they set FUGA's defaults for this process, or with `as_values` are
    passed to the command as fuga_k and fuga_lambda (serve: flags > env > file)."""

    def extra(name: str) -> dict:
        return {} if as_values else {"expose_value": False, "callback": _set(name)}

    func = click.option(
        "--fuga-lambda", type=float, default=None, **extra("lam"),
        help="FUGA: weight of the deviation from equal dominant shares against skewness "
        "(default 1).",
    )(func)  # fmt: skip
    return click.option(
        "--fuga-k", type=int, default=None, **extra("k"),
        help="FUGA: strategies per agent, its K best executor combinations (default 3).",
    )(func)  # fmt: skip
