"""`spanscore agree --phoenix`: people's labels are the human annotations of a real Phoenix.

A real Phoenix with authentication on runs on loopback (tests/support/phoenix_server.py);
the tests reach it with its admin secret as the API key, as `PHOENIX_API_KEY`. Two
projects get agent traces over OTLP/HTTP, then annotations through Phoenix's REST API:

- `agree-clean`: six traces with a judge's `task_completion` on their root spans. People
  (HUMAN annotations) label five root spans, one of them twice, and one trace (a trace
  annotation); one label is on a child span. Another judge (LLM), spanscore's own
  exporter (CODE, identifier `spanscore`) and a note annotate too, and are not read.
- `agree-messy`: what people do that cannot be compared as it is: a name that is not a
  metric name (`Correctness`), 1-5 scores with an annotation config giving the scale,
  scores outside 0-1 with no scale known, an annotation with only an explanation.

`read_phoenix_labels` is checked field by field (also with pages of two, so that every
cursor is followed), then `spanscore agree` end to end against a scored file of the same
spans: its κ, accuracy and confusion table against counts by hand, its `--json`; and the
failures: an unreachable Phoenix, an unknown project, no API key, each exit 2 with one line.

Skipped when no Phoenix is found (see `phoenix_python`), unless SPANSCORE_REQUIRE_PHOENIX=1.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from spanscore.core.otlp_json import encode_request
from spanscore.offline import otlp_files, phoenix_labels
from spanscore.offline.human_labels import HumanLabel, Scale
from spanscore.offline.phoenix_labels import PhoenixError, read_phoenix_labels
from tests.support.phoenix_server import REQUIRE_ENV, PhoenixServer, phoenix_python, wait_for
from tests.support.ports import free_port
from tests.support.processes import ROOT, SPANSCORE
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span
from tests.support.trail_scored import ANNOTATIONS as TRAIL_ANNOTATIONS
from tests.support.trail_scored import annotations as trail_annotations
from tests.support.trail_scored import score_trail

ADMIN_SECRET = "spanscore-admin-secret-0123456789abcdef"
AUTH = {
    "PHOENIX_ENABLE_AUTH": "true",
    "PHOENIX_SECRET": "spanscore-test-secret-0123456789abcdef",
    "PHOENIX_ADMIN_SECRET": ADMIN_SECRET,
}
CLEAN, MESSY = "agree-clean", "agree-messy"
METRIC = "task_completion"
JUDGE = {"evaluator": "judge-test", "revision": "r1", "threshold": 0.5}
CLEAN_SCORES = [0.9, 0.8, 0.2, 0.3, 0.7, 0.1]
MESSY_SCORES = [0.9, 0.2, 0.6]
UNIT, ONE_TO_FIVE, ZERO_TO_TEN = Scale(0.0, 1.0), Scale(1.0, 5.0), Scale(0.0, 10.0)


@pytest.fixture(scope="module")
def phoenix():
    python, reason = phoenix_python()
    if python is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires it")
        pytest.skip(reason)
    with PhoenixServer(python, settings=AUTH) as server:
        logging.getLogger(__name__).info("Phoenix started in %.1fs", server.started_in_s)
        yield server


def call(phoenix: PhoenixServer, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        phoenix.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {ADMIN_SECRET}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


class Trace:
    """A trace of an agent run: a root span the judge scored, and a chat span under it."""

    def __init__(self, score: float):
        self.trace_id, self.root, self.child = new_trace_id(), new_span_id(), new_span_id()
        self.score = score

    def spans(self) -> list:
        """The spans as scored: the judge's result on the root, as spanscore writes it."""
        label = "pass" if self.score >= JUDGE["threshold"] else "fail"
        results = {
            f"eval.{METRIC}.{key}": value for key, value in {**JUDGE, "score": self.score, "label": label}.items()
        }
        return [
            span(self.trace_id, "invoke_agent", span_id=self.root, attributes={**AGENT_ROOT, **results}),
            span(self.trace_id, "chat", parent=self.root, span_id=self.child),
        ]

    @property
    def hex(self) -> tuple[str, str, str]:
        return self.trace_id.hex(), self.root.hex(), self.child.hex()


def send(phoenix: PhoenixServer, project: str, traces: list[Trace]) -> None:
    """The traces to Phoenix over OTLP/HTTP, stored once its REST API lists them."""
    send_requests(phoenix, project, [request_of([s for t in traces for s in t.spans()])])


