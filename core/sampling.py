"""Deterministic sampling by trace id, as the SDK's TraceIdRatioBased sampler does: the
same traces are kept on every replica and on every run."""

from __future__ import annotations


def trace_id_sampled(trace_id: bytes, ratio: float) -> bool:
    """Whether `trace_id` falls in the kept share `ratio` (0..1) of trace ids."""
    return ratio >= 1.0 or int.from_bytes(trace_id[8:], "big") < ratio * 2**64
