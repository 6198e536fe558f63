"""--fuga-k and --fuga-lambda: FUGA's strategies per agent and fairness weight, for every
command that schedules (fill, sim, serve, batch); they become EngineConfig.fuga_k and
fuga_lambda, which write the defaults and check the values."""

from __future__ import annotations

import click


def fuga_options(func):
    """The two options, passed to the command as fuga_k and fuga_lambda (None: not given)."""
    func = click.option(
        "--fuga-lambda", type=float, default=None,
        help="FUGA: weight of the deviation from equal dominant shares against skewness "
        "(default 1).",
    )(func)  # fmt: skip
    return click.option(
        "--fuga-k", type=int, default=None,
        help="FUGA: strategies per agent, its K best executor combinations (default 3).",
    )(func)  # fmt: skip
