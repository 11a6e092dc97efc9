"""The recorded files in examples/ that the docs' samples run on, made here so they can be
made again: `python -m tests.support.example_files --write` rewrites them, and
tests/test_doc_samples.py holds the shipped files equal to what this makes.

- `weather-agent-failed.json`: examples/weather-agent.json with its second get_weather
  call failed (a 503, no result).
- `suite-runs/`: two versions of the weather agent graded against a two-case suite, 50
  attempts a case each, as OTLP/JSON lines (gzipped): the baseline succeeds 45/50 on oslo
  and 35/50 on paris, the candidate 45/50 and 25/50; `suite.yaml` is the suite.
- `trail/gaia-5.scored.jsonl.gz`: five TRAIL traces (tests/fixtures/trail) scored by a
  loopback judge whose answers are set per trace (tests/support/trail_scored.py), and
  their annotations: what `spanscore agree` is shown on. The judge is a stand-in, so the
  agreement figures show the plumbing, not a model's judgment.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WEATHER = EXAMPLES / "weather-agent.json"
FAILED = EXAMPLES / "weather-agent-failed.json"
SUITE_RUNS = EXAMPLES / "suite-runs"
TRAIL = EXAMPLES / "trail"
TRAIL_SCORED = TRAIL / "gaia-5.scored.jsonl.gz"

FAILED_CALL = "020000000000020a"  # the second trace's get_weather call

SUITE = """\
# The eval suite the recordings beside it are graded against: two cases, each attempt
# joined to its case by the resource attribute eval.case.id (set by the agent's run, e.g.
# OTEL_RESOURCE_ATTRIBUTES=eval.case.id=oslo). No judge needed: the expected calls are
# exact values. docs/cli.md scores and reports these recordings and compares them.
cases:
  - id: oslo
    user_instruction: What's the weather in Oslo?
    expected_tool_calls:
      - tool: get_weather
        parameters:
          - name: city
            value: Oslo
  - id: paris
    user_instruction: What's the weather in Paris?
    expected_tool_calls:
      - tool: get_weather
        parameters:
          - name: city
            value: Paris
