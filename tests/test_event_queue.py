"""The trace simulator's event queue pops what one heapq list pops, entry for entry."""

from __future__ import annotations

import heapq
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.sim.event_queue import EventQueue

#: Times on bucket edges, inside buckets, equal ones, far ahead and infinite.
TIMES = st.one_of(
    st.sampled_from([0.0, 599.999, 600.0, 600.0, 1200.0, 1e7, math.inf, -5.0]),
    st.floats(0.0, 5000.0),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TIMES, st.none()), max_size=80), st.sampled_from([1.0, 600.0]))
def test_pops_are_one_heaps_pops(steps, width):
    ours, heap, seq = EventQueue(width), [], itertools.count()
    for step in steps:
        if step is None:  # a pop
            if heap:
                assert ours.first() == heap[0]
                assert ours.pop() == heapq.heappop(heap)
        else:
            entry = (step, next(seq), "event")
            ours.push(entry)
            heapq.heappush(heap, entry)
        assert len(ours) == len(heap)
    while heap:
        assert ours.pop() == heapq.heappop(heap)
    assert len(ours) == 0


def test_only_the_buckets_reached_are_in_the_heap():
    queue = EventQueue(600.0)
    for k, time in enumerate([30.0, 700.0, 5000.0, 5001.0, 90.0]):
        queue.push((time, k))
    assert queue.pop() == (30.0, 0)  # reaching bucket 0 heapifies its two events alone
    assert len(queue._near) == 1 and queue._waiting == 3
    queue.push((599.0, 5))  # bucket 0 is reached: straight into the heap
    assert [queue.pop() for _ in range(5)] == [(90.0, 4), (599.0, 5), (700.0, 1),
                                               (5000.0, 2), (5001.0, 3)]  # fmt: skip


def test_a_width_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="positive"):
        EventQueue(0.0)
