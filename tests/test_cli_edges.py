"""The command line at its edges (issue 17): start-up cost, one-line errors for the
environment and bad numbers, output at scale. Every command runs as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from support.commands import one_line_error, run_fairbroker
from support.serving import stop_gracefully

#: Modules the command line must not import before a command needs them (--help, shell
#: completion and `status` stay fast). Timings are in benchmarks/bench_cli.py.
HEAVY = ("numpy", "scipy", "matplotlib", "grpc", "google.protobuf", "pydantic", "pandas",
         "prometheus_client", "requests", "tqdm", "pymesos")  # fmt: skip


def complete(*words: str) -> list[str]:
    """What bash completion offers for the last of `words` (click's bash_complete protocol)."""
    env = dict(os.environ, _FAIRBROKER_COMPLETE="bash_complete",
               COMP_WORDS=" ".join(("fairbroker", *words)), COMP_CWORD=str(len(words)))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_cli_import_leaves_heavy_modules_alone():
    code = (
        "import json, sys; from allocator.cli import cli; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_version_and_help():
    done = run_fairbroker("--version")
    assert done.returncode == 0 and done.stdout.startswith("fairbroker, version ")
    done = run_fairbroker("--help")
    assert done.returncode == 0
    for command in ("fill", "table1", "sim", "serve", "status", "configure", "submit"):
        assert f"  {command} " in done.stdout


def test_shell_completion_of_commands_and_choices():
    assert {"serve", "sim", "status", "submit"} <= set(complete("s"))
    assert complete("fill", "x.yaml", "--sch") == ["--scheduler"]
    assert complete("fill", "x.yaml", "--scheduler", "rp") == ["rpsdsf"]
    assert complete("serve", "--mode", "obl") == ["oblivious"]


def test_scheduler_typo_suggests_the_name():
    done = run_fairbroker("fill", "x.yaml", "--scheduler", "rpsdfs")
    one_line_error(done, "--scheduler", "did you mean rpsdsf?")


# ---- one-line errors: the environment ---------------------------------------------------
EXAMPLE = "allocator/data/paper002-example.yaml"
BATCH = "benchmarks/scenarios/paper-batch.yaml"
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def running_broker(tmp_path_factory):
    """A real `fairbroker serve` on free ports: (http, grpc, metrics) port numbers."""
    yield from _serve_on_free_ports(tmp_path_factory.mktemp("broker"))


@pytest.fixture(scope="module")
def broker_with_token(tmp_path_factory):
    """The same with a shared token (`s3cret`)."""
    yield from _serve_on_free_ports(tmp_path_factory.mktemp("tokened"), "--token", "s3cret")


def _serve_on_free_ports(state: Path, *args: str):
    process = subprocess.Popen(
        [sys.executable, "-c", "from allocator.cli import main; main()", "serve", "--port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--state-dir", str(state), *args],
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        ports = None
        deadline = time.monotonic() + 60
        while ports is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            match = re.search(r"serving on http://[\d.]+:(\d+) .* gRPC [\d.]+:(\d+), "
                              r"metrics http://[\d.]+:(\d+)/", line)  # fmt: skip
            if match:
                ports = tuple(int(p) for p in match.groups())
            elif not line and process.poll() is not None:
                break
        assert ports is not None, "the broker did not start"
        yield ports
    finally:
        stop_gracefully(process)
        process.stderr.close()


def test_submit_refusals_are_one_line_before_spark_starts(broker_with_token):
    """A bad group and a missing or wrong token are refused by `submit` itself: no Spark
    driver is started (that would print a JVM stack trace with the reason in the middle)."""
    http = f"127.0.0.1:{broker_with_token[0]}"
    app = ["--", "spark_shim/apps/pi.py", "1", "10"]
    env = {k: v for k, v in os.environ.items() if k != "FAIRBROKER_TOKEN"}
    no_token = run_fairbroker("submit", "--broker", http, *app, env=env)
    one_line_error(no_token, f"the broker at {http} refuses no token (--token or FAIRBROKER")
    wrong = run_fairbroker("submit", "--broker", http, "--token", "guess", *app, env=env)
    one_line_error(wrong, "refuses a wrong token")
    group = run_fairbroker("submit", "--broker", http, "--token", "s3cret", "--group",
                           "etl/nightly", *app, env=env)  # fmt: skip
    one_line_error(group, "--group: 1-64 characters", "'etl/nightly'")


@pytest.mark.parametrize("command", ["status", "submit"])
def test_the_metrics_port_is_named_as_such(running_broker, command):
    metrics = f"127.0.0.1:{running_broker[2]}"
    args = ["--", "spark_shim/apps/pi.py"] if command == "submit" else []
    done = run_fairbroker(command, "--broker", metrics, *args)
    one_line_error(done, f"--broker {metrics}: that is the broker's metrics port")


def serve(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """serve with a usable state directory, so that the error is the one the test provokes
    (the state directory is checked first)."""
    return run_fairbroker("serve", "--port", "0", "--grpc-port", "0", "--metrics-port", "0",
                          "--state-dir", str(state), *args)  # fmt: skip


@pytest.mark.parametrize(("which", "option"), [(0, "--port"), (1, "--grpc-port"),
                                               (2, "--metrics-port")])  # fmt: skip
def test_each_port_in_use_is_one_line(running_broker, which, option, tmp_path):
    port = running_broker[which]
    done = serve(tmp_path / "state", option, str(port))
    one_line_error(done, f"port {port} on 127.0.0.1 is in use (another broker?)", option)


def test_serve_started_twice_is_one_line(running_broker):
    http, grpc_port, metrics = running_broker
    done = run_fairbroker("serve", "--port", str(http), "--grpc-port", str(grpc_port),
                          "--metrics-port", str(metrics))  # fmt: skip
    one_line_error(done, f"port {http} on 127.0.0.1 is in use (another broker?)")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--host", "192.0.2.1"], "--host 192.0.2.1: not an address of this machine"),
        (["--host", "no-such-host.invalid"], "--host no-such-host.invalid: cannot resolve"),
        (["--port", "17999", "--grpc-port", "17999"], "--grpc-port 17999: the same port as"),
        (["--lease", "nan"], "--lease"),
        (["--lease", "inf"], "--lease"),
        # a wait of 1e10 s overflowed the allocation loop's timer and killed its thread
        (["--interval", "1e10"],
         "interval (from --interval): must be in (0, 3600] seconds, got 1e+10"),
    ],
)
def test_serve_bad_places_and_numbers(args, expected, tmp_path):
    one_line_error(serve(tmp_path / "state", *args), expected)


@pytest.mark.parametrize(
    "args",
    [
        ["fill", EXAMPLE, "-s", "drf", "--seed", "-1"],
        ["table1", "--trials", "2", "--seed", "-1"],
        ["sim", BATCH, "--seed", "-1"],
    ],
)
def test_negative_seed_is_refused_at_the_command_line(args):
    one_line_error(run_fairbroker(*args), "--seed", "-1")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--plot", "/nonexistent/dir/p.png"], "--plot /nonexistent/dir/p.png: directory"),
        (["--plot", "{tmp}/p.xyz"], "unsupported file type '.xyz'"),
        (["--series", "{tmp}"], "--series"),
        (["--series", "/nonexistent/dir/s.csv"], "does not exist"),
    ],
)
def test_sim_output_paths_are_checked_before_the_work(tmp_path, args, expected):
    args = [a.format(tmp=tmp_path) for a in args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = run_fairbroker("sim", BATCH, "--compare", *args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    one_line_error(done, expected)
    assert list(tmp_path.iterdir()) == []
    # Before the work, not after it: the command's CPU time (not wall time, which load
    # stretches) is that of starting up (0.9 s measured), not of the --compare simulation
    # (12.6 s measured on the same machine).
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 5.0, f"{cpu:.1f} s of CPU: the check ran after the simulation"


def test_batch_out_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    done = run_fairbroker("batch", "benchmarks/scenarios/spark-small.yaml", "--out",
                          str(tmp_path / "file" / "out"))  # fmt: skip
    one_line_error(done, "--out")


def test_json_to_a_full_or_closed_stdout():
    command = [sys.executable, "-c", "from allocator.cli import main; main()", "fill", EXAMPLE,
               "-s", "drf", "--json"]  # fmt: skip
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert one_line_error(done, "No space left on device")
    done = subprocess.run(["bash", "-c", 'exec "$@" >&-', "_", *command], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    one_line_error(done, "standard output is closed")


# ---- one-line errors: what the scenario says --------------------------------------------
def test_a_cluster_too_big_for_memory_is_refused_with_its_size(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("kind: trace\nhorizon_s: 10\ncluster: {google: {agents: 100000000000}}\n"
                    "jobs: {list: [{user: u, tasks: 1, demand_norm: {cpus: 0.1}, "
                    "duration_s: 1}]}\n")  # fmt: skip
    one_line_error(run_fairbroker("sim", str(path)), "cluster.google.agents: 100,000,000,000 "
                   "agents would need about 100.0 TB of memory")  # fmt: skip


def test_exponent_numbers_are_numbers(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("agents: [{name: s1, resources: {cpus: 1e12, mem: 2.5e3}}]\n"
                    "frameworks: [{name: f1, demand: {cpus: 1, mem: 1}}]\n")  # fmt: skip
    done = run_fairbroker("fill", str(path), "-s", "drf", "--no-optimum", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["mean"] == 2500  # memory 2.5e3 binds


@pytest.mark.parametrize(
    ("name", "text", "command", "expected"),
    [
        ("kind.yaml", "kind: trac\nagents: []\n", "sim", "kind: unknown 'trac' (did you mean "
         "trace?)"),
        ("typo.yaml", "agents: [{name: s1, resources: {cpus: 1}}]\n"
         "frameworks: [{name: f1, demnd: {cpus: 1}}]\n", "fill",
         "frameworks[0].demnd: unknown field (did you mean demand?)"),
        ("batch.yaml", "agents: [{name: s1, resources: {cpus: 1}}]\ngroups: [{name: g, "
         "queues: 1, jobs_per_queue: 1, demand: {cpus: 1}, executors: 1, job: {work: 1}, "
         "app: {kind: pi, partitons: 2}}]\n", "sim",
         "partitons: unknown field (did you mean partitions?)"),
        ("bad.json", '{"agents": [}', "fill", "malformed JSON at line 1, column 13"),
        ("kind.yaml", "kind: trac\nagents: []\n", "fill", "kind.yaml: kind: unknown 'trac' "
         "(did you mean trace?)"),
        ("trace.yaml", "kind: trace\nhorizon_s: 1\n", "fill", "trace.yaml: a trace scenario "
         "(kind: trace); run it with `fairbroker sim`"),
        ("batch.yaml", "agents: [{name: s1, resources: {cpus: 1}}]\ngroups: []\n", "fill",
         "batch.yaml: a job batch (groups); run it with `fairbroker sim`"),
    ],
)  # fmt: skip
def test_scenario_messages_name_the_problem(tmp_path, name, text, command, expected):
    path = tmp_path / name
    path.write_text(text)
    args = ["-s", "drf"] if command == "fill" else []
    line = one_line_error(run_fairbroker(command, str(path), *args), expected)
    assert "YAML" not in line or not name.endswith(".json")


# ---- one address for status, configure and submit ---------------------------------------
def test_status_and_configure_answer_on_either_port(running_broker):
    http, grpc_port, _ = running_broker
    heads = []
    for port in (http, grpc_port):
        done = run_fairbroker("status", "--broker", f"127.0.0.1:{port}", "--json")
        assert done.returncode == 0, done.stderr
        heads.append(json.loads(done.stdout)["broker"]["backend"])
    assert heads == ["local", "local"]
    done = run_fairbroker("configure", "--broker", f"127.0.0.1:{http}", "--mode", "oblivious")
    assert done.returncode == 0, done.stderr
    assert "oblivious mode" in done.stdout
    seen = run_fairbroker("status", "--broker", f"127.0.0.1:{grpc_port}")
    assert seen.stdout.startswith("scheduler rpsdsf, oblivious mode")
    run_fairbroker("configure", "--broker", f"127.0.0.1:{grpc_port}", "--mode", "characterized")


def test_submit_to_the_grpc_port_or_to_nothing_is_one_line(running_broker):
    grpc_port = running_broker[1]
    done = run_fairbroker("submit", "--broker", f"127.0.0.1:{grpc_port}", "--", "app.py")
    one_line_error(done, "that is the broker's gRPC port; submit uses its HTTP port")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        free = unused.getsockname()[1]
    done = run_fairbroker("submit", "--broker", f"127.0.0.1:{free}", "--", "app.py")
    one_line_error(done, "no broker answers there")


def test_submit_options_before_the_separator_reach_spark_without_it():
    done = run_fairbroker("submit", "--dry-run", "--executor-memory", "640m", "--", "app.py", "4")
    assert done.returncode == 0, done.stderr
    argv = done.stdout.split()
    assert "--" not in argv and argv[-2:] == ["app.py", "4"]
    assert "640m" in argv


@pytest.mark.parametrize("option", ["--port", "--grpc-port", "--metrics-port"])
def test_a_port_taken_after_the_preflight_is_the_same_one_line_error(tmp_path, monkeypatch,
                                                                     option):  # fmt: skip
    """The race the pre-flight cannot close: the port is free when checked and taken when the
    server binds. Simulated by letting the first (pre-flight) check pass while it is taken."""
    import signal

    from allocator.cli import serve
    from allocator.cli.listen_check import ListenError
    from allocator.cli.serve_config import ServeConfig

    real, calls = serve.check_can_listen, []

    def preflight_misses_it(host, ports):
        calls.append(ports)
        if len(calls) > 1:
            real(host, ports)

    monkeypatch.setattr(serve, "check_can_listen", preflight_misses_it)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"port": 0, "grpc_port": 0, "metrics_port": 0}
        ports[option.removeprefix("--").replace("-", "_")] = port
        config = ServeConfig(state_dir=tmp_path / "state", **ports)
        try:
            with pytest.raises(ListenError) as error:
                serve.run(config)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    assert str(error.value) == f"port {port} on 127.0.0.1 is in use (another broker?); see {option}"
    assert len(calls) == 2  # the pre-flight, then the check after the failed bind


@pytest.mark.parametrize("command", ["status", "configure"])
@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x",
                                     "127.0.0.1:99999", "127.0.0.1:0"])  # fmt: skip
def test_status_and_configure_want_host_and_port(command, address):
    args = ["--mode", "oblivious"] if command == "configure" else []
    done = run_fairbroker(command, "--broker", address, *args)
    one_line_error(done, f"--broker: expected HOST:PORT (e.g. 127.0.0.1:7080), got {address!r}")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["serve", "--port", "0", "--grpc-port", "0", "--metrics-port", "0", "--state-dir",
          "/nonexistent/never-created", "--failover-timeout"], "--failover-timeout"),
        (["batch", "benchmarks/scenarios/spark-small.yaml", "--out", "/nonexistent/never",
          "--job-timeout"], "--job-timeout"),
        (["submit", "--dry-run", "--weight"], "--weight"),
        (["fill", EXAMPLE, "-s", "fuga", "--fuga-lambda"], "--fuga-lambda"),
    ],
)  # fmt: skip
def test_non_finite_numbers_are_refused_at_the_command_line(args, option, value):
    tail = ["--", "app.py"] if args[0] == "submit" else []
    line = one_line_error(run_fairbroker(*args, value, *tail), option)
    assert value.lstrip("-") in line