def send_requests(phoenix: PhoenixServer, project: str, requests: list) -> None:
    """Export requests to Phoenix over OTLP/HTTP, one POST each, stored once its REST API
    lists every span they hold."""
    for export in requests:
        request = urllib.request.Request(
            f"{phoenix.url}/v1/traces",
            data=export.SerializeToString(),
            headers={
                "Content-Type": "application/x-protobuf",
                "Authorization": f"Bearer {ADMIN_SECRET}",
                "x-project-name": project,
            },
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
    expected = sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans)

    def listed() -> int:
        try:
            return len(call(phoenix, "GET", f"/v1/projects/{project}/spans?limit=1000")["data"])
        except urllib.error.HTTPError:
            return 0  # no project until its first span is stored

    assert wait_for(listed, lambda n: n == expected, timeout_s=60) == expected


def annotate(phoenix: PhoenixServer, kind: str, annotations: list[dict]) -> list[str]:
    """Span or trace annotations, stored before it answers; their ids."""
    answer = call(phoenix, "POST", f"/v1/{kind}_annotations?sync=true", {"data": annotations})
    return [entry["id"] for entry in answer["data"]]


def result(label: str | None = None, score: float | None = None, explanation: str | None = None) -> dict:
    return {"label": label, "score": score, "explanation": explanation}


@pytest.fixture(scope="module")
def projects(phoenix, tmp_path_factory):
    """Both projects sent and annotated; the scored file of their spans and the ids."""
    clean, messy = [Trace(s) for s in CLEAN_SCORES], [Trace(s) for s in MESSY_SCORES]
    send(phoenix, CLEAN, clean)
    send(phoenix, MESSY, messy)
    scored = tmp_path_factory.mktemp("agree") / "scored.jsonl"
    scored.write_text(
        "".join(encode_request(request_of([s for t in ts for s in t.spans()])) + "\n" for ts in (clean, messy))
    )
    c = [t.hex for t in clean]
    m = [t.hex for t in messy]

    def human(span_id: str, name: str, outcome: dict, identifier: str = "", kind: str = "HUMAN") -> dict:
        return {"span_id": span_id, "name": name, "annotator_kind": kind, "result": outcome, "identifier": identifier}

    ids = annotate(
        phoenix,
        "span",
        [
            human(c[0][1], METRIC, result("pass", 1.0, "did it"), "alice"),
            human(c[1][1], METRIC, result("fail", None, "booked the wrong day"), "alice"),
            human(c[2][1], METRIC, result("fail"), "alice"),
            human(c[2][1], METRIC, result("fail"), "bob"),
            human(c[3][1], METRIC, result(None, 0.8)),  # no identifier: the user it came from
            human(c[4][1], METRIC, result("Correct"), "alice"),
            human(c[0][2], METRIC, result("pass"), "alice"),  # a child span, which the judge did not score
            # Not people's: another judge, and spanscore's exporter (whatever its kind).
            human(c[1][1], METRIC, result("pass", 0.9, "judged"), "other-judge", kind="LLM"),
            human(c[3][1], METRIC, result("fail", 0.3), "spanscore", kind="CODE"),
            human(c[5][1], METRIC, result("pass", 1.0), "spanscore"),
        ],
    )
    [trace_id] = annotate(
        phoenix,
        "trace",
        [
            {
                "trace_id": c[5][0],
                "name": METRIC,
                "annotator_kind": "HUMAN",
                "result": result("fail"),
                "identifier": "alice",
            }
        ],
    )
    call(phoenix, "POST", "/v1/span_notes", {"data": {"span_id": c[0][1], "note": "a note, not a verdict"}})
    call(
        phoenix,
        "POST",
        "/v1/annotation_configs",
        {
            "name": "helpfulness",
            "type": "CONTINUOUS",
            "optimization_direction": "MAXIMIZE",
            "lower_bound": 1,
            "upper_bound": 5,
        },
    )
    messy_ids = annotate(
        phoenix,
        "span",
        [
            human(m[0][1], "Correctness", result("correct"), "carol"),
            human(m[1][1], "Correctness", result("incorrect"), "carol"),
            human(m[2][1], "Correctness", result("incorrect"), "carol"),
            human(m[0][1], "helpfulness", result(None, 4), "carol"),
            human(m[1][1], "plan_quality", result(None, 7), "carol"),
            human(m[2][1], "plan_quality", result(None, 8), "carol"),
            human(m[2][1], "comment", result(None, None, "just a remark"), "carol"),
        ],
    )
    return {"scored": scored, "clean": c, "messy": m, "ids": ids, "trace_id": trace_id, "messy_ids": messy_ids}


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("PHOENIX_API_KEY", ADMIN_SECRET)


