"""Mesos 1.x allocator defaults the engine follows, in one place (no heavy imports: the
command line reads them for --help)."""

#: --allocation_interval: seconds between allocation runs.
ALLOCATION_INTERVAL_SECONDS = 1.0
#: The refuse filter a framework's DECLINE installs when it names none.
REFUSE_SECONDS = 5.0
#: --min_allocatable_resources default, cpus:0.01|mem:32 (either suffices; MB): a declined
#: leftover below it installs no refuse filter (nothing would be offered anyway).
MIN_ALLOCATABLE = {"cpus": 0.01, "mem": 32.0}
