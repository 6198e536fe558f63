"""`python -m build` makes a wheel and an sdist that carry the Spark plugin jar and the
generated tenant API code, and the wheel installs with pip into a clean virtual environment
where `fairbroker --version` and `fairbroker fill` on the bundled example work."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from spark_shim.jvm.build import plugin_jar

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist, then the wheel built from that sdist (build's default), from a copy of the
    checkout so no build/ or egg-info lands in the worktree."""
    plugin_jar()  # built by `make install`; rebuilt here only if stale
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("src") / "fairbroker"
    ignore = shutil.ignore_patterns(".venv*", ".git", ".mesos", "results", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".hypothesis", "build")
    shutil.copytree(REPO, source, ignore=ignore)
    shutil.copytree(REPO / "spark_shim" / "jvm" / "build", source / "spark_shim/jvm/build",
                    dirs_exist_ok=True)  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_wheel_and_sdist_carry_the_plugin_jar_and_generated_code(dist: Path) -> None:
    (wheel,) = dist.glob(f"fairbroker-{VERSION}-py3-none-any.whl")
    (sdist,) = dist.glob(f"fairbroker-{VERSION}.tar.gz")
    jar = plugin_jar().name
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (f"spark_shim/jvm/build/{jar}", "allocator/broker/tenant_pb2.py",
                   "allocator/broker/tenant_pb2_grpc.py", "allocator/data/paper002-example.yaml",
                   "spark_shim/apps/pi.py"):  # fmt: skip
        assert needed in names, needed
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert f"spark_shim/jvm/build/{jar}" in members and "scripts/install_pymesos.py" in members
    # the jar in the wheel is the one Spark loads: same bytes as the built one
    assert zipfile.ZipFile(wheel).read(f"spark_shim/jvm/build/{jar}") == plugin_jar().read_bytes()


def test_the_wheel_installs_into_a_clean_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = {"capture_output": True, "text": True, "timeout": 120, "cwd": tmp_path}
    version = subprocess.run([str(bin_dir / "fairbroker"), "--version"], **run)
    assert version.returncode == 0 and VERSION in version.stdout, version.stderr
    example = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import allocator, pathlib; print(pathlib.Path(allocator.__file__).parent / 'data')"],
        **run,
    )  # fmt: skip
    data = Path(example.stdout.strip())
    assert str(data).startswith(str(env_dir))  # the installed copy, not this checkout
    fill = subprocess.run(
        [str(bin_dir / "fairbroker"), "fill", str(data / "paper002-example.yaml"),
         "--scheduler", "rpsdsf", "--json"],
        **run,
    )  # fmt: skip
    assert fill.returncode == 0, fill.stderr
    result = json.loads(fill.stdout)
    # paper 002 Table I, rPS-DSF: (19, 2, 2, 19) = 42 tasks, the integer optimum
    assert result["tasks"]["mean"] == {"f1": {"s1": 19.0, "s2": 2.0}, "f2": {"s1": 2.0, "s2": 19.0}}
    assert result["optimum"]["tasks"] == 42.0
