"""The hand-written sections of a results file, which a new run of its benchmark keeps."""

from __future__ import annotations

from pathlib import Path


def kept_notes(path: Path) -> str:
    """Everything from the file's first `## ` heading on (before/after tables and notes
    written by hand), to go below the new run's own text; empty if there is none."""
    text = path.read_text() if path.exists() else ""
    start = text.find("\n## ")
    return "" if start < 0 else text[start:]
