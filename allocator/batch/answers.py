"""Reading a job's `RESULT key=value ...` line and judging the answer it reports."""

from __future__ import annotations

import math
import re

_RESULT = re.compile(r"^RESULT((?: +\S+=\S*)+) *$", re.MULTILINE)


def parse_result(text: str) -> dict[str, str] | None:
    """Fields of the last RESULT line in `text` (a job's log), or None when there is none."""
    matches = _RESULT.findall(text)
    if not matches:
        return None
    return dict(field.split("=", 1) for field in matches[-1].split())


def pi_tolerance(samples: int) -> float:
    """Six standard deviations of the Monte-Carlo estimate 4 * inside / samples."""
    quarter = math.pi / 4
    return 6 * 4 * math.sqrt(quarter * (1 - quarter) / samples)


def check_pi(fields: dict[str, str], samples: int) -> tuple[bool, str]:
    try:
        value = float(fields["pi"])
        drawn = int(fields.get("samples", samples))
    except (KeyError, ValueError):
        return False, "RESULT line has no number pi="
    if drawn != samples:
        return False, f"drew {drawn} samples, expected {samples}"
    if abs(value - math.pi) > pi_tolerance(samples):
        return False, f"pi={value:.6f} is too far from {math.pi:.6f}"
    return True, f"pi={value:.6f}"


def check_wordcount(fields: dict[str, str], words: int, distinct: int) -> tuple[bool, str]:
    try:
        got_words, got_distinct = int(fields["words"]), int(fields["distinct"])
    except (KeyError, ValueError):
        return False, "RESULT line has no integers words= and distinct="
    if (got_words, got_distinct) != (words, distinct):
        return False, (
            f"words={got_words} distinct={got_distinct}, expected {words} and {distinct}"
        )
    return True, f"words={got_words} distinct={got_distinct}"
