"""Which turn broke a session, on hand-made sequences of turns."""

from __future__ import annotations

import pytest

from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.localization.turns import Turn, breaking_turn, session_outputs

PASS, FAIL = None, "task_completion 0.20 < 0.50"


def turns(*verdicts):
    return [
        Turn(f"{i:032x}", why, "timeout" if why else None, f"{i:016x}" if why else None)
        for i, why in enumerate(verdicts, start=1)
    ]


@pytest.mark.parametrize(
    ("verdicts", "broken"),
    [
        ((PASS, PASS, PASS), None),  # nothing failed
        ((PASS, FAIL, PASS), None),  # recovered
        ((PASS, FAIL, FAIL), 1),  # failed at 2 and never recovered
        ((FAIL, PASS, FAIL, FAIL), 2),  # the first failure was recovered from; the third broke it
        ((FAIL,), 0),  # the only turn
        ((PASS, PASS, FAIL), 2),  # the last turn
        ((), None),
    ],
)
def test_the_breaking_turn_is_the_first_failure_never_recovered_from(verdicts, broken):
    assert breaking_turn(turns(*verdicts)) == broken


def test_the_result_names_the_turn_its_category_and_span():
    outputs = session_outputs(turns(FAIL, PASS, FAIL, FAIL), threshold=0.5)
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    # Turn 3 of 4 broke it: two of the four turns came before it.
    assert (result.name, result.score, result.label) == ("breaking_turn", 0.5, "timeout")
    assert result.explanation == (
        f"turn 3 of 4 (trace {3:032x}) broke the session: it failed ({FAIL}) and the 1 turn after it failed too; "
        f"first error timeout at span {3:016x}"
    )
    assert {o.key: o.value for o in outputs if isinstance(o, SpanAttribute)} == {
        "eval.breaking_turn.turn": 3,
        "eval.breaking_turn.trace_id": f"{3:032x}",
        "eval.breaking_turn.span_id": f"{3:016x}",
    }


def test_a_recovered_session_says_so_and_a_clean_one_gets_nothing():
    [result] = session_outputs(turns(PASS, FAIL, PASS), threshold=0.5)
    assert (result.score, result.label) == (1.0, "recovered")
    assert result.explanation == "turn 2 of 3 failed; a later turn passed each time: the session recovered"
    assert session_outputs(turns(PASS, PASS), threshold=0.5) == []
