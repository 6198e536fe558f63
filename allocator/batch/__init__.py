"""Live job batches: a batch scenario's Spark jobs submitted to a running broker
(`fairbroker batch`), with answers checked and the broker's allocation sampled over time."""

from allocator.batch.result import JobRecord, LiveBatchResult
from allocator.batch.runner import SubmitFunction, run_live_batch

__all__ = ["JobRecord", "LiveBatchResult", "SubmitFunction", "run_live_batch"]
