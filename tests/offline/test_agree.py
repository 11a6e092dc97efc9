"""`spanscore agree` on hand-made scored files and labels: every figure against a hand
computation, the labels files' errors, TRAIL's scores, the gate's exit codes, the JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.cli import main
from spanscore.core.otlp_json import encode_request
from spanscore.offline.human_labels import Scale, read_labels_file
from spanscore.offline.trail_labels import BUILT_IN_MAPPING, read_mapping, read_trail_labels
from tests.support.agreement_files import scored_root, trace_id, write_labels, write_scored
from tests.support.span_metric import scored_run

ROOT = Path(__file__).resolve().parents[2]
METRIC = "task_completion"
# Ten traces: the judge's scores (threshold 0.5) and one person's verdicts.
JUDGE = [0.9, 0.8, 0.7, 0.6, 0.3, 0.2, 0.1, 0.9, 0.4, 0.65]
PERSON = ["pass", "pass", "fail", "pass", "fail", "fail", "pass", "fail", "fail", "pass"]
# By hand: people fail / judge fail 3 (traces 5, 6, 9), fail/pass 2 (3, 8), pass/fail 1 (7),
# pass/pass 4. Accuracy 0.7; chance agreement (5·4 + 5·6) / 100 = 0.5, so κ 0.4. The failing
# class: 3 of the judge's 4 fails are people's (precision 0.75), 3 of people's 5 (recall 0.6),
# F1 6/9. The best cut, from the κ of every cut the judge's scores allow, is 0.6 (κ 0.4),
# which splits them as 0.5 does.


@pytest.fixture
def ten(tmp_path):
    scored = write_scored(
        tmp_path / "scored.jsonl",
        [scored_root(trace_id(i), METRIC, score, explanation=f"judged {i}") for i, score in enumerate(JUDGE, start=1)],
    )
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [
            {"trace_id": trace_id(i), "metric": METRIC, "label": label, "annotator": "alice", "note": f"note {i}"}
            for i, label in enumerate(PERSON, start=1)
        ],
    )
    return scored, labels


def agree(*args: str, capsys) -> tuple[int, str, str]:
    code = main(["agree", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def results_of(path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def test_statistics_equal_the_hand_computation(ten, tmp_path, capsys):
    scored, labels = ten
    out_json = tmp_path / "agree.json"
    code, out, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = results_of(out_json)
    assert (result["metric"], result["evaluator"], result["revision"]) == (METRIC, "judge-model", "aaaaaaaaaaaa")
    assert result["n"] == 10 and result["traces"] == 10
    assert result["accuracy"]["estimate"] == pytest.approx(0.7)
    assert result["kappa"]["estimate"] == pytest.approx(0.4)
    assert result["precision"]["estimate"] == pytest.approx(0.75)
    assert result["recall"]["estimate"] == pytest.approx(0.6)
    assert result["f1"]["estimate"] == pytest.approx(6 / 9)
    assert result["spearman"] is None  # people gave labels, not scores
    assert result["confusion"] == {"fail": {"fail": 3, "pass": 2}, "pass": {"fail": 1, "pass": 4}}
    best = result["best_threshold"]
    assert best["estimate"] == 0.6 and best["kappa"] == pytest.approx(0.4)
    assert best["configured"] == 0.5 and best["kappa_at_configured"] == pytest.approx(0.4)
    for name in ("accuracy", "kappa", "precision", "recall", "f1"):
        low, high = result[name]["low"], result[name]["high"]
        assert low <= result[name]["estimate"] <= high, name
    assert result["human_kappa"] is None and result["consistency"] is None
    # Disagreements, farthest apart first: trace 7 (0.1 against a pass) and 8 (0.9 against
    # a fail) are 0.9 apart, trace 3 (0.7 against a fail) 0.7.
    order = [(d["trace_id"], d["severity"]) for d in result["disagreements"]]
    assert order == [(trace_id(7), 0.9), (trace_id(8), 0.9), (trace_id(3), 0.7)]
    first = result["disagreements"][0]
    assert (first["judge_label"], first["human_label"], first["note"], first["annotator"]) == (
        "fail",
        "pass",
        "note 7",
        "alice",
    )
    assert first["judge_explanation"] == "judged 7"
    # The printout says the same, and how the intervals were made.
    assert "κ 0.40 [" in out and "Cohen's κ on the labels" in out
    assert "precision 0.75 [" in out and "recall 0.60 [" in out
    assert "best match with people 0.60 [" in out
    assert "BCa bootstrap over traces, percentile under 20 traces (2,000 resamples" in out
    assert out.index(trace_id(7)) < out.index(trace_id(3))


def test_the_same_seed_gives_the_same_intervals_and_another_seed_other_ones(tmp_path, capsys):
    # Thirty traces: the ten above three times over.
    spans = [scored_root(trace_id(i), METRIC, JUDGE[i % 10]) for i in range(30)]
    scored = write_scored(tmp_path / "scored.jsonl", spans)
    rows = [{"trace_id": trace_id(i), "metric": METRIC, "label": PERSON[i % 10]} for i in range(30)]
    labels = write_labels(tmp_path / "labels.jsonl", rows)
    runs = []
    for seed in ("0", "0", "5"):
        out_json = tmp_path / f"agree-{len(runs)}.json"
        code, _, err = agree(
            str(scored), "--labels", str(labels), "--seed", seed, "--json", str(out_json), capsys=capsys
        )
        assert code == 0, err
        runs.append(results_of(out_json)[0]["kappa"])
    assert runs[0] == runs[1]
    assert runs[0]["estimate"] == runs[2]["estimate"] == pytest.approx(0.4)
    assert runs[0] != runs[2]


def test_the_gate(ten, capsys):
    scored, labels = ten
    code, out, _ = agree(str(scored), "--labels", str(labels), "--min-kappa", "-0.9", capsys=capsys)
    assert code == 0 and "gate passed" in out
    code, out, _ = agree(str(scored), "--labels", str(labels), "--min-kappa", "0.6", capsys=capsys)
    assert code == 1
    assert f"gate failed: {METRIC}" in out and "is below 0.6" in out


def test_a_bad_labels_file_is_reported_by_line_and_exits_2(ten, tmp_path, capsys):
    scored, _ = ten
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"trace_id": trace_id(1), "metric": METRIC, "label": "pass"})
        + "\n"
        + "{not json\n"
        + json.dumps({"trace_id": "xyz", "metric": METRIC, "label": "pass"})
        + "\n\n"
        + json.dumps({"trace_id": trace_id(2), "metric": METRIC, "score": 7, "scale": "1-5"})
        + "\n"
        + json.dumps({"trace_id": trace_id(3), "metric": METRIC})
        + "\n"
        + json.dumps({"trace_id": trace_id(4), "metric": METRIC, "lable": "pass"})
        + "\n",
        encoding="utf-8",
    )
    code, out, err = agree(str(scored), "--labels", str(bad), "--min-kappa", "0", capsys=capsys)
    assert code == 2
    assert f"{bad}:2: not a JSON object" in err
    assert f"{bad}:3: trace_id must be 32 hex digits" in err
    assert f"{bad}:5: score 7 is outside its scale 1-5" in err
    assert f"{bad}:6: give a label, a score, or both" in err
    assert f"{bad}:7: unknown field 'lable'" in err
    assert "Traceback" not in err


def test_csv_labels_read_as_json_lines_do(ten, tmp_path, capsys):
    scored, _ = ten
    rows = ["trace_id,metric,label,annotator,note"] + [
        f'{trace_id(i)},{METRIC},{"yes" if label == "pass" else "no"},alice,"a note, with a comma"'
        for i, label in enumerate(PERSON, start=1)
    ]
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out_json = tmp_path / "agree.json"
    code, _, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = results_of(out_json)
    assert result["kappa"]["estimate"] == pytest.approx(0.4)  # yes/no read as pass/fail
    assert result["disagreements"][0]["note"] == "a note, with a comma"


def test_a_csv_header_with_an_unknown_column_is_named(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text(f"trace_id,metric,verdict\n{trace_id(1)},{METRIC},pass\n", encoding="utf-8")
    problems: list[str] = []
    assert read_labels_file(labels, problems) == []
    assert problems == [
        f"{labels}:1: unknown column 'verdict': the header names columns of "
        "trace_id, span_id, metric, label, score, scale, annotator, note"
    ]


def test_unknown_metric_and_missing_traces_are_named(ten, tmp_path, capsys):
    scored, labels = ten
    more = write_labels(
        tmp_path / "more.jsonl",
        [
            {"trace_id": trace_id(1), "metric": "task_complete", "label": "pass"},
            {"trace_id": trace_id(99), "metric": METRIC, "label": "pass"},
        ],
    )
    code, _, err = agree(str(scored), "--labels", str(labels), "--labels", str(more), capsys=capsys)
    assert code == 2
    assert "metric 'task_complete' (1 label) is on no scored span; the scored files carry: task_completion" in err
    assert "1 label(s) are about traces or spans not in the scored files" in err


def test_no_label_meeting_a_score_exits_2(ten, tmp_path, capsys):
    scored, _ = ten
    labels = write_labels(tmp_path / "l.jsonl", [{"trace_id": trace_id(50), "metric": METRIC, "label": "pass"}])
    code, out, err = agree(str(scored), "--labels", str(labels), capsys=capsys)
    assert code == 2 and out == ""
    assert "no label meets a score on a span" in err


def test_missing_files_and_wrong_usage(tmp_path, ten, capsys):
    scored, labels = ten
    code, _, err = agree(str(scored), "--labels", str(tmp_path / "nope.jsonl"), capsys=capsys)
    assert code == 2 and "nope.jsonl: cannot read: No such file or directory" in err
    code, _, err = agree(str(tmp_path / "gone.jsonl"), "--labels", str(labels), capsys=capsys)
    assert code == 2 and "gone.jsonl: cannot read" in err
    code, _, err = agree(str(scored), capsys=capsys)
    assert code == 2 and "give people's labels" in err
    code, _, err = agree(str(scored), "--labels", str(labels), "--min-kappa", "3", capsys=capsys)
    assert code == 2 and "--min-kappa must be within [-1, 1]" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["agree", str(scored), "--labels", str(labels), "--min-kapa", "0.5"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --min-kapa" in capsys.readouterr().err


def test_people_with_each_other(tmp_path, capsys):
    # Alice and Bob on four traces: alice pass pass fail pass, bob pass fail fail pass. Alice
    # fail/bob fail 1, alice pass/bob fail 1, alice pass/bob pass 2: agreement 3/4, chance
    # (1·2 + 3·2) / 16 = 0.5, κ 0.5.
    scored = write_scored(tmp_path / "s.jsonl", [scored_root(trace_id(i), METRIC, 0.9) for i in range(1, 5)])
    rows = []
    for person, verdicts in (("alice", "ppfp"), ("bob", "pffp")):
        for i, verdict in enumerate(verdicts, start=1):
            rows.append({"trace_id": trace_id(i), "metric": METRIC, "label": verdict, "annotator": person})
    for row in rows:
        row["label"] = {"p": "pass", "f": "fail"}[row["label"]]
    labels = write_labels(tmp_path / "l.jsonl", rows)
    out_json = tmp_path / "a.json"
    code, out, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = results_of(out_json)
    human = result["human_kappa"]
    assert human["estimate"] == pytest.approx(0.5)
    assert (human["items"], human["pairs"]) == (4, 4)
    assert result["n"] == 8  # each person's label is compared with the judge
    assert "people with each other: κ 0.50 [" in out


def test_an_ordinal_scale_gets_a_weighted_kappa_and_spearman(tmp_path, capsys):
    # People 1..5; the judge 0, 0.25, 0.75, 0.75, 1 → points 1, 2, 4, 4, 5. The one miss
    # (3 against 4) costs 1/16; the expected cost is (30 + 15 + 2·15 + 30) / 16 / 5:
    # κw = 1 - 0.0625 / 1.3125 = 20/21. ρ: the judge's ranks 1, 2, 3.5, 3.5, 5 against
    # 1..5: Σdxdy 9.5, Σdx² 10, Σdy² 9.5, ρ = √0.95.
    judge = [0.0, 0.25, 0.75, 0.75, 1.0]
    scored = write_scored(tmp_path / "s.jsonl", [scored_root(trace_id(i), METRIC, s) for i, s in enumerate(judge, 1)])
    labels = write_labels(
        tmp_path / "l.jsonl",
        [{"trace_id": trace_id(i), "metric": METRIC, "score": i, "scale": "1-5"} for i in range(1, 6)],
    )
    out_json = tmp_path / "a.json"
    code, out, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = results_of(out_json)
    assert result["scale"] == "1-5"
    assert result["kappa"]["estimate"] == pytest.approx(20 / 21)
    assert result["kappa_kind"].startswith("quadratic-weighted κ on the 1-5 scale")
    assert result["spearman"]["estimate"] == pytest.approx(math.sqrt(0.95))
    # Classes: people pass from 3 of 5 up (share 0.5 ≥ the threshold), the judge from 0.5.
    assert result["confusion"] == {"fail": {"fail": 2, "pass": 0}, "pass": {"fail": 0, "pass": 3}}
    assert result["scale_confusion"]["3"] == {"1": 0, "2": 0, "3": 0, "4": 1, "5": 0}
    assert result["disagreements"] == []


def test_the_judge_with_itself(tmp_path, capsys):
    # Trials 0.4, 0.6, 0.7 split across the 0.5 threshold; 0.8, 0.9, 0.8 do not. Population
    # standard deviations 0.12472 and 0.04714: mean 0.08593.
    scored = write_scored(
        tmp_path / "s.jsonl",
        [
            scored_root(trace_id(1), METRIC, 0.6, trial_scores="0.4,0.6,0.7"),
            scored_root(trace_id(2), METRIC, 0.8, trial_scores="0.8,0.9,0.8"),
            scored_root(trace_id(3), METRIC, 0.2),
        ],
    )
    labels = write_labels(
        tmp_path / "l.jsonl", [{"trace_id": trace_id(i), "metric": METRIC, "label": "pass"} for i in (1, 2, 3)]
    )
    out_json = tmp_path / "a.json"
    code, out, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    consistency = results_of(out_json)[0]["consistency"]
    assert consistency["items"] == 2 and consistency["trials"] == 3
    assert consistency["split_rate"] == 0.5
    assert consistency["mean_stdev"] == pytest.approx((0.124722 + 0.047140) / 2, abs=1e-5)
    assert "trials split pass/fail on 50% of items" in out


def test_revisions_are_compared_apart(tmp_path, capsys):
    old = [scored_root(trace_id(i), METRIC, 0.9, revision="111111111111") for i in (1, 2)]
    new = [scored_root(trace_id(i), METRIC, 0.1, revision="222222222222", evaluator="bigger") for i in (1, 2)]
    scored = write_scored(tmp_path / "s.jsonl", old)
    rescored = write_scored(tmp_path / "s2.jsonl", new)
    labels = write_labels(
        tmp_path / "l.jsonl", [{"trace_id": trace_id(i), "metric": METRIC, "label": "fail"} for i in (1, 2)]
    )
    out_json = tmp_path / "a.json"
    code, _, err = agree(str(scored), str(rescored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    results = results_of(out_json)
    assert [(r["evaluator"], r["revision"], r["accuracy"]["estimate"]) for r in results] == [
        ("bigger", "222222222222", 1.0),
        ("judge-model", "111111111111", 0.0),
    ]


def test_a_label_on_a_span_meets_the_score_on_that_span(tmp_path, capsys):
    root = scored_root(trace_id(1), METRIC, 0.9, span_id="00000000000000aa")
    child = scored_root(trace_id(1), METRIC, 0.1, span_id="00000000000000bb", name="child")
    child.parent_span_id = bytes.fromhex("00000000000000aa")
    scored = write_scored(tmp_path / "s.jsonl", [child, root])
    labels = write_labels(
        tmp_path / "l.jsonl",
        [
            {"trace_id": trace_id(1), "metric": METRIC, "label": "pass"},  # the root's
            {"trace_id": trace_id(1), "span_id": "00000000000000BB", "metric": METRIC, "label": "pass"},
        ],
    )
    out_json = tmp_path / "a.json"
    assert agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)[0] == 0
    [result] = results_of(out_json)
    assert result["confusion"]["pass"] == {"fail": 1, "pass": 1}
    assert [d["span_id"] for d in result["disagreements"]] == ["00000000000000bb"]


def test_trail_scores_become_labels_through_the_mapping():
    scale, scores = read_mapping(BUILT_IN_MAPPING)
    assert scale == "1-5"
    assert scores == {
        "instruction_adherence": "plan_adherence",
        "plan_opt": "plan_quality",
        "reliability": "task_completion",
    }
    problems: list[str] = []
    path = ROOT / "tests/fixtures/trail/gaia-5.annotations.jsonl"
    labels = read_trail_labels(path, (scale, scores), problems)
    assert problems == []
    assert len(labels) == 15  # five traces, three mapped scores each
    first = json.loads(path.read_text().splitlines()[0])
    by_metric = {label.metric: label for label in labels if label.trace_id == first["trace_id"]}
    assert by_metric["plan_adherence"].score == first["scores"][0]["instruction_adherence_score"]
    assert by_metric["plan_adherence"].scale == Scale(1.0, 5.0)
    assert by_metric["task_completion"].note.startswith("reliability: ")
    assert {label.annotator for label in labels} == {"trail"}


def test_a_bad_trail_line_and_a_bad_mapping(tmp_path, ten, capsys):
    scored, _ = ten
    annotations = tmp_path / "trail.jsonl"
    annotations.write_text(
        json.dumps({"trace_id": trace_id(1), "errors": [], "scores": [{"reliability_score": 9}]})
        + "\n[1, 2]\n"
        + json.dumps({"trace_id": trace_id(2), "errors": [], "scores": [{"reliability_score": 2}]})
        + "\n",
        encoding="utf-8",
    )
    code, out, err = agree(str(scored), "--trail", str(annotations), "--metric", METRIC, capsys=capsys)
    assert code == 2
    assert f"{annotations}:1: score 9 is outside its scale 1-5" in err
    assert f"{annotations}:2: not a TRAIL annotation" in err
    assert "task_completion · judge-model" in out  # the good line was still compared
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("scores: [1, 2]\n", encoding="utf-8")
    code, _, err = agree(str(scored), "--trail", str(annotations), "--trail-mapping", str(mapping), capsys=capsys)
    assert code == 2 and "expected a mapping with `scores:" in err


def test_write_examples_needs_one_metric_and_writes_the_farthest_first(ten, tmp_path, capsys):
    import yaml

    scored, labels = ten
    examples = tmp_path / "examples.yaml"
    code, out, err = agree(
        str(scored), "--labels", str(labels), "--write-examples", str(examples), "--count", "2", capsys=capsys
    )
    assert code == 0, err
    written = yaml.safe_load(examples.read_text())["examples"]
    # The farthest apart of each kind: trace 8 (passed, people failed it), trace 7 (failed,
    # people passed it).
    assert [(e["trace_id"], e["label"], e["reason"]) for e in written] == [
        (trace_id(8), "fail", "note 8"),
        (trace_id(7), "pass", "note 7"),
    ]
    assert all(e["metric"] == METRIC for e in written)
    assert f"{examples} (2 worked examples to review)" in out


def test_a_half_point_makes_the_scale_classes(tmp_path, capsys):
    # 1.5 is no point of 1-5: κ on the pass/fail classes, ρ on the scores; no scale table.
    judge = [0.0, 0.25, 0.75, 1.0]
    scored = write_scored(tmp_path / "s.jsonl", [scored_root(trace_id(i), METRIC, s) for i, s in enumerate(judge, 1)])
    labels = write_labels(
        tmp_path / "l.jsonl",
        [
            {"trace_id": trace_id(i), "metric": METRIC, "score": score, "scale": "1-5"}
            for i, score in enumerate([1.5, 2, 4, 5], 1)
        ],
    )
    out_json = tmp_path / "a.json"
    code, _, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = results_of(out_json)
    assert result["scale"] is None and result["scale_confusion"] is None
    assert result["kappa_kind"] == "Cohen's κ on the labels"
    assert result["kappa"]["estimate"] == pytest.approx(1.0)  # fail fail pass pass on both sides
    assert result["spearman"]["estimate"] == pytest.approx(1.0)


def test_labels_on_spans_meet_a_span_level_metric_s_results_and_one_without_its_roll_up(tmp_path, capsys):
    trace, ids = scored_run()  # span_ok: the plan call 0.2 fail, the answer call 1.0 pass, the root 0.2 fail
    origin = next(iter(trace.spans_by_origin))
    scored = tmp_path / "scored.jsonl"
    scored.write_text(encode_request(ExportTraceServiceRequest(resource_spans=[origin.resource_spans])) + "\n")
    trace_hex = trace.trace_id.hex()
    labels = write_labels(
        tmp_path / "l.jsonl",
        [
            {"trace_id": trace_hex, "span_id": ids["plan"].hex(), "metric": "span_ok", "label": "fail"},
            {"trace_id": trace_hex, "span_id": ids["answer"].hex(), "metric": "span_ok", "label": "fail"},
            {"trace_id": trace_hex, "metric": "span_ok", "label": "fail"},  # the trace's: the root's roll-up
            {"trace_id": trace_hex, "span_id": ids["summary"].hex(), "metric": "span_ok", "label": "pass"},
        ],
    )
    out_json = tmp_path / "a.json"
    code, _, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0
    [result] = results_of(out_json)
    assert result["confusion"]["fail"] == {"fail": 2, "pass": 1}  # people's fail: judged fail twice, pass once
    assert [d["span_id"] for d in result["disagreements"]] == [ids["answer"].hex()]
    assert "1 label(s) are about traces or spans not in the scored files" in err  # the summary call, not scored
