"""`debug` exporter: a compact human summary of every trace on standard output."""

from __future__ import annotations

import sys
from typing import Literal, TextIO

from spanscore.core.component import ComponentFactory
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig


class DebugExporterConfig(ExporterConfig):
    verbosity: Literal["basic", "detailed"] = "basic"


class DebugExporter(Exporter):
    config: DebugExporterConfig
    stream: TextIO | None = None  # None: sys.stdout at write time

    async def send(self, traces: list[Trace]) -> None:
        lines = []
        for trace in traces:
            lines.append(summarize(trace))
            if self.config.verbosity == "detailed":
                lines.extend(_span_lines(trace))
        out = self.stream or sys.stdout
        out.write("\n".join(lines) + "\n")
        out.flush()


def summarize(trace: Trace) -> str:
    """`trace <id> root="<name>" spans=<n> [session=<id>] scores: name=0.80 pass, ...`."""
    anchor = trace.anchor
    parts = [f"trace {trace.trace_id_hex}", f"root={anchor.name if anchor is not None else ''!r}"]
    if not trace.complete:
        parts[1] = f"first={anchor.name if anchor is not None else ''!r}"
    parts.append(f"spans={trace.span_count}")
    if trace.session_id:
        parts.append(f"session={trace.session_id}")
    if trace.late:
        parts.append("(late spans)")
    elif not trace.complete:
        parts.append("(incomplete: no root span)")
    if trace.results:
        scores = ", ".join(
            f"{r.name}={r.score:.2f} {r.label}" if r.score is not None else f"{r.name} error: {r.error}"
            for r in trace.results
        )
        parts.append(f"scores: {scores}")
    return " ".join(parts)


def _span_lines(trace: Trace) -> list[str]:
    lines = []
    for span, _ in sorted(trace.spans(), key=lambda item: item[0].start_time_unix_nano):
        duration_ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
        parent = span.parent_span_id.hex() or "-"
        lines.append(
            f"  span {span.span_id.hex()} parent={parent} {span.name!r} {duration_ms:.1f}ms "
            f"attributes={len(span.attributes)}"
        )
    return lines


FACTORY = ComponentFactory("exporter", "debug", DebugExporterConfig, DebugExporter)
