"""`debug` exporter: a compact human summary of every trace on standard output.

Names, session ids and errors come from clients: each is printed through `excerpt`, so a
span cannot print a line of its own, reach the terminal's escape sequences or fill the
screen.
"""

from __future__ import annotations

import sys
from typing import Literal, TextIO

from spanscore.core.component import ComponentFactory
from spanscore.core.quoting import excerpt
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
    name = excerpt(anchor.name) if anchor is not None else ""
    parts = [f"trace {trace.trace_id_hex}", f"root='{name}'" if trace.complete else f"first='{name}'"]
    parts.append(f"spans={trace.span_count}")
    if trace.session_id:
        parts.append(f"session={excerpt(trace.session_id)}")
    if trace.late:
        parts.append("(late spans)")
    elif not trace.complete:
        parts.append("(incomplete: no root span)")
    if trace.results:
        scores = ", ".join(
            f"{r.name}={r.score:.2f} {r.label}" if r.score is not None else f"{r.name} error: {excerpt(str(r.error))}"
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
            f"  span {span.span_id.hex()} parent={parent} '{excerpt(span.name)}' {duration_ms:.1f}ms "
            f"attributes={len(span.attributes)}"
        )
    return lines


FACTORY = ComponentFactory("exporter", "debug", DebugExporterConfig, DebugExporter)