def test_status_imports_no_numerical_library(running_broker):
    """`status` stays fast: neither port's client pulls in numpy, scipy, matplotlib or
    pandas (-X importtime lists every module the process imported)."""
    http, grpc_port, _ = running_broker
    for port in (http, grpc_port):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "from allocator.cli import main; main()",
             "status", "--broker", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("scheduler rpsdsf"), done.stdout
        imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                    if line.startswith("import time:")}  # fmt: skip
        assert "allocator.cli" in imported  # the listing is there to be read
        heavy = {m for m in imported if m.split(".")[0] in ("numpy", "scipy", "matplotlib",
                                                             "pandas")}  # fmt: skip
        assert heavy == set(), (port, sorted(heavy)[:5])


def _required_options():
    """(command path, option) for every option any fairbroker command declares required."""
    from allocator.cli import cli

    found = []

    def walk(command, path):
        for param in command.params:
            if isinstance(param, click.Option) and param.required:
                found.append((path, param.opts[0]))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(cli, [])
    return found


def test_every_required_option_is_enforced():
    """click 8.3+ ignores `required` on an option declared with default=None: `fill` without
    --scheduler ran DRF. Each command run without its required option is a one-line error."""
    required = _required_options()
    assert (["fill"], "--scheduler") in required and (["solve"], "--policy") in required
    for path, option in required:
        args = [*path, EXAMPLE] if path[0] in ("fill", "solve") else path
        done = run_fairbroker(*args)
        one_line_error(done, "Missing option", option)


@pytest.mark.parametrize("command", ["sim", "whatif"])
def test_a_plot_path_that_cannot_be_created_is_one_line(command, tmp_path):
    """/proc passes a permission check for root but takes no new file: the write is tried
    before the run, and nothing is left behind where it can be written."""
    done = run_fairbroker(command, BATCH, "--plot", "/proc/x.png", "--quiet")
    one_line_error(done, "--plot /proc/x.png: cannot write (No such file or directory)")
    missing = run_fairbroker(command, BATCH, "--plot", str(tmp_path / "no" / "x.png"))
    one_line_error(missing, "--plot")
    assert not (tmp_path / "no").exists()


def test_every_option_says_what_it_does():
    from allocator.cli import cli

    silent = []

    def walk(command, path):
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                silent.append((" ".join(path), param.opts[0]))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(cli, ["fairbroker"])
    assert silent == []
