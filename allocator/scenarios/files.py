"""The one reader of scenario and configuration files: YAML or JSON in, plain data out, every
problem a one-line `ScenarioError` naming the file (and line, field and did-you-mean where
known)."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from allocator.errors import ScenarioError, did_you_mean

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class LocatedError(ScenarioError):
    """An error whose message already names the file and line it is about (e.g. a CSV file a
    scenario refers to), so it is not prefixed with the scenario's path."""


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through lists, dicts, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is None and not isinstance(annotation, types.UnionType):
        return []
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names (and aliases) allowed at `loc` under `model`: the candidates a misspelt
    field name is compared with."""
    models = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        following = []
        for m in models:
            field = m.model_fields.get(part) or next(
                (f for f in m.model_fields.values() if f.alias == part), None
            )
            if field is not None:
                following += _models_in(field.annotation)
        models = following or models
    return [f.alias or name for m in models for name, f in m.model_fields.items()]


def first_error(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    first = error.errors()[0]
    loc = tuple(first["loc"])
    where = _location(loc)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "missing"
    elif first["type"] == "extra_forbidden":
        message = "unknown field"
        if model is not None and loc and isinstance(loc[-1], str):
            message += did_you_mean(loc[-1], _fields_at(model, loc[:-1]))
    return f"{where}: {message}" if where else message


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e12 and 2.5e3 (no dot, or no exponent sign) as strings; read them as
    numbers, as YAML 1.2 and JSON do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _read_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ScenarioError(
            f"{path}: malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None


def read_yaml(path: Path) -> Any:
    """A YAML (or JSON) file's data; unreadable or malformed files are one-line errors."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file (not UTF-8)") from None
    if path.suffix.lower() == ".json":
        return _read_json(path, text)
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise ScenarioError(f"{path}: malformed YAML{where}: {problem}") from None


def load_file(path: str | Path, parse: Callable[[Any], T]) -> T:
    """Read `path` and parse its data; errors are prefixed with the path."""
    path = Path(path)
    data = read_yaml(path)
    try:
        return parse(data)
    except LocatedError:
        raise
    except ScenarioError as error:
        raise ScenarioError(f"{path}: {error}") from None


def validate(model: type[M], data: Any) -> M:
    """`data` validated as `model`; the first problem is a one-line `ScenarioError`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(first_error(error, model)) from None
