"""Deterministic WordCount input: `python wordgen.py OUT --mb 20 [--seed 0] [--vocabulary 2000]`.

Words are made-up lowercase syllable strings drawn with Zipf-like frequencies (weight 1/rank)
from a vocabulary fixed by the seed, 12 to a line, until the file reaches the requested size.
`generate` returns the exact counts it wrote, so a WordCount answer can be checked exactly;
splitting the file with str.split() gives the same counts.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_LINE = 12
LINES_PER_CHUNK = 1000
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class WordStats:
    total: int
    distinct: int
    bytes: int
    counts: Counter[str]


def vocabulary(size: int, seed: int) -> list[str]:
    """`size` distinct words of 1-4 consonant-vowel syllables, most frequent first."""
    if size < 1:
        raise ValueError("vocabulary size must be at least 1")
    syllables = [c + v for c, v in itertools.product(_CONSONANTS, _VOWELS)]
    if size > sum(len(syllables) ** n for n in range(1, 5)):
        raise ValueError(f"vocabulary size {size} is too large")
    rng = random.Random(seed)
    words: dict[str, None] = {}  # insertion-ordered set
    while len(words) < size:
        words.setdefault("".join(rng.choices(syllables, k=rng.randint(1, 4))))
    return list(words)


def generate(
    path: str | Path, size_mb: float, seed: int = 0, vocabulary_size: int = 2000
) -> WordStats:
    """Write about `size_mb` MiB of text to `path` (whole lines) and return its word counts."""
    if not size_mb > 0:
        raise ValueError("size_mb must be positive")
    words = vocabulary(vocabulary_size, seed)
    cum_weights = list(itertools.accumulate(1.0 / rank for rank in range(1, len(words) + 1)))
    rng = random.Random(seed + 1)
    target = int(size_mb * 1024 * 1024)
    counts: Counter[str] = Counter()
    written = 0
    with open(path, "w", encoding="ascii", newline="\n") as out:
        while written < target:
            drawn = rng.choices(words, cum_weights=cum_weights, k=WORDS_PER_LINE * LINES_PER_CHUNK)
            lines: list[str] = []
            for start in range(0, len(drawn), WORDS_PER_LINE):
                line = " ".join(drawn[start : start + WORDS_PER_LINE]) + "\n"
                lines.append(line)
                counts.update(drawn[start : start + WORDS_PER_LINE])
                written += len(line)
                if written >= target:
                    break
            out.write("".join(lines))
    return WordStats(sum(counts.values()), len(counts), written, counts)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Generate a deterministic WordCount input")
    parser.add_argument("output", type=Path)
    parser.add_argument("--mb", type=float, required=True, help="size in MiB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocabulary", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        stats = generate(args.output, args.mb, args.seed, args.vocabulary)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    print(f"RESULT words={stats.total} distinct={stats.distinct} bytes={stats.bytes}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
