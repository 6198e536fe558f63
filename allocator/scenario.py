"""Loading scenario files (YAML or JSON) into a validated `Cluster`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from allocator.errors import ScenarioError
from allocator.model import Cluster, ScenarioSpec


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = _location(tuple(first["loc"]))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "missing"
    elif first["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}" if where else message


def parse_scenario(data: Any) -> Cluster:
    """Validate a scenario given as plain data (dicts and lists)."""
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a mapping with 'agents' and 'frameworks'")
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_first_error(error)) from None
    return Cluster.from_spec(spec)


def read_yaml(path: Path) -> Any:
    """A YAML (or JSON) file's data; unreadable or malformed files are one-line errors."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read ({error.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise ScenarioError(f"{path}: malformed YAML{where}: {problem}") from None


def load_scenario(path: str | Path) -> Cluster:
    """Read a YAML or JSON scenario file (JSON is valid YAML)."""
    path = Path(path)
    data = read_yaml(path)
    try:
        return parse_scenario(data)
    except ScenarioError as error:
        raise ScenarioError(f"{path}: {error}") from None
