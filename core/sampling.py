"""Deterministic sampling by trace id, as the SDK's TraceIdRatioBased sampler does, or by
span: the same traces and spans are kept on every replica and on every run."""

from __future__ import annotations

from hashlib import blake2b


def trace_id_sampled(trace_id: bytes, ratio: float) -> bool:
    """Whether `trace_id` falls in the kept share `ratio` (0..1) of trace ids."""
    return ratio >= 1.0 or int.from_bytes(trace_id[8:], "big") < ratio * 2**64


def span_sampled(trace_id: bytes, span_id: bytes, ratio: float) -> bool:
    """Whether the span falls in the kept share `ratio` (0..1) of spans: by a hash of both
    ids, so which spans of a trace are kept does not follow which traces are (a judge
    sampling by trace id would otherwise see only traces whose spans are all kept)."""
    if ratio >= 1.0:
        return True
    digest = blake2b(trace_id + span_id, digest_size=8).digest()
    return int.from_bytes(digest, "big") < ratio * 2**64
