"""`fairbroker teardown`: remove the broker's Mesos framework for good.

A broker stops with failover by default, so its framework and tasks outlive it. This
subscribes as that framework (its id from the state directory), which makes the master fail
the framework over to this connection, and sends TEARDOWN: the master kills every task and
forgets the framework; once the master shows it gone, the saved id is removed so the next
`serve` registers anew. A teardown the master does not confirm (another scheduler holds the
subscription, the master is unreachable) fails with the id kept. A framework the master
already removed (an earlier TEARDOWN that landed late, or its failover timeout passed) can
no longer subscribe: when the master lists it as completed, its id is forgotten as well.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import click

from allocator.errors import FairbrokerError

SUBSCRIBE_TIMEOUT_S = 30.0


class _NoEvents:
    """Teardown places nothing: every backend report is dropped."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kw: None


class Teardown(NamedTuple):
    framework_id: str
    already_gone: bool  # the master had removed it before this teardown subscribed


def teardown_framework(config: Any, timeout: float = SUBSCRIBE_TIMEOUT_S) -> Teardown:
    """Tear down the framework whose id is in `config.state_dir`."""
    from allocator.backends.mesos import MesosBackend, MesosOptions

    options = MesosOptions(
        master=config.master, roles=config.roles, principal=config.principal,
        secret=config.read_mesos_secret(), failover_timeout=config.failover_timeout,
        framework_name=config.framework_name, user=config.task_user,
        state_dir=config.state_dir, register_anew_if_removed=False,
    )  # fmt: skip
    backend = MesosBackend(options)
    framework_id = backend.framework_id
    if framework_id is None:
        raise FairbrokerError(
            f"state_dir: no Mesos framework id in {config.state_dir} (nothing to tear down)"
        )
    backend.start(_NoEvents())
    subscription = backend.subscription
    deadline = time.monotonic() + timeout
    gone = False
    while not backend.link.state().connected and time.monotonic() < deadline and not gone:
        if subscription.refusal is not None:  # refused: removed already, or not (yet) ours
            subscription.refusal = None
            gone = subscription.completed_at_master()
        time.sleep(0.1)
    if not backend.link.state().connected:
        gone = gone or subscription.completed_at_master()
        backend.stop(kill_executors=False)
        if gone:
            subscription.id_file.forget()
            return Teardown(framework_id, already_gone=True)
        raise FairbrokerError(
            f"master: could not subscribe to {config.master} as framework {framework_id} "
            f"within {timeout:.0f} s"
        )
    backend.stop(kill_executors=True)  # TEARDOWN; the saved id goes once the master confirms
    if not backend.torn_down:
        raise FairbrokerError(
            f"master: {config.master} did not confirm the teardown of framework "
            f"{framework_id} (is a broker still subscribed as it? stop it first); its tasks "
            f"may still run, and the id is kept in {config.state_dir} to retry"
        )
    return Teardown(framework_id, already_gone=False)


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="The serve configuration (master, state_dir, principal...).")  # fmt: skip
@click.option("--master", default=None, help="Mesos master HOST:5050 or zk://...")
@click.option("--state-dir", default=None, help="The broker's state directory.")
@click.option("--yes", is_flag=True, help="Do not ask: every task of the framework is killed.")
def teardown(config_file: str | None, master: str | None, state_dir: str | None, yes: bool):
    """Tear down the broker's Mesos framework: kill its tasks and forget it (run it with the
    broker stopped; `serve` itself stops with failover)."""
    import os

    from allocator.cli.serve_config import CONFIG_ENV, load_serve_config

    flags: dict[str, Any] = {"backend": "mesos"}
    if master:
        flags["master"] = master
    if state_dir:
        flags["state_dir"] = state_dir
    config, _ = load_serve_config(
        flags, config_file or os.environ.get(CONFIG_ENV) or None, os.environ
    )
    if not yes:
        click.confirm(
            f"Kill every task of the framework in {config.state_dir} on {config.master}?",
            abort=True, err=True,
        )  # fmt: skip
    done = teardown_framework(config)
    if done.already_gone:
        click.echo(
            f"fairbroker: framework {done.framework_id} was already gone (the master lists it "
            f"as completed); its saved id is forgotten", err=True,
        )  # fmt: skip
    else:
        click.echo(f"fairbroker: framework {done.framework_id} torn down", err=True)
