"""Mesos's own view of the cluster, for `fairbroker status --master`: the master's
`/master/state` and `/metrics/snapshot` endpoints (operator side, read only)."""

from __future__ import annotations

from dataclasses import dataclass

import requests

from allocator.errors import FairbrokerError

TIMEOUT_SECONDS = 10.0


class MesosOperatorError(FairbrokerError):
    pass


def _url(master: str, path: str) -> str:
    if master.startswith("zk://"):
        raise MesosOperatorError("status --master needs the leading master's HOST:PORT, not zk://")
    base = master if master.startswith(("http://", "https://")) else f"http://{master}"
    return base.rstrip("/") + path


def _get(master: str, path: str, auth: tuple[str, str] | None) -> dict:
    url = _url(master, path)
    try:
        answer = requests.get(url, timeout=TIMEOUT_SECONDS, auth=auth)
    except requests.RequestException as error:
        raise MesosOperatorError(f"cannot reach the Mesos master at {url}: {error}") from None
    if answer.status_code != 200:
        raise MesosOperatorError(f"{url}: HTTP {answer.status_code} {answer.text[:200]}")
    try:
        return answer.json()
    except ValueError:
        raise MesosOperatorError(f"{url}: not JSON") from None


@dataclass(frozen=True)
class MesosView:
    state: dict
    metrics: dict

    def render(self) -> str:
        """Aligned tables; id and name columns as wide as their longest value (a real
        master's ids are 39-41 characters)."""
        agents, frameworks = self.state.get("slaves", []), self.state.get("frameworks", [])
        width = max([len(str(x.get("id", "?"))) for x in [*agents, *frameworks]] + [9])
        host = max([len(str(a.get("hostname", "?"))) for a in agents] + [4])
        name = max([len(str(f.get("name", "?"))) for f in frameworks] + [4])
        lines = [f"Mesos master {self.state.get('id', '?')} (version {self.state.get('version')})"]
        lines.append(
            f"{'agent':<{width}} {'host':<{host}} {'cpus used/total':>16} {'mem used/total':>18}"
        )
        for agent in agents:
            res, used = agent.get("resources", {}), agent.get("used_resources", {})
            lines.append(
                f"{agent.get('id', '?'):<{width}} {agent.get('hostname', '?'):<{host}} "
                f"{used.get('cpus', 0):>7g}/{res.get('cpus', 0):<8g} "
                f"{used.get('mem', 0):>8g}/{res.get('mem', 0):<9g}"
            )
        lines.append("")
        lines.append(f"{'framework':<{width}} {'name':<{name}} {'tasks':>5} {'cpus':>7} {'mem':>9}")
        for fw in frameworks:
            used = fw.get("used_resources", {})
            lines.append(
                f"{fw.get('id', '?'):<{width}} {fw.get('name', '?'):<{name}} "
                f"{len(fw.get('tasks', [])):>5} {used.get('cpus', 0):>7g} {used.get('mem', 0):>9g}"
            )
        shares = {
            key.split("/")[3]: value
            for key, value in self.metrics.items()
            if key.startswith("allocator/mesos/roles/") and key.endswith("/shares/dominant")
        }
        if shares:
            lines.append("")
            lines.append("Mesos's DRF dominant share per role: " + ", ".join(
                f"{role} {share:.3f}" for role, share in sorted(shares.items())
            ))  # fmt: skip
        return "\n".join(lines)


def mesos_view(master: str, auth: tuple[str, str] | None = None) -> MesosView:
    return MesosView(
        state=_get(master, "/master/state", auth), metrics=_get(master, "/metrics/snapshot", auth)
    )
