"""Errors a user can fix; the CLI prints them as one line and exits non-zero."""


class FairbrokerError(Exception):
    """Base class for errors reported to the user without a traceback."""


class ScenarioError(FairbrokerError):
    """A scenario file or value is invalid; the message names the field."""
