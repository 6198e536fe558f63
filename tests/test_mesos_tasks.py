"""The broker's Mesos tasks on their own (`allocator/backends/mesos/tasks.py`), with plain
launch specs and a recorded call to the master: TaskInfos queued per engine agent, KILLs
re-sent until a terminal update, reconciliation's back-off, and orphans of lost agents."""

from __future__ import annotations

import shlex

import pytest

from allocator.backends.base import ExecutorState, LaunchSpec, TaskStatus
from allocator.backends.mesos.options import MesosOptions
from allocator.backends.mesos.tasks import RECONCILE_MAX_S, TERMINAL, TaskBook, task_info


class Master:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __call__(self, name: str, *args: object) -> bool:
        self.calls.append((name, args))
        return True

    def kills(self) -> list[tuple[str, str | None]]:
        return [(args[0]["value"], args[1]["value"] if len(args) > 1 and args[1] else None)
                for name, args in self.calls if name == "killTask"]  # fmt: skip

    def kill_policies(self) -> list[dict | None]:
        return [args[2] if len(args) > 2 else None
                for name, args in self.calls if name == "killTask"]  # fmt: skip


def spec(executor: str, agent: str = "S1", cpus: float = 2.0, tenant: str = "pi") -> LaunchSpec:
    return LaunchSpec(tenant, executor, agent, {"cpus": cpus, "mem": 1024.0, "gpus": 0.0},
                      "spark://CoarseGrainedScheduler@10.0.0.5:7078", "app-1", int(cpus),
                      640)  # fmt: skip


def book(roles: tuple[str, ...] = ("*",), **options: object) -> tuple[TaskBook, Master]:
    master = Master()
    opts = MesosOptions(master="m:5050", roles=roles, spark_home="/opt/spark", **options)
    return TaskBook(opts, master), master


def test_a_launch_queues_its_taskinfo_under_the_engine_agent_with_the_mesos_agent_id() -> None:
    tasks, master = book(roles=("pi", "wc"))
    assert tasks.launch(spec("1", agent="S0@10.0.0.1:5051@pi"), "h1") == "pi.1"
    assert tasks.launch(spec("2", agent="S0@10.0.0.1:5051@pi", cpus=1.25), "h1") == "pi.2"
    pending = tasks.take_pending()
    assert list(pending) == ["S0@10.0.0.1:5051@pi"]
    first, second = pending["S0@10.0.0.1:5051@pi"]
    assert first["task_id"] == {"value": "pi.1"}
    assert first["agent_id"] == {"value": "S0@10.0.0.1:5051"}  # the role is the key's, not Mesos's
    assert [(r["name"], r["scalar"]["value"]) for r in second["resources"]] == [
        ("cpus", 1.25), ("mem", 1024.0)
    ]  # sorted, exactly the demand, nothing of zero  # fmt: skip
    assert tasks.take_pending() == {} and master.calls == []
    assert [dict(r) for r in tasks.resources_on("S0@10.0.0.1:5051@pi")] == [
        {"cpus": 2.0, "mem": 1024.0, "gpus": 0.0}, {"cpus": 1.25, "mem": 1024.0, "gpus": 0.0}
    ]  # fmt: skip
    assert list(tasks.resources_on("S0@10.0.0.1:5051@wc")) == []


def test_a_spark_tarball_is_fetched_and_the_executor_starts_in_its_directory() -> None:
    options = MesosOptions(master="m:5050", spark_uri="http://repo/spark-3.5.1-bin.tgz")
    info = task_info(spec("1"), "pi.1", "S1", "h1", options)
    assert info["command"]["uris"] == [{"value": "http://repo/spark-3.5.1-bin.tgz",
                                        "extract": True}]  # fmt: skip
    value = info["command"]["value"]
    assert value.startswith("cd spark-3*; ")
    assert shlex.split(value.split("; ", 1)[1])[:2] == ["exec", "./bin/spark-class"]


