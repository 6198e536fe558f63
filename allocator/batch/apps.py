"""What each group's jobs submit: the app script and arguments, the Spark conf, and how the
answer is checked. WordCount inputs are generated here, once per (size, seed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from allocator.batch.answers import check_pi, check_wordcount, parse_result
from allocator.errors import FairbrokerError, ScenarioError
from allocator.scenarios.batch import BatchSpec, GroupSpec, PiApp, ScriptApp, WordCountApp
from spark_shim.apps import script
from spark_shim.apps.wordgen import generate

OUTPUT = "{output}"


@dataclass(frozen=True)
class GroupApp:
    group: str  # its weight is the broker's role weight, not each job's
    conf: dict[str, str]
    script: Path
    args: tuple[str, ...] = ()
    expected: dict[str, int] = field(default_factory=dict)
    output_dir: Path | None = None  # WordCount: the `{output}` argument, one JSON per job

    def app_args(self, job: str) -> list[str]:
        """spark-submit's application arguments (script first) for the job named `job`."""
        args = [str(self.script), *self.args]
        if self.output_dir is None:
            return args
        output = str(self.output_dir / f"{job}.json")
        return [output if a == OUTPUT else a for a in args]

    def job_conf(self, job: str) -> dict[str, str]:
        return {"spark.app.name": job, **self.conf}

    def check(self, log_text: str, exit_code: int | None) -> tuple[bool, str]:
        """(answer ok, short reason) for a finished job."""
        if exit_code is None:
            return False, "timed out"
        if exit_code != 0:
            return False, f"exit code {exit_code}"
        if not self.expected:
            return True, "exit code 0"
        fields = parse_result(log_text)
        if fields is None:
            return False, "no RESULT line in the log"
        if "samples" in self.expected:
            return check_pi(fields, self.expected["samples"])
        return check_wordcount(fields, self.expected["words"], self.expected["distinct"])


def _conf_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def spark_conf(group: GroupSpec) -> dict[str, str]:
    """The group's `spark:` conf as strings; `executors:` overrides spark.executor.instances."""
    conf = {key: _conf_text(value) for key, value in (group.spark or {}).items()}
    dynamic = conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"
    if group.executors is not None and not dynamic:
        conf["spark.executor.instances"] = str(group.executors)
    return conf


def prepare_apps(spec: BatchSpec, workdir: Path) -> dict[str, GroupApp]:
    """One GroupApp per group; raises ScenarioError when a group cannot run live."""
    inputs: dict[tuple[float, int], tuple[Path, int, int]] = {}
    apps: dict[str, GroupApp] = {}
    for g, group in enumerate(spec.groups):
        where = f"groups[{g}] ({group.name})"
        if group.app is None:
            raise ScenarioError(f"{where}: a live run needs an `app:` section")
        if group.spark is None:
            raise ScenarioError(f"{where}: a live run needs a `spark:` conf, not `demand:`")
        try:
            _, executors = group.executor_demand()
        except (ValueError, FairbrokerError) as error:
            raise ScenarioError(f"{where}: {error}") from None
        name, conf, app = group.name, spark_conf(group), group.app
        if isinstance(app, PiApp):
            apps[group.name] = GroupApp(
                name,
                conf,
                script=script("pi"),
                args=(
                    str(app.partitions),
                    str(app.samples),
                    "--seed",
                    str(app.seed),
                    *_task_seconds(app.task_s),
                ),
                expected={"samples": app.partitions * app.samples},
            )
        elif isinstance(app, WordCountApp):
            key = (app.input_mb, app.seed)
            if key not in inputs:
                inputs[key] = _word_input(workdir, *key)
            path, words, distinct = inputs[key]
            partitions = app.partitions or max(2, 2 * executors)
            apps[group.name] = GroupApp(
                name,
                conf,
                script=script("wordcount"),
                args=(
                    str(path),
                    OUTPUT,
                    "--partitions",
                    str(partitions),
                    *_task_seconds(app.task_s),
                ),
                expected={"words": words, "distinct": distinct},
                output_dir=workdir / "outputs",
            )
        else:
            args = tuple(map(_conf_text, app.args))
            apps[group.name] = GroupApp(name, conf, _script_path(app, where), args)
    return apps


def _task_seconds(task_s: float) -> tuple[str, ...]:
    return ("--task-seconds", f"{task_s:g}") if task_s > 0 else ()


def _script_path(app: ScriptApp, where: str) -> Path:
    path = Path(app.path).expanduser().resolve()
    if not path.is_file():
        raise ScenarioError(f"{where}.app.path: no such file {app.path!r}")
    return path


def _word_input(workdir: Path, size_mb: float, seed: int) -> tuple[Path, int, int]:
    directory = workdir / "inputs"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"words-{size_mb:g}mb-seed{seed}.txt"
    try:
        stats = generate(path, size_mb, seed)
    except OSError as error:
        raise FairbrokerError(f"{path}: cannot write the WordCount input ({error})") from None
    return path, stats.total, stats.distinct
