"""Errors the spans state, found without a judge and located on the span that shows them.

Each rule reads what any instrumentation records: a span's error status and exception,
its HTTP status code, the tool calls with their arguments and results, whether the run
ended with an answer. None knows a framework or a data set. The rules:

- `error_status`: a tool, model or HTTP span failed (error status, an exception event,
  an HTTP status of 400 or more). The category comes from what the error says (429 or
  "rate limit": rate_limiting; 401/403: authentication_error; a timeout; 404 or "no such
  file": resource_not_found; an unexpected tool argument: tool_related_hallucination;
  ...), a tool's other failures are service_error. An error on a span whose descendant
  failed too is that error passed up, not a second one: only the deepest is blamed.
  An agent or chain step that failed with no failed span below it (the model's output
  could not be parsed or run) is blamed on the model call inside it that produced it:
  formatting_error when it did not parse, else by what the error says, else
  tool_related_hallucination (the model asked for an action that cannot run).
- `repeated_call`: a tool called again with the same arguments after that call failed;
  blamed on the first repeat (later ones are counted in its explanation).
- `empty_result_answered`: the run's answer came right after a tool returned nothing,
  with no other tool result between them.
- `no_final_answer`: content was recorded, yet the run ended without an answer.

Impact: high when the run ended without an answer after the error or the error reached
the root; low when a later call of the same tool (or model) succeeded; medium otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from spanscore.core.quoting import excerpt
from spanscore.processors.agent_trace import AgentTrace, SpanView, SpanViews
from spanscore.processors.localization.blame import Blame, Impact

EVIDENCE_CHARS = 300  # a quote from the span, never the whole of it
_HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
_LLM, _TOOL, _AGENT, _CHAIN = "llm", "tool", "agent", "chain"

# An HTTP status code stated in an error's text ("status code 429", "HTTP 503", "Error code: 401").
_STATED_CODE = re.compile(r"(?:status(?:[ _]code)?|http(?:/[\d.]+)?|error(?:[ _]code)?|code)\W{0,3}([1-5]\d\d)\b")

# What an error's text says, first match wins: more specific kinds before broader ones.
_CATEGORY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern))
    for category, pattern in (
        ("rate_limiting", r"rate[ _-]?limit|too many requests|quota (?:exceeded|exhausted)|insufficient_quota|throttl"),
        (
            "authentication_error",
            r"unauthori[sz]ed|forbidden(?! (?:function|import))|authenticat|invalid[ _](?:api[ _-]?)?key"
            r"|incorrect api key|api key"
            r"|access denied|invalid credentials|expired token|invalid token",
        ),
        ("timeout", r"timed? ?out|timeout|deadline exceeded"),
        (
            "resource_exhaustion",
            r"out of memory|memoryerror|context[ _]length|maximum context|too many tokens|token limit"
            r"|no space left|disk (?:is )?full|resource[ _]exhausted",
        ),
        (
            "tool_related_hallucination",
            r"unexpected keyword argument|missing \d+ required (?:positional |keyword-only )?argument"
            r"|takes \d+ positional arguments? but|unknown tool|no tool named|not a valid tool"
            r"|tool \S+ (?:is )?not found"
            r"|invalid (?:tool )?arguments|is not defined|has no attribute|forbidden (?:function|import)",
        ),
        (
            "environment_setup_error",
            r"modulenotfounderror|importerror|no module named|command not found|not installed"
            r"|environment variable|permissionerror|permission denied",
        ),
        ("resource_not_found", r"not found|no such file|does not exist|filenotfounderror|no results"),
        (
            "formatting_error",
            r"pars(?:e|ing) (?:failed|error)|could not parse|failed to parse|syntaxerror|jsondecodeerror"
            r"|invalid json|expecting value|unterminated string|regex pattern .{0,80} was not found",
        ),
        (
            "service_error",
            r"internal server error|service unavailable|bad gateway|connection (?:refused|reset|error|aborted)"
            r"|server error|overloaded",
        ),
    )
)
_BY_CODE = {
    429: "rate_limiting",
    401: "authentication_error",
    403: "authentication_error",
    408: "timeout",
    504: "timeout",
}


def category_of_error(text: str, status_code: int | None = None) -> str | None:
    """The category an error's text (and HTTP status code) states, or None."""
    lowered = text.lower()
    stated = _STATED_CODE.search(lowered)
    code = status_code or (int(stated.group(1)) if stated else None)
    if code in _BY_CODE:
        return _BY_CODE[code]
    for category, pattern in _CATEGORY_PATTERNS:
        if pattern.search(lowered):
            return category
    if code == 404 or code == 410:
        return "resource_not_found"
    if code is not None and code >= 500:
        return "service_error"
    return None


