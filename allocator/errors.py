"""Errors a user can fix; the CLI prints them as one line and exits non-zero."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest known name, or ''."""
    close = difflib.get_close_matches(str(value).lower(), [str(k) for k in known], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class FairbrokerError(Exception):
    """Base class for errors reported to the user without a traceback."""


class ScenarioError(FairbrokerError):
    """A scenario file or value is invalid; the message names the field."""
