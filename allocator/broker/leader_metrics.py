"""The leadership gauges of a broker run with `--ha` (docs/metrics.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from allocator.broker.leader import Leadership


class LeaderCollector:
    """fairbroker_leader, fairbroker_leadership_changes_total and
    fairbroker_seconds_since_takeover, read from the election at every scrape."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterator[Metric]:
        ha = self.leadership
        leading = ha.leading and ha.fence() is None
        yield GaugeMetricFamily(
            "fairbroker_leader",
            "1 while this broker leads (elected through ZooKeeper, session live), else 0.",
            value=1.0 if leading else 0.0,
        )
        yield CounterMetricFamily(
            "fairbroker_leadership_changes",
            "Times this broker took the leadership (its take-overs).",
            value=float(ha.changes),
        )
        since = GaugeMetricFamily(
            "fairbroker_seconds_since_takeover",
            "Seconds since this broker last took the leadership (absent if it never did).",
        )
        if ha.took_over_at is not None:
            since.add_metric([], time.time() - ha.took_over_at)
        yield since