@dataclass
class _Failure:
    view: SpanView
    text: str  # the error as the span states it
    status_code: int | None

    @property
    def category(self) -> str | None:
        return category_of_error(self.text, self.status_code)


def find_evidence(views: SpanViews, run: AgentTrace) -> list[Blame]:
    """The errors the spans state, in the order they happened (start time)."""
    blames: list[Blame] = []
    for rule in _RULES:
        blames.extend(rule(views, run))
    seen: set[tuple[str, str]] = set()
    unique = []
    for blame in blames:
        if (blame.span_id, blame.category) not in seen:
            seen.add((blame.span_id, blame.category))
            unique.append(blame)
    start = {view.span_id: (view.start, view.depth) for view in views.views}
    return sorted(unique, key=lambda blame: start.get(blame.span_id, (0, 0)))


def _failures(views: SpanViews) -> dict[str, _Failure]:
    failures = {}
    for view in views.views:
        failure = span_failure(view)
        if failure is not None:
            failures[view.span_id] = failure
    return failures


def span_failure(view: SpanView) -> _Failure | None:
    """How the span itself says it failed (error status, exception, HTTP status of 400 or
    more), or None: `error_status`'s reading of one span, before any blame."""
    code = _http_status(view)
    if view.error is None and (code is None or code < 400):
        return None
    text = view.error if view.error not in (None, "error") else f"HTTP {code}" if code else "error"
    return _Failure(view, text, code)


def _http_status(view: SpanView) -> int | None:
    for key in _HTTP_STATUS_KEYS:
        if key not in view.attrs:  # the keys were read once, with the view
            continue
        value = view.attrs.get(key)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def _deepest(failures: dict[str, _Failure], views: SpanViews) -> list[_Failure]:
    """The failures no failed descendant explains."""
    passed_up: set[str] = set()
    for span_id in failures:
        parent = views.by_id[span_id].parent_id
        hops = 0
        while parent is not None and parent in views.by_id and hops < 1000:  # a cycle in bad input stops here
            passed_up.add(parent)
            parent = views.by_id[parent].parent_id
            hops += 1
    return [failure for span_id, failure in failures.items() if span_id not in passed_up]


def _error_status(views: SpanViews, run: AgentTrace) -> list[Blame]:
    failures = _failures(views)
    root_failed = any(view.parent_id is None and view.span_id in failures for view in views.views)
    repeats = _repeats_of_failed_calls(views)
    blames = []
    for failure in _deepest(failures, views):
        view = failure.view
        if view.span_id in repeats:  # the same failed call again: repeated_call blames it once
            continue
        category = category_of_error(failure.text, failure.status_code)
        target = view
        if view.role in (_AGENT, _CHAIN) or view.role is None and failure.status_code is None:
            # A step that failed with nothing failed below it: the model's output did
            # not parse or run. Blamed on the model call inside it that produced it.
            target = _last_model_call_inside(view, views) or view
        if category is None:  # the model's own action could not run, or a tool broke
            category = "tool_related_hallucination" if target is not view else "service_error"
        what = f"{view.tool_name or view.name} failed" if view.role == _TOOL else f"{view.name} failed"
        if target is not view:
            what = f"the output of {target.name} could not be used: {view.name} failed"
        impact = _impact(view, target, views, run, root_failed and view.parent_id is not None)
        blames.append(
            Blame(
                span_id=target.span_id,
                category=category,
                impact=impact,
                evidence=excerpt(failure.text, EVIDENCE_CHARS),
                explanation=f"{excerpt(what, 120)}: {excerpt(failure.text, 160)}",
                rule="error_status",
            )
        )
    return blames


def _last_model_call_inside(view: SpanView, views: SpanViews) -> SpanView | None:
    inside = [llm for llm in views.llm_views if _is_below(llm, view, views)]
    return max(inside, key=lambda llm: llm.start) if inside else None


def _is_below(view: SpanView, ancestor: SpanView, views: SpanViews) -> bool:
    parent, hops = view.parent_id, 0
    while parent is not None and hops < 1000:
        if parent == ancestor.span_id:
            return True
        parent = views.by_id[parent].parent_id if parent in views.by_id else None
        hops += 1
    return False


