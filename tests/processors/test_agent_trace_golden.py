"""The normalized output stays what it was: every fixture and the bench traces against
`golden/agent_traces.json` (written by `golden/make_golden.py`; see there for the cases).
The summary (trace-level fields without steps) agrees with the full view on each."""

import json

import pytest

from spanscore.processors.agent_trace import build_agent_trace
from spanscore.processors.agent_trace.build import read_span_views, summarize
from tests.support.golden_agent_traces import GOLDEN, bench_dumps, canonical, digest, fixture_cases

EXPECTED = json.loads(GOLDEN.read_text(encoding="utf-8"))
CASES = {name: (trace_id, spans, session) for name, trace_id, spans, session in fixture_cases()}


def test_every_fixture_has_a_golden_output():
    assert set(CASES) == set(EXPECTED["fixtures"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_output_is_unchanged(name):
    trace_id, spans, session = CASES[name]
    assert canonical(build_agent_trace(trace_id, spans, session_id=session).model_dump()) == EXPECTED["fixtures"][name]


def test_bench_trace_outputs_are_unchanged():
    golden = EXPECTED["bench"]
    dumps = bench_dumps(requests=golden["requests"])
    assert len(dumps) == golden["traces"]
    assert dumps[0] == golden["first"]
    assert digest(dumps) == golden["sha256"]


def test_a_trace_read_twice_gives_the_same_output():
    # Prefix answers are kept per key tuple across traces; a second pass must not differ.
    name = "all-fixtures-in-one-trace"
    trace_id, spans, session = CASES[name]
    first = build_agent_trace(trace_id, spans, session_id=session).model_dump()
    assert build_agent_trace(trace_id, spans, session_id=session).model_dump() == first


def summary_fields(agent) -> tuple:
    return agent.user_input, agent.final_output, agent.agent_name, agent.recognized


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_summary_has_the_full_view_s_trace_level_fields(name):
    trace_id, spans, session = CASES[name]
    full = build_agent_trace(trace_id, spans, session_id=session)
    assert summary_fields(summarize(read_span_views(trace_id, spans))) == summary_fields(full)
