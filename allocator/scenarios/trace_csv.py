"""The trace format's CSV files (docs/traces.md): machines
(`name,<resource or resource_norm>...[,register_s]`) and tasks
(`submit_s,user,job[,tasks],<resources>,duration_s`). Every error names the file, line and
field."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from allocator.errors import ScenarioError
from allocator.scenarios.files import LocatedError


class TraceFileError(LocatedError):
    """A bad CSV file; the message starts with file:line: field:."""


def _fail(path: Path, line: int, field_name: str, problem: str) -> TraceFileError:
    return TraceFileError(f"{path}:{line}: {field_name}: {problem}")


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _fail(path, line, name, f"not a number: {text.strip()!r}") from None
    if not math.isfinite(value):
        raise _fail(path, line, name, f"must be finite, got {text.strip()}")
    if value < 0:
        raise _fail(path, line, name, f"must not be negative, got {text.strip()}")
    return value


class _CsvTable:
    """A CSV file with a header row; `#` comment lines and blank lines are skipped."""

    def __init__(
        self,
        path: Path,
        required: tuple[str, ...],
        optional: tuple[str, ...],
        resources: tuple[str, ...],
    ) -> None:
        self.path = path
        try:
            self._handle = path.open(newline="")
        except OSError as error:
            raise ScenarioError(f"{path}: cannot read ({error.strerror})") from None
        try:
            self._numbered = _Numbered(self._handle)
            self._reader = csv.reader(self._numbered.lines())
            self._header(required, optional, resources)
        except BaseException:
            self._handle.close()
            raise

    def _header(
        self, required: tuple[str, ...], optional: tuple[str, ...], resources: tuple[str, ...]
    ) -> None:
        path = self.path
        try:
            header = next(self._reader)
        except StopIteration:
            raise _fail(path, 1, "header", "empty file") from None
        line = self.header_line = self._numbered.number
        self.columns = [h.strip() for h in header]
        self.index = {name: i for i, name in enumerate(self.columns)}
        if len(self.index) != len(self.columns):
            raise _fail(path, line, "header", "duplicate column")
        known = set(required) | set(optional)
        self.resource_columns: list[tuple[int, int, bool]] = []  # (column, resource, normalized)
        seen: set[int] = set()
        for i, name in enumerate(self.columns):
            if name in known:
                continue
            base, normalized = (name[:-5], True) if name.endswith("_norm") else (name, False)
            if base not in resources:
                expected = ", ".join([*required, *optional, *resources])
                problem = (
                    f"unknown column {name!r} (expected {expected}; resources may end in _norm)"
                )
                raise _fail(path, line, "header", problem)
            r = resources.index(base)
            if r in seen:
                raise _fail(path, line, "header", f"{base!r} given twice (absolute and _norm)")
            seen.add(r)
            self.resource_columns.append((i, r, normalized))
        for name in required:
            if name not in self.index:
                raise _fail(path, line, "header", f"missing column {name!r}")
        if not self.resource_columns:
            problem = f"no resource column (one of {', '.join(resources)}, or with _norm)"
            raise _fail(path, line, "header", problem)

    def rows(self):
        """Yields (line number, fields) with the field count checked."""
        with self._handle:
            for row in self._reader:
                line = self._numbered.number
                if len(row) != len(self.columns):
                    raise _fail(
                        self.path,
                        line,
                        "row",
                        f"expected {len(self.columns)} fields, got {len(row)}",
                    )
                yield line, row

    def demand(self, line: int, row: list[str], largest: np.ndarray, n: int) -> np.ndarray:
        vector = np.zeros(n)
        for column, r, normalized in self.resource_columns:
            value = _number(self.path, line, self.columns[column], row[column])
            vector[r] = value * largest[r] if normalized else value
        return vector


class _Numbered:
    """Feeds csv.reader the non-comment lines and remembers each one's line number."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.number = 0

    def lines(self):
        for number, text in enumerate(self.handle, start=1):
            if text.strip() and not text.lstrip().startswith("#"):
                self.number = number
                yield text


def read_machines_csv(
    path: Path, resources: tuple[str, ...], largest: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`name,<resource or resource_norm>...[,register_s]` -> names, capacity, register times."""
    table = _CsvTable(path, ("name",), ("register_s",), resources)
    names: list[str] = []
    capacity: list[np.ndarray] = []
    register: list[float] = []
    seen: set[str] = set()
    for line, row in table.rows():
        name = row[table.index["name"]].strip()
        if not name:
            raise _fail(path, line, "name", "empty")
        if name in seen:
            raise _fail(path, line, "name", f"duplicate machine {name!r}")
        seen.add(name)
        vector = table.demand(line, row, largest, len(resources))
        if not (vector > 0).any():
            raise _fail(path, line, "capacity", "must be positive in at least one resource")
        names.append(name)
        capacity.append(vector)
        at = table.index.get("register_s")
        register.append(0.0 if at is None else _number(path, line, "register_s", row[at]))
    if not names:
        raise _fail(path, table.header_line, "rows", "no machines")
    return names, np.array(capacity), np.array(register)


@dataclass
class CsvTaskRow:
    line: int
    submit_s: float
    user: str
    job: str
    tasks: int
    demand: np.ndarray
    duration_s: float


def read_jobs_csv(path: Path, resources: tuple[str, ...], largest: np.ndarray) -> list[CsvTaskRow]:
    """`submit_s,user,job[,tasks],<resources>,duration_s`: one row per task or per job."""
    table = _CsvTable(path, ("submit_s", "user", "job", "duration_s"), ("tasks",), resources)
    rows: list[CsvTaskRow] = []
    index = table.index
    for line, row in table.rows():
        user = row[index["user"]].strip()
        job = row[index["job"]].strip()
        for name, value in (("user", user), ("job", job)):
            if not value:
                raise _fail(path, line, name, "empty")
        tasks = 1
        if "tasks" in index:
            text = row[index["tasks"]].strip()
            if not text.isdigit() or int(text) < 1:
                raise _fail(path, line, "tasks", f"must be a whole number >= 1, got {text!r}")
            tasks = int(text)
        duration = _number(path, line, "duration_s", row[index["duration_s"]])
        if duration <= 0:
            raise _fail(path, line, "duration_s", "must be positive")
        demand = table.demand(line, row, largest, len(resources))
        if not (demand > 0).any():
            raise _fail(path, line, "demand", "must be positive in at least one resource")
        submit = _number(path, line, "submit_s", row[index["submit_s"]])
        rows.append(CsvTaskRow(line, submit, user, job, tasks, demand, duration))
    if not rows:
        raise _fail(path, table.header_line, "rows", "no tasks")
    return rows