def test_a_kill_is_resent_at_each_subscription_until_a_terminal_update() -> None:
    tasks, master = book()
    tasks.launch(spec("1"), "h1")
    tasks.kill("pi", "1")
    tasks.kill("pi", "9")  # unknown: nothing sent, nothing remembered
    assert master.kills() == [("pi.1", "S1")] and tasks.kills == {"pi.1"}
    tasks.subscribed_again()
    assert master.kills() == [("pi.1", "S1")] * 2
    tasks.update("pi.1", "TASK_KILLED", {"source": "SOURCE_EXECUTOR"})
    tasks.finished("pi.1")
    tasks.subscribed_again()
    assert master.kills() == [("pi.1", "S1")] * 2 and tasks.tasks == {}


def test_every_kill_carries_the_kill_policy_grace_in_nanoseconds() -> None:
    """SIGTERM, then SIGKILL after the grace: 5 s by default (the embedded cluster's gap),
    and the options' kill_grace when set, exactly, as a DurationInfo in nanoseconds, in the
    KILL and in the TaskInfo."""
    tasks, master = book()
    tasks.launch(spec("1"), "h1")
    tasks.kill("pi", "1")
    tasks.subscribed_again()  # re-sent with the same policy
    tasks.kill_abandoned([spec("3", tenant="gone")])
    assert master.kill_policies() == [{"grace_period": {"nanoseconds": 5_000_000_000}}] * 3
    tasks, master = book(kill_grace=12.25)
    tasks.launch(spec("1"), "h1")
    tasks.kill("pi", "1")
    assert master.kill_policies() == [{"grace_period": {"nanoseconds": 12_250_000_000}}]
    # the TaskInfo carries it too: Mesos's default (v0) command executor ignores a KILL's
    ((info,),) = tasks.take_pending().values()
    assert info["kill_policy"] == {"grace_period": {"nanoseconds": 12_250_000_000}}
    tasks, master = book(kill_grace=0)  # SIGKILL at once, but still said explicitly
    tasks.launch(spec("1"), "h1")
    tasks.kill("pi", "1")
    assert master.kill_policies() == [{"grace_period": {"nanoseconds": 0}}]
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="kill_grace"):
            MesosOptions(master="m:5050", kill_grace=bad)


def test_a_killed_task_ends_killed_never_failed() -> None:
    """A reclaimed executor's TASK_KILLED is KILLED (not a failure, so no rest); a
    decommissioned Spark executor that exits by itself is FINISHED."""
    assert TERMINAL["TASK_KILLED"] is ExecutorState.KILLED
    assert TERMINAL["TASK_FINISHED"] is ExecutorState.FINISHED
    tasks, _ = book()
    tasks.launch(spec("1"), "h1")
    tasks.kill("pi", "1")
    task = tasks.update("pi.1", "TASK_KILLED", {"source": "SOURCE_EXECUTOR"})
    assert task is not None and TERMINAL[task.state] is ExecutorState.KILLED
    assert tasks.kills == set()


def test_abandoned_executors_are_killed_by_id_now_and_at_each_subscription() -> None:
    tasks, master = book()
    tasks.kill_abandoned([spec("3", tenant="gone")])
    assert master.kills() == [("gone.3", None)]
    tasks.subscribed_again()
    assert master.kills() == [("gone.3", None)] * 2


def test_reconciliation_backs_off_doubling_to_its_cap_and_names_each_tasks_agent() -> None:
    tasks, _ = book()
    tasks.launch(spec("1", agent="S1"), "h1")
    tasks.adopt(spec("2", agent="S2"), "pi.2-old")  # an adopted task keeps its recorded id
    assert tasks.tasks["pi.2-old"].state == "TASK_RUNNING"
    tasks.orphans["pi.0"] = "S9"
    assert not tasks.reconcile_due(0.0)  # nothing unconfirmed before a subscription
    tasks.subscribed_again()
    now, sent = 0.0, []
    while now <= 300.0:
        if tasks.reconcile_due(now):
            bodies = tasks.reconcile_bodies(now)
            sent.append(now)
        now += 1.0
    assert sent == [0, 2, 6, 14, 30, 62, 122, 182, 242]  # gaps 2, 4, ... 32, then 60
    assert RECONCILE_MAX_S == 60.0
    assert bodies == [
        {"task_id": {"value": "pi.0"}, "agent_id": {"value": "S9"}},
        {"task_id": {"value": "pi.1"}, "agent_id": {"value": "S1"}},
        {"task_id": {"value": "pi.2-old"}, "agent_id": {"value": "S2"}},
    ]
    for task_id in ("pi.0", "pi.1", "pi.2-old"):
        tasks.update(task_id, "TASK_RUNNING", {})
    assert not tasks.reconcile_due(1e9)


