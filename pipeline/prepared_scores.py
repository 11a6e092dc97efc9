"""Scores in the form the collector merges, prepared where they were computed.

A scoring worker holds a copy of the trace it scored, so it can encode the trace's
scores as the span field bytes the attach stage would write (score_attributes), build a
session's carrier span, and leave the collector's thread one `MergeFromString` per span
(one parse per carrier); or, when every exporter sends protobuf, encode the whole
scored trace, which the collector sends as it is. The results travel too, unless the
collector reads none of them: the score router, evaluation logs and exporters that are
not OTLP protobuf read them, session summaries only their scores.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PreparedScores:
    # The span the scores were prepared for (the worker's copy's anchor); the collector
    # merges them only onto its own anchor of that id, and encodes them itself otherwise.
    anchor_span_id: bytes | None = None
    anchor: bytes = b""  # span field bytes appending the scores, usage and attributes
    # (span id, span field bytes) per other span written: its span-level results, or a
    # finding about it (a span may have both, one entry each).
    span_fields: tuple[tuple[bytes, bytes], ...] = ()
    carrier: bytes | None = None  # a session's carrier trace as ResourceSpans bytes; None: nothing to carry
    # The whole trace with the scores merged, as export request bytes (encoded_trace),
    # instead of `anchor` and `span_fields` when every exporter sends protobuf.
    encoded: bytes | None = None
    # Metric name -> score, instead of the results themselves when the collector reads
    # none of them (WorkerSetup.send_results).
    scores: dict[str, float] | None = None
