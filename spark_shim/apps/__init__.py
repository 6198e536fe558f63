"""Spark applications the live batch runs with spark-submit (each file is a standalone script).

`script(name)` is the path spark-submit is given; the scripts import nothing from this project,
so they run unchanged in any driver environment that has pyspark.
"""

from __future__ import annotations

from pathlib import Path

APPS_DIR = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """Path of the app script `name` ("pi", "wordcount", "wordgen")."""
    path = APPS_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no Spark app script {path}")
    return path
