"""Prometheus's own tools in tests: find a binary (skip, or fail on CI, when it is missing)
and write one input series of a promtool rule unit test."""

from __future__ import annotations

import os
import shutil

import pytest


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (`make system-deps` installs Debian's prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def series(name: str, values: str, **kw: str) -> dict[str, str]:
    pairs = {"instance": "b:7082", "job": "fairbroker", **kw}
    text = ",".join(f'{k}="{v}"' for k, v in pairs.items())
    return {"series": f"{name}{{{text}}}", "values": values}
