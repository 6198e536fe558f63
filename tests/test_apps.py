"""The Spark apps a live batch submits, run for real with spark-submit --master local[2]."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyspark
import pytest

from spark_shim.apps import pi, script, wordgen

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
needs_spark = pytest.mark.skipif(
    shutil.which("java") is None or not SPARK_SUBMIT.exists(), reason="needs Java and pyspark"
)


def spark_submit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(
        [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def result_line(stdout: str) -> dict[str, str]:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT "), stdout[-2000:]
    return dict(field.split("=", 1) for field in last.split()[1:])


@needs_spark
def test_pi_on_spark():
    completed = spark_submit(str(script("pi")), "8", "200000", "--seed", "5")
    assert completed.returncode == 0, completed.stderr[-3000:]
    fields = result_line(completed.stdout)
    assert abs(float(fields["pi"]) - math.pi) < 0.01
    assert int(fields["samples"]) == 8 * 200000
    # Seeded per partition: the same points as drawing them here, whatever ran where.
    assert int(fields["inside"]) == sum(pi.count_inside(5, i, 200000) for i in range(8))


@needs_spark
def test_wordcount_on_spark(tmp_path: Path):
    text = tmp_path / "words.txt"
    stats = wordgen.generate(text, 2, seed=7)
    expected = Counter(text.read_text().split())  # independent of the generator's own count
    assert stats.counts == expected and stats.total == sum(expected.values())
    output = tmp_path / "out" / "counts.json"
    completed = spark_submit(
        str(script("wordcount")), str(text), str(output), "--partitions", "4", "--top", "0"
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    fields = result_line(completed.stdout)
    assert (int(fields["words"]), int(fields["distinct"])) == (stats.total, len(expected))
    counts = json.loads(output.read_text())
    assert counts["total"] == stats.total and counts["distinct"] == len(expected)
    assert dict(counts["top"]) == expected
    assert counts["top"][0] == list(expected.most_common(1)[0])


def test_wordgen_is_deterministic_and_sized(tmp_path: Path):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    first = wordgen.generate(a, 0.5, seed=1, vocabulary_size=300)
    wordgen.generate(b, 0.5, seed=1, vocabulary_size=300)
    wordgen.generate(c, 0.5, seed=2, vocabulary_size=300)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    size = a.stat().st_size
    assert first.bytes == size and 0.5 * 2**20 <= size < 0.5 * 2**20 + 200
    assert first.distinct == len(first.counts) <= 300
    lines = a.read_text().splitlines()
    assert all(len(line.split()) == wordgen.WORDS_PER_LINE for line in lines)
    assert first.counts.most_common(1)[0][0] == wordgen.vocabulary(300, 1)[0]  # Zipf rank 1
    with pytest.raises(ValueError, match="positive"):
        wordgen.generate(a, 0)


def test_pi_partitions_are_seeded():
    assert pi.count_inside(0, 3, 1000) == pi.count_inside(0, 3, 1000)
    assert pi.count_inside(0, 3, 1000) != pi.count_inside(0, 4, 1000)
    with pytest.raises(SystemExit):
        pi.parse_args(["0", "10"])
