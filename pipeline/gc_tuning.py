"""Garbage collection tuned for a long-running collector.

Spans, traces and the views derived to score them are freed by reference counting as
soon as they are exported: CPython's cyclic collector finds next to nothing to free
here, yet with its default thresholds (a pass every 700 new container objects) it scans
the objects of every trace in flight over and over. In-process scoring of the ingest
bench's traces ran about a fifth faster with the thresholds below. Once started, what
was loaded (modules, config, processors) is also frozen out of the scans.

Passes this sparse may not come for a long time, so what must be freed promptly is not
left to them: the OTLP/HTTP receiver frees a refused body itself (an exception's frames
would keep it in a cycle), and the memory limiter forces a full pass before refusing.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 50_000  # new container objects between passes (CPython's default: 700)
GEN1_THRESHOLD = 20
GEN2_THRESHOLD = 100


def tune_for_collector() -> None:
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