@pytest.mark.parametrize("small_pages", [False, True], ids=["pages", "pages-of-two"])
def test_human_annotations_are_read_as_labels_field_by_field(phoenix, projects, api_key, monkeypatch, small_pages):
    if small_pages:
        for name in ("SPANS_PAGE", "ANNOTATIONS_PAGE", "IDS_PER_REQUEST"):
            monkeypatch.setattr(phoenix_labels, name, 2)
    c, ids = projects["clean"], projects["ids"]
    problems: list[str] = []
    labels = read_phoenix_labels(phoenix.url, CLEAN, None, problems)
    assert problems == []
    stored = call(phoenix, "GET", f"/v1/projects/{CLEAN}/span_annotations?span_ids={c[3][1]}&limit=10")["data"]
    [unnamed] = [a for a in stored if a["annotator_kind"] == "HUMAN"]
    assert unnamed["identifier"] == ""

    def label(index: int, trace: int, span: str | None, **fields: Any) -> HumanLabel:
        return HumanLabel(trace_id=c[trace][0], metric=METRIC, span_id=span, source=f"phoenix:{index}", **fields)

    expected = [
        label(ids[0], 0, c[0][1], label="pass", score=1.0, annotator="alice", note="did it", text="pass"),
        label(ids[1], 1, c[1][1], label="fail", annotator="alice", note="booked the wrong day", text="fail"),
        label(ids[2], 2, c[2][1], label="fail", annotator="alice", text="fail"),
        label(ids[3], 2, c[2][1], label="fail", annotator="bob", text="fail"),
        label(ids[4], 3, c[3][1], score=0.8, annotator=unnamed["user_id"]),
        label(ids[5], 4, c[4][1], label="pass", annotator="alice", text="Correct"),  # normalized, kept as written
        label(ids[6], 0, c[0][2], label="pass", annotator="alice", text="pass"),
        # a trace annotation: no span
        label(projects["trace_id"], 5, None, label="fail", annotator="alice", text="fail"),
    ]
    assert sorted(labels, key=lambda x: x.source) == sorted(expected, key=lambda x: x.source)
    assert all(x.scale == UNIT for x in labels)


def test_names_scales_and_what_cannot_be_compared(phoenix, projects, api_key):
    m, ids = projects["messy"], projects["messy_ids"]
    problems: list[str] = []
    labels = read_phoenix_labels(phoenix.url, MESSY, None, problems)
    # helpfulness has a continuous annotation config from 1 to 5: its scale.
    assert labels == [
        HumanLabel(
            m[0][0], "helpfulness", m[0][1], score=4.0, scale=ONE_TO_FIVE, annotator="carol", source=f"phoenix:{ids[3]}"
        )
    ]
    # One line per name and kind of problem, with the first annotation's id and the count.
    # Phoenix lists the newest spans and annotations first.
    assert sorted(problems) == sorted(
        [
            "phoenix: human annotations named 'Correctness' are not compared: the name is not a metric name "
            "(a-z, 0-9, _); compare them with a metric by --annotation 'Correctness=METRIC' (3 annotations)",
            f"phoenix annotation {ids[5]}: score 8 of 'plan_quality' is outside 0-1, and Phoenix has no annotation "
            "config with bounds for it: give its scale by --annotation 'plan_quality=plan_quality:LOW-HIGH' "
            "(and 1 more annotation like it)",
            f"phoenix annotation {ids[6]}: 'comment' has neither a label nor a score",
        ]
    )

    # Named: only those names are read, as the metrics they map to, on the scale given.
    problems = []
    names = {"Correctness": METRIC, "plan_quality": "plan_quality:0-10", "helpfulness": "helpfulness"}
    labels = read_phoenix_labels(phoenix.url, MESSY, names, problems)
    assert problems == []
    found = {(x.metric, x.span_id): (x.label, x.score, x.scale) for x in labels}
    assert found == {
        (METRIC, m[0][1]): ("pass", None, UNIT),  # correct and incorrect: spellings of pass and fail
        (METRIC, m[1][1]): ("fail", None, UNIT),
        (METRIC, m[2][1]): ("fail", None, UNIT),
        ("plan_quality", m[1][1]): (None, 7.0, ZERO_TO_TEN),
        ("plan_quality", m[2][1]): (None, 8.0, ZERO_TO_TEN),
        ("helpfulness", m[0][1]): (None, 4.0, ONE_TO_FIVE),
    }


