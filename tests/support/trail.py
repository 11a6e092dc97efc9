"""The TRAIL subset in tests/fixtures/trail as agent traces: real, long agent runs.

Read as `spanscore score` reads recorded files: export requests into the assembler, then
the normalized agent view of each trace.
"""

from __future__ import annotations

import functools
from pathlib import Path

from spanscore.offline.otlp_files import read_requests
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of

TRAIL = Path(__file__).resolve().parents[1] / "fixtures" / "trail" / "gaia-5.otlp.jsonl.gz"


@functools.cache
def trail_traces(path: Path = TRAIL) -> tuple[AgentTrace, ...]:
    """Every trace of the file, in trace id order."""
    problems: list[str] = []
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for _, request in read_requests(path, problems):
        assembler.add(request, 0.0)
    assert not problems, problems
    traces = sorted(assembler.pop_all(), key=lambda trace: trace.trace_id)
    return tuple(agent_trace_of(trace) for trace in traces)


def longest_trail_trace() -> AgentTrace:
    """The subset's one long run (about 600 kB of spans)."""
    return max(trail_traces(), key=lambda trace: len(trace.model_dump_json()))
