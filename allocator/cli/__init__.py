"""The `fairbroker` command line: its commands, their option types and output helpers, the
port and address checks, and `serve`'s configuration reader.

Nothing else in `allocator` or `spark_shim` imports this package. `cli` (the click group)
and `main` (the console script) come from `app.py`, loaded on first use so that importing
one helper module (say `allocator.cli.serve_config`) does not build every command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from allocator.cli.app import cli, main

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from allocator.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