def test_a_task_the_master_loses_becomes_an_orphan_killed_when_it_reappears() -> None:
    tasks, master = book()
    tasks.launch(spec("1"), "h1")
    lost = {"source": "SOURCE_MASTER", "reason": "REASON_AGENT_REMOVED"}
    assert tasks.update("pi.1", "TASK_LOST", lost) is not None
    assert tasks.orphans == {"pi.1": "S1"}
    tasks.finished("pi.1")
    tasks.update("pi.1", "TASK_RUNNING", {"source": "SOURCE_AGENT"})  # its agent is back
    assert master.kills() == [("pi.1", "S1")]
    tasks.update("pi.1", "TASK_LOST", lost)  # the master's own view: not an ending
    assert tasks.orphans == {"pi.1": "S1"}
    tasks.update("pi.1", "TASK_KILLED", {"source": "SOURCE_EXECUTOR"})
    assert tasks.orphans == {}


def test_a_reconciliation_answer_or_an_agent_side_loss_is_no_orphan() -> None:
    tasks, _ = book()
    tasks.launch(spec("1"), "h1")
    tasks.launch(spec("2"), "h1")
    tasks.update("pi.1", "TASK_LOST", {"source": "SOURCE_MASTER",
                                       "reason": "REASON_RECONCILIATION"})  # fmt: skip
    tasks.update("pi.2", "TASK_LOST", {"source": "SOURCE_AGENT"})
    assert tasks.orphans == {}


def test_a_lost_agents_tasks_become_orphans_killed_when_the_agent_offers_again() -> None:
    tasks, master = book()
    tasks.launch(spec("1", agent="S1"), "h1")
    tasks.launch(spec("2", agent="S2"), "h2")
    tasks.kill("pi", "1")
    tasks.agent_lost("S1")
    assert list(tasks.tasks) == ["pi.2"] and tasks.kills == set()
    assert tasks.orphans == {"pi.1": "S1"}
    tasks.kill_orphans("S2")
    assert master.kills() == [("pi.1", "S1")]  # only the KILL asked before the loss
    tasks.kill_orphans("S1")
    assert master.kills() == [("pi.1", "S1")] * 2


def test_a_launch_that_never_ran_is_reported_failed_once() -> None:
    tasks, _ = book()
    tasks.launch(spec("1"), "h1")
    assert tasks.lost("pi.1", "offer no longer held") == TaskStatus(
        "pi", "1", ExecutorState.FAILED, "offer no longer held"
    )
    assert tasks.lost("pi.1", "again") is None and tasks.tasks == {}


# ---- issue 23: tasks the broker does not want, and agents the master does not know -------


class Ledger:
    """A KillLedger that shares the master's call log, so the order is visible."""

    def __init__(self, master: Master, stored: dict[str, str] | None = None) -> None:
        self.master, self.stored = master, dict(stored or {})

    def record_kill(self, task_id: str, agent_id: str, reason: str) -> None:
        self.master.calls.append(("record_kill", (task_id, agent_id)))
        self.stored[task_id] = agent_id

    def forget_kill(self, task_id: str) -> None:
        self.master.calls.append(("forget_kill", (task_id,)))
        del self.stored[task_id]

    def kills(self) -> dict[str, str]:
        return dict(self.stored)