def _impact(failed: SpanView, blamed: SpanView, views: SpanViews, run: AgentTrace, reached_root: bool) -> Impact:
    if reached_root or (not run.final_output and run.user_input):
        return "high"
    call = enclosing_call(failed, views)  # the tool or model call the failure belongs to
    if call is None:
        return "medium"
    if call.role == _TOOL:
        name = call.tool_name or call.name
        same = [v for v in views.tool_views if (v.tool_name or v.name) == name]
    else:
        same = views.llm_views
    recovered = any(v.start > call.start and v.error is None for v in same)
    return "low" if recovered else "medium"


def enclosing_call(view: SpanView, views: SpanViews) -> SpanView | None:
    """The tool or model call `view` is, or is part of, or None."""
    hops = 0
    current: SpanView | None = view
    while current is not None and hops < 1000:
        if current.role in (_TOOL, _LLM):
            return current
        current = views.by_id.get(current.parent_id) if current.parent_id else None
        hops += 1
    return None


def _repeats_of_failed_calls(views: SpanViews) -> set[str]:
    """Tool spans that repeat, with the same arguments, a call that failed before them."""
    if not any(view.error is not None for view in views.tool_views):
        return set()
    failed: set[tuple[str, str]] = set()
    repeats = set()
    for view in views.tool_views:
        key = (view.tool_name or view.name, _canonical(view.tool_arguments))
        if key in failed:
            repeats.add(view.span_id)
        elif view.error is not None:
            failed.add(key)
    return repeats


def _repeated_call(views: SpanViews, run: AgentTrace) -> list[Blame]:
    if not any(view.error is not None for view in views.tool_views):
        return []
    failed_at: dict[tuple[str, str], SpanView] = {}
    first_repeat: dict[tuple[str, str], tuple[SpanView, int]] = {}
    for view in views.tool_views:
        key = (view.tool_name or view.name, _canonical(view.tool_arguments))
        if key in first_repeat:
            repeat, count = first_repeat[key]
            first_repeat[key] = (repeat, count + 1)
        elif key in failed_at:
            first_repeat[key] = (view, 1)
        elif view.error is not None:
            failed_at[key] = view
    blames = []
    for key, (repeat, count) in first_repeat.items():
        failed = failed_at[key]
        more = f", and {count - 1} more time{'s' if count > 2 else ''}" if count > 1 else ""
        blames.append(
            Blame(
                span_id=repeat.span_id,
                category="resource_abuse",
                impact="medium",
                evidence=excerpt(f"{key[0]}({key[1]}) after: {failed.error}", EVIDENCE_CHARS),
                explanation=excerpt(
                    f"called {key[0]} again with the same arguments after it failed at span {failed.span_id}{more}",
                    200,
                ),
                rule="repeated_call",
            )
        )
    return blames


def _canonical(arguments) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments.strip()
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(arguments)


_EMPTY_RESULTS = frozenset({"", "null", "none", "[]", "{}", '""', "''"})


def _empty_result_answered(views: SpanViews, run: AgentTrace) -> list[Blame]:
    if not run.final_output:
        return []
    steps = [step for step in run.steps if step.from_span]
    answers = [i for i, step in enumerate(steps) if step.kind == _LLM and not step.tool_calls and step.result]
    if not answers:
        return []
    answer = answers[-1]
    earlier_tools = [step for step in steps[:answer] if step.kind == _TOOL]
    if not earlier_tools:
        return []
    last = earlier_tools[-1]
    if last.error is not None or (last.result or "").strip().lower() not in _EMPTY_RESULTS:
        return []
    return [
        Blame(
            span_id=steps[answer].span_id,
            category="tool_output_misinterpretation",
            impact="medium",
            evidence=excerpt(f"{last.name} returned {last.result!r}; the answer followed: {run.final_output}", 300),
            explanation=excerpt(f"answered right after {last.name} (span {last.span_id}) returned nothing", 200),
            rule="empty_result_answered",
        )
    ]


def _no_final_answer(views: SpanViews, run: AgentTrace) -> list[Blame]:
    if run.final_output or not run.user_input or not run.steps:
        return []
    llm_steps = [step for step in run.steps if step.kind == _LLM and step.from_span]
    last = llm_steps[-1] if llm_steps else run.steps[-1]
    return [
        Blame(
            span_id=last.span_id,
            category="goal_deviation",
            impact="high",
            evidence=excerpt(f"no final answer after {len(run.steps)} steps; last step {last.name}", EVIDENCE_CHARS),
            explanation=f"the run ended without an answer; its last {'model call' if llm_steps else 'step'} is here",
            rule="no_final_answer",
        )
    ]


_RULES: tuple[Callable[[SpanViews, AgentTrace], list[Blame]], ...] = (
    _error_status,
    _repeated_call,
    _empty_result_answered,
    _no_final_answer,
)