"""

# Per side and case: (the city asked for, attempts that got it right, the city the others
# asked for instead). 50 attempts a case.
SIDES = {
    "baseline": {"oslo": ("Oslo", 45, "Bergen"), "paris": ("Paris", 35, "Lyon")},
    "candidate": {"oslo": ("Oslo", 45, "Bergen"), "paris": ("Paris", 25, "Lyon")},
}
ATTEMPTS_PER_CASE = 50
VERSIONS = {"baseline": "1.4.0", "candidate": "1.5.0"}
REPORTS = {
    "Oslo": {"temp_c": -3, "sky": "snow"},
    "Bergen": {"temp_c": 4, "sky": "rain"},
    "Paris": {"temp_c": 21, "sky": "sunny"},
    "Lyon": {"temp_c": 17, "sky": "light rain"},
}
START_NS = 1_763_900_000_000_000_000


def failed_session() -> str:
    """examples/weather-agent.json with the second get_weather call failed, as that file is
    laid out."""
    session = json.loads(WEATHER.read_text(encoding="utf-8"))
    for scope in session["resourceSpans"][0]["scopeSpans"]:
        for span in scope["spans"]:
            if span["spanId"] == FAILED_CALL:
                span["attributes"] = [a for a in span["attributes"] if a["key"] != "gen_ai.tool.call.result"]
                span["status"] = {"code": 2, "message": "upstream weather service: 503 Service Unavailable"}
    return json.dumps(session, indent=1) + "\n"


def _string(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def attempt(side: str, case_id: str, number: int, asked: str, called: str) -> dict:
    """One attempt as the agent exports it: the user asks for `asked`'s weather, the agent
    calls get_weather for `called` and answers with its report."""
    case_index = list(SIDES[side]).index(case_id)
    trace_id = f"{'ba5e' if side == 'baseline' else 'ca4d'}{case_index:04x}{number:024x}"
    root_id, tool_id = f"{number + 1:014x}a1", f"{number + 1:014x}b2"
    start = START_NS + (case_index * ATTEMPTS_PER_CASE + number) * 60_000_000_000
    report = REPORTS[called]
    answer = f"It is {report['temp_c']}°C with {report['sky']} in {called}."
    spans = [
        {
            "traceId": trace_id,
            "spanId": root_id,
            "name": "invoke_agent weather-agent",
            "kind": 1,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 2_000_000_000),
            "attributes": [
                _string("gen_ai.operation.name", "invoke_agent"),
                _string("gen_ai.agent.name", "weather-agent"),
                _string("gen_ai.input.messages", _messages("user", f"What's the weather in {asked}?")),
                _string("gen_ai.output.messages", _messages("assistant", answer)),
            ],
        },
        {
            "traceId": trace_id,
            "spanId": tool_id,
            "parentSpanId": root_id,
            "name": "execute_tool get_weather",
            "kind": 1,
            "startTimeUnixNano": str(start + 900_000_000),
            "endTimeUnixNano": str(start + 1_200_000_000),
            "attributes": [
                _string("gen_ai.operation.name", "execute_tool"),
                _string("gen_ai.tool.name", "get_weather"),
                _string("gen_ai.tool.call.arguments", json.dumps({"city": called})),
                _string("gen_ai.tool.call.result", json.dumps(report)),
            ],
        },
    ]
    resource = [
        _string("service.name", "weather-agent"),
        _string("service.version", VERSIONS[side]),
        _string("eval.case.id", case_id),
    ]
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [{"scope": {"name": "weather-agent", "version": VERSIONS[side]}, "spans": spans}],
            }
        ]
    }


def suite_run(side: str) -> str:
    """A side's recording: one export request a line, every attempt of every case."""
    lines = []
    for case_id, (city, right, wrong) in SIDES[side].items():
        for number in range(ATTEMPTS_PER_CASE):
            called = city if number < right else wrong
            lines.append(json.dumps(attempt(side, case_id, number, city, called), separators=(",", ":")))
    return "".join(line + "\n" for line in lines)


def scored_trail() -> str:
    """The five TRAIL traces as `spanscore score` writes them with the loopback judge."""
    from tests.support.trail_scored import score_trail

    with tempfile.TemporaryDirectory() as folder:
        return score_trail(Path(folder)).read_text(encoding="utf-8")


def without_event_times(scored: str) -> list[dict]:
    """A scored file's requests with its events' times (when it was scored) left out."""
    requests = [json.loads(line) for line in scored.splitlines()]
    for request in requests:
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    for event in span.get("events", ()):
                        event.pop("timeUnixNano", None)
    return requests


def gunzipped(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode("utf-8")


def texts() -> dict[Path, str]:
    """Every made file's text (before gzip), by path; the scored TRAIL file apart (`scored_trail`)."""
    made = {FAILED: failed_session(), SUITE_RUNS / "suite.yaml": SUITE}
    for side in SIDES:
        made[SUITE_RUNS / f"{side}.jsonl.gz"] = suite_run(side)
    return made


def write() -> None:
    from tests.support.trail_scored import ANNOTATIONS

    made = texts()
    scored = scored_trail()
    # Scored again, it differs only in when: kept as it is, it makes no change to commit.
    if not TRAIL_SCORED.exists() or without_event_times(gunzipped(TRAIL_SCORED)) != without_event_times(scored):
        made[TRAIL_SCORED] = scored
    for path, text in made.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        # mtime 0: the same text gives the same bytes whenever it is written.
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0) if path.suffix == ".gz" else data)
    shutil.copy(ANNOTATIONS, TRAIL / ANNOTATIONS.name)
    shutil.copy(ANNOTATIONS.with_name("LICENSE"), TRAIL / "LICENSE")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.support.example_files --write")
    write()