UNKNOWN = {"source": "SOURCE_MASTER", "reason": "REASON_RECONCILIATION",
           "message": "Reconciliation: Task is unknown", "agent_id": {"value": "S1"}}  # fmt: skip


def test_a_running_task_the_broker_does_not_know_is_killed_after_its_kill_is_recorded() -> None:
    tasks, master = book()
    tasks.ledger = Ledger(master)
    tasks.launch(spec("3"), "h1")
    running = {"source": "SOURCE_MASTER", "agent_id": {"value": "S1"}}
    tasks.update("pi.1", "TASK_RUNNING", running)  # before recovery: maybe about to be adopted
    assert master.calls == [] and tasks.unclaimed == {"pi.1": "S1"}
    tasks.recovery_done()
    assert [name for name, _ in master.calls] == ["record_kill", "killTask"]
    assert master.kills() == [("pi.1", "S1")] and tasks.unwanted == {"pi.1": "S1"}
    assert tasks.update("pi.3", "TASK_RUNNING", running) is not None  # its own: kept
    tasks.update("pi.2", "TASK_RUNNING", running)  # after recovery: killed at once
    assert master.kills() == [("pi.1", "S1"), ("pi.2", "S1")]
    tasks.subscribed_again()  # re-sent until they end
    assert sorted(master.kills()[2:]) == [("pi.1", "S1"), ("pi.2", "S1")]
    tasks.update("pi.1", "TASK_LOST", UNKNOWN)  # the master cannot see it: not an ending
    assert "pi.1" in tasks.unwanted
    tasks.update("pi.1", "TASK_KILLED", {"source": "SOURCE_EXECUTOR"})
    assert "pi.1" not in tasks.unwanted and tasks.ledger.kills() == {"pi.2": "S1"}


def test_kills_recorded_by_the_previous_run_are_sent_again() -> None:
    tasks, master = book()
    tasks.ledger = Ledger(master, {"pi.7": "S4"})
    tasks.recovery_done()
    assert master.kills() == [("pi.7", "S4")]


def test_a_task_whose_agent_the_master_does_not_know_waits_for_it_then_is_replaced() -> None:
    clock = [100.0]
    master = Master()
    opts = MesosOptions(master="m:5050", spark_home="/opt/spark", agent_return_grace=30.0)
    tasks = TaskBook(opts, master, clock=lambda: clock[0])
    tasks.ledger = Ledger(master)
    tasks.recovery_done()
    tasks.launch(spec("1"), "h1")
    tasks.launch(spec("2"), "h1")
    tasks.subscribed_again()
    # "unknown": the master does not know S1 (yet): not reported, still counted, reconciled
    assert tasks.update("pi.1", "TASK_LOST", UNKNOWN) is None
    assert tasks.update("pi.2", "TASK_UNKNOWN", UNKNOWN) is None
    assert set(tasks.tasks) == {"pi.1", "pi.2"} and tasks.unconfirmed == {"pi.1", "pi.2"}
    clock[0] += 20
    assert tasks.given_up() == []
    assert tasks.update("pi.1", "TASK_RUNNING", {"source": "SOURCE_MASTER"}) is not None
    clock[0] += 10  # the grace is over for pi.2 only
    (gone,) = tasks.given_up()
    assert gone.spec.executor_id == "2" and set(tasks.tasks) == {"pi.1"}
    assert tasks.orphans == {"pi.2": "S1"} and master.kills() == []
    tasks.update("pi.2", "TASK_RUNNING", {"source": "SOURCE_MASTER"})  # back after all
    assert master.kills() == [("pi.2", "S1")] and tasks.ledger.kills() == {"pi.2": "S1"}


def test_unknown_to_a_known_agent_is_final() -> None:
    tasks, _ = book()
    tasks.launch(spec("1"), "h1")
    gone = {**UNKNOWN, "message": "Reconciliation: Task is unknown to the agent"}
    assert tasks.update("pi.1", "TASK_LOST", gone) is not None and tasks.awaiting == {}
