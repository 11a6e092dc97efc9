"""The answer an eval suite's dataset expects of a trace, for the metrics that compare with it.

A trace belongs to a case of the dataset (eval_dataset) by the case key (`eval.case.id`
by default) on its root span, any other span or its resource, or else by its session's
first user message equal to a case's first message (trimmed). A session is joined once,
from its first trace; by first message only when that trace is the session's first
(`session.traces` is empty while it is scored), since a later message is not the one a
case starts with. A trace without a session is a one-turn attempt, joined on its own.

The trace is the turn `len(session.traces)` of its session (0 without one): the case's
`turns[turn].expected_response` is what the trace's answer is compared with. ground_truth
grades attempts by the same join (`case_id_of`, `join`).

Cost per trace: without a session, or on a session's first trace, a scan of the trace's
attribute lists for the case key and a dict look-up (the dataset is indexed once, when
loaded); on a session's later traces, a dict look-up in the session's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, Field

from spanscore.core.attributes import find_attribute
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import CASE_ID
from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import agent_trace_of
from spanscore.processors.eval_dataset import Case, Dataset, DatasetError, load_dataset

DEFAULT_CASE_KEY = CASE_ID
JOINED_BY_ID = "id"
JOINED_BY_MESSAGE = "first message"


class DatasetFile(str):
    """A dataset's path, checked: `loaded` is the dataset it held when the config was validated."""

    loaded: Dataset


def _load(value: str) -> DatasetFile:
    # Loaded as the setting is validated, so `spanscore validate` lists the dataset's
    # problems in the same run as those of the other settings, at the setting's key path.
    try:
        loaded = load_dataset(value)
    except DatasetError as exc:
        raise ValueError(f"{value} is invalid:\n" + "\n".join(f"    {p}" for p in exc.problems)) from None
    checked = DatasetFile(value)
    checked.loaded = loaded
    return checked


# The `dataset:` setting of the components that read a suite's cases: a YAML or JSON
# Lines file (see eval_dataset), loaded and checked with the config.
DatasetSetting = Annotated[str, Field(min_length=1), AfterValidator(_load)]
CaseKey = Annotated[str, Field(min_length=1)]  # the attribute naming a trace's case


def case_id_of(trace: Trace, key: str) -> str | None:
    """The case key on the root span, then any span, then a resource."""
    for attributes in trace.attribute_lists():
        value = find_attribute(attributes, key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def join(dataset: Dataset, case_id: str | None, first_message: str) -> tuple[Case | None, str | None, str | None]:
    """(case, how it was joined, a problem) for an attempt's first trace."""
    if case_id is not None:
        case = dataset.by_id(case_id)
        if case is None:
            return None, None, f"case id {excerpt(case_id)!r} is not in the dataset"
        return case, JOINED_BY_ID, None
    case = dataset.match_first_message(first_message) if first_message else None
    return case, (JOINED_BY_MESSAGE if case is not None else None), None


@dataclass(frozen=True)
class ExpectedOutput:
    """The expected response of the case's turn the trace is."""

    text: str
    case_id: str
    turn: int

    @property
    def source(self) -> str:
        return f"case {excerpt(self.case_id)} turn {self.turn}"


@dataclass(frozen=True)
class _Joined:
    case: Case | None
    why_not: str | None  # when no case: why


class ExpectedOutputs:
    """The expected outputs of one dataset, found per trace.

    `state_key` names the session state (`session.state[state_key]`) where a session's
    join is kept; each processor gives its own. Threading: one task at a time per session,
    as the pipeline scores a session's traces.
    """

    def __init__(self, dataset: Dataset, case_key: str, state_key: str):
        self.dataset = dataset
        self.case_key = case_key
        self.state_key = state_key

    def of(self, trace: Trace, session: Session | None) -> ExpectedOutput | str:
        """The trace's expected output, or why it has none (a reason to skip, not a failure)."""
        turn = len(session.traces) if session is not None else 0
        joined = session.state.get(self.state_key) if session is not None else None
        if joined is None:
            joined = self._join(trace, first_turn=turn == 0)
            if session is not None:
                session.state[self.state_key] = joined
        case = joined.case
        if case is None:
            return f"the trace joins no case of the dataset: {joined.why_not}"
        if turn >= len(case.turns):
            scripted = f"scripts {len(case.turns)} turn{'s' if len(case.turns) != 1 else ''}"
            return f"case {excerpt(case.id)} {scripted}; this trace is turn {turn} (turns count from 0)"
        expected = case.turns[turn].expected_response
        if expected is None:
            return f"case {excerpt(case.id)} turn {turn} has no expected_response"
        return ExpectedOutput(expected, case.id, turn)

    def _join(self, trace: Trace, first_turn: bool) -> _Joined:
        case_id = case_id_of(trace, self.case_key)
        first_message = agent_trace_of(trace).user_input if case_id is None and first_turn else ""
        case, _, problem = join(self.dataset, case_id, first_message or "")
        if case is not None:
            return _Joined(case, None)
        if problem is not None:
            return _Joined(None, problem)
        if not first_turn:
            return _Joined(None, f"no {self.case_key}, and the session's first trace was not seen here")
        return _Joined(None, f"no {self.case_key}, and its first user message starts no case")