def agree(*args: str, key: str | None = ADMIN_SECRET, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PHOENIX_API_KEY"}
    if key is not None:
        environment["PHOENIX_API_KEY"] = key
    return subprocess.run(
        [*SPANSCORE, "agree", *args], capture_output=True, text=True, cwd=cwd, env=environment, timeout=120
    )


def test_agree_compares_the_judge_with_the_people_in_phoenix(phoenix, projects, tmp_path, monkeypatch):
    out = tmp_path / "agree.json"
    done = agree(str(projects["scored"]), "--phoenix", phoenix.url, "--project", CLEAN, "--json", str(out))
    assert done.returncode == 0, done.stderr
    # The label on the child span meets no score: said, not a problem.
    assert done.stderr.splitlines() == ["spanscore agree: 1 label(s) are about traces or spans not in the scored files"]
    # By hand: 7 labels on 6 traces (two people on one). People by judge:
    #   fail: fail 3 (trace 2 twice, trace 5 by its trace annotation), pass 1 (trace 1)
    #   pass: fail 1 (trace 3, score 0.8 against the judge's 0.3), pass 2 (traces 0, 4)
    # accuracy 5/7; κ = (5/7 - 25/49) / (1 - 25/49) = 10/24.
    lines = done.stdout.splitlines()
    assert lines[0] == f"{METRIC} · judge-test · revision r1 · 7 labels on 6 traces"
    assert lines[1].startswith("  κ 0.42 [") and lines[1].endswith("(Cohen's κ on the labels)")
    assert lines[2].startswith("  accuracy 0.71 [")
    table = lines.index("  people (rows) by judge (columns):")
    assert [line.split() for line in lines[table + 1 : table + 4]] == [
        ["fail", "pass"],
        ["fail", "3", "1"],
        ["pass", "1", "2"],
    ]
    assert f"wrote {out} (JSON)" in lines

    document = json.loads(out.read_text())
    [found] = document["results"]
    assert set(found) >= {
        "metric",
        "evaluator",
        "revision",
        "n",
        "traces",
        "kappa",
        "accuracy",
        "confusion",
        "disagreements",
    }
    assert (found["metric"], found["evaluator"], found["revision"], found["n"], found["traces"]) == (
        METRIC,
        "judge-test",
        "r1",
        7,
        6,
    )
    assert found["kappa"]["estimate"] == pytest.approx(10 / 24)
    assert found["accuracy"]["estimate"] == pytest.approx(5 / 7)
    assert found["confusion"] == {"fail": {"fail": 3, "pass": 1}, "pass": {"fail": 1, "pass": 2}}
    assert found["human_kappa"]["items"] == 1 and found["human_kappa"]["pairs"] == 1
    c, ids = projects["clean"], projects["ids"]
    assert [(d["trace_id"], d["span_id"], d["source"], d["note"]) for d in found["disagreements"]] == [
        (c[1][0], c[1][1], f"phoenix:{ids[1]}", "booked the wrong day"),  # judge 0.8, person fail: 0.8 apart
        (c[3][0], c[3][1], f"phoenix:{ids[4]}", None),  # judge 0.3, person 0.8: 0.5 apart
    ]

    # The same labels written to a labels file give the same report: only where each was read differs.
    monkeypatch.setenv("PHOENIX_API_KEY", ADMIN_SECRET)
    labels = read_phoenix_labels(phoenix.url, CLEAN, None, [])
    rows = [
        {
            key: value
            for key, value in {
                "trace_id": label.trace_id,
                "span_id": label.span_id,
                "metric": label.metric,
                "label": label.label,
                "score": label.score,
                "scale": str(label.scale),
                "annotator": label.annotator,
                "note": label.note,
            }.items()
            if value is not None
        }
        for label in labels
    ]
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from_file = tmp_path / "from-file.json"
    done = agree(str(projects["scored"]), "--labels", str(labels_file), "--json", str(from_file))
    assert done.returncode == 0, done.stderr

    def without_sources(results: list[dict]) -> list[dict]:
        return [
            {**r, "disagreements": [{k: v for k, v in d.items() if k != "source"} for d in r["disagreements"]]}
            for r in results
        ]

    assert without_sources(json.loads(from_file.read_text())["results"]) == without_sources(document["results"])


def test_agree_compares_a_renamed_annotation(phoenix, projects, tmp_path):
    out = tmp_path / "agree.json"
    done = agree(
        str(projects["scored"]),
        "--phoenix",
        phoenix.url + "/",
        "--project",
        MESSY,
        "--annotation",
        "Correctness=task_completion",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    [found] = json.loads(out.read_text())["results"]
    # correct on 0.9 (pass), incorrect on 0.2 (fail), incorrect on 0.6 (pass).
    assert found["n"] == 3
    assert found["confusion"] == {"fail": {"fail": 1, "pass": 1}, "pass": {"fail": 0, "pass": 1}}


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    return line


def test_an_unreachable_phoenix_is_one_line_and_exit_2(tmp_path):
    port = free_port()
    scored = tmp_path / "scored.jsonl"
    scored.write_text(encode_request(request_of(Trace(0.9).spans())) + "\n")
    line = one_line(agree(str(scored), "--phoenix", f"http://127.0.0.1:{port}/?token=hidden", "--project", CLEAN))
    assert line == f"spanscore agree: cannot reach Phoenix at http://127.0.0.1:{port}: Connection refused"


def test_an_unknown_project_or_a_missing_key_is_one_line_and_exit_2(phoenix, projects):
    scored = str(projects["scored"])
    line = one_line(agree(scored, "--phoenix", phoenix.url, "--project", "no-such-project"))
    assert line == (
        f"spanscore agree: Phoenix at {phoenix.url} has no project 'no-such-project' "
        f"(its projects: {CLEAN}, {MESSY}, default)"
    )
    line = one_line(agree(scored, "--phoenix", phoenix.url, "--project", CLEAN, key=None))
    assert line.startswith(f"spanscore agree: Phoenix at {phoenix.url}: GET /v1/projects/{CLEAN}: HTTP 401")
    assert line.endswith("(Phoenix has authentication on: set PHOENIX_API_KEY to an API key)")
    line = one_line(agree(scored, "--phoenix", phoenix.url, "--project", CLEAN, key="not-the-key"))
    assert line.endswith("(PHOENIX_API_KEY was refused)") and "not-the-key" not in line


def test_a_bad_annotation_mapping_is_refused_before_phoenix_is_asked(tmp_path):
    with pytest.raises(PhoenixError, match=r"--annotation x=Bad: 'Bad' is not a metric name"):
        read_phoenix_labels("http://127.0.0.1:9", CLEAN, {"x": "Bad"}, [])
    with pytest.raises(PhoenixError, match=r"--annotation x=m:5-1: scale 5-1 must go from low to high"):
        read_phoenix_labels("http://127.0.0.1:9", CLEAN, {"x": "m:5-1"}, [])


def test_trail_annotated_in_phoenix_gives_the_same_report_as_trail_itself(phoenix, tmp_path):
    """Five TRAIL traces scored by a loopback judge whose answers are set per trace, sent to
    Phoenix, their root spans annotated by a person with TRAIL's own 1–5 scores: pulled
    back, they give the report TRAIL's annotation file gives."""
    scored = score_trail(tmp_path)
    requests = [request for _, request in otlp_files.read_requests(scored, [])]
    spans = [s for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    project = "agree-trail"
    send_requests(phoenix, project, requests)
    roots = {s.trace_id.hex(): s.span_id.hex() for s in spans if not s.parent_span_id}
    names = {"instruction_adherence": "plan_adherence", "plan_opt": "plan_quality", "reliability": "task_completion"}
    annotate(
        phoenix,
        "span",
        [
            {
                "span_id": roots[trace],
                "name": metric,
                "annotator_kind": "HUMAN",
                "identifier": "trail",
                "result": result(
                    None, row["scores"][0][f"{name}_score"], f"{name}: {row['scores'][0][f'{name}_reasoning']}"
                ),
            }
            for trace, row in trail_annotations().items()
            for name, metric in names.items()
        ],
    )
    from_phoenix, from_trail = tmp_path / "phoenix.json", tmp_path / "trail.json"
    scales = [a for metric in names.values() for a in ("--annotation", f"{metric}={metric}:1-5")]
    done = agree(str(scored), "--phoenix", phoenix.url, "--project", project, *scales, "--json", str(from_phoenix))
    assert done.returncode == 0, done.stderr
    done = agree(str(scored), "--trail", str(TRAIL_ANNOTATIONS), "--json", str(from_trail))
    assert done.returncode == 0, done.stderr

    def without_sources(path: Path) -> list[dict]:
        return [
            {**r, "disagreements": [{k: v for k, v in d.items() if k != "source"} for d in r["disagreements"]]}
            for r in json.loads(path.read_text())["results"]
        ]

    reports = without_sources(from_phoenix)
    assert [r["metric"] for r in reports] == ["plan_adherence", "plan_quality", "task_completion"]
    assert all(r["n"] == 5 and r["evaluator"] == "loopback-judge" for r in reports)
    assert reports == without_sources(from_trail)
