"""`spanscore agree` on judge metrics of your own: the scored file `spanscore score` wrote
with a scripted loopback judge (tests/fixtures/agree_own, README there) against labels
written by reading the runs. Every κ is checked against the hand computation below; the
worked examples it writes are loaded back through the metric's config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanscore.cli import main
from spanscore.processors.judge_metrics.processor import JudgeMetricsConfig
from tests.fixtures.agree_own.make import make
from tests.support.agreement_files import scored_root, trace_id, write_labels, write_scored

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agree_own"
SCORED, LABELS = FIXTURES / "scored.jsonl", FIXTURES / "labels.jsonl"
# Hand computation over the eight runs (people; the scripted judge):
# refund_policy: people F P P P F P P P, judge F P P F P P P P. Agree on 6 of 8 (0.75);
#   both sides fail 2 and pass 6, so chance agreement (2·2 + 6·6) / 64 = 0.625 and
#   κ = (0.75 − 0.625) / (1 − 0.625) = 1/3.
# politeness (1-5, quadratic weights (i − j)² / 16): people 4 5 4 2 4 3 5 1, judge
#   4 4 4 3 5 3 5 2. Observed cost Σ(a − b)² / 16 = 4/16. Expected cost over every pair of
#   a person's and the judge's points, Σ_a Σ_b (a − b)² / 16 / 8 with the points from 0:
#   (8·Σa² + 8·Σb² − 2·Σa·Σb) = 8·64 + 8·68 − 2·20·22 = 176, so 176 / 16 / 8 = 1.375 and
#   κ_w = 1 − 0.25 / 1.375 = 9/11.
# resolution: people R E R A R E R A, judge R E R E R R R A. Agree on 6 of 8 (0.75);
#   margins people R4 E2 A2, judge R5 E2 A1: chance (20 + 4 + 2) / 64, κ = (48 − 26) / (64 − 26)
#   = 11/19.
# reply_kind (categories on each chat span): people A H A R A H A R, judge A H H R A A A H.
#   Agree on runs 1 2 4 5 7, 5 of 8; margins people A4 H2 R2, judge A4 H3 R1: chance
#   (16 + 6 + 2) / 64, κ = (40 − 24) / (64 − 24) = 2/5. Failing (refused): people 4 8, the
#   judge 4: precision 1/1, recall 1/2, F1 2/3.
# politeness and reply_kind are on the chat spans: their labels name the span, and
# politeness's give no `scale` (the span's eval.politeness.scale says 1-5).


def eval_attributes(path: Path) -> dict[tuple[str, str], dict]:
    """Each span's `eval.*` attributes, by trace and span id."""
    found = {}
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    found[(span["traceId"], span["spanId"])] = {
                        a["key"]: a["value"] for a in span["attributes"] if a["key"].startswith("eval.")
                    }
    return found


def test_the_fixture_is_what_spanscore_score_writes(tmp_path):
    done = make(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "traces.jsonl").read_text() == (FIXTURES / "traces.jsonl").read_text()
    assert eval_attributes(tmp_path / "scored.jsonl") == eval_attributes(SCORED)


def agree(*args: str, capsys) -> tuple[int, str, str]:
    code = main(["agree", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def results(tmp_path, capsys, *args: str) -> dict[str, dict]:
    out_json = tmp_path / "agree.json"
    code, out, err = agree(str(SCORED), "--labels", str(LABELS), "--json", str(out_json), *args, capsys=capsys)
    assert code == 0, err
    return {result["metric"]: result for result in json.loads(out_json.read_text())["results"]}


def test_each_output_kind_against_the_hand_computation(tmp_path, capsys):
    by_metric = results(tmp_path, capsys)
    assert sorted(by_metric) == ["politeness", "refund_policy", "reply_kind", "resolution"]
    refund = by_metric["refund_policy"]
    assert refund["evaluator"] == "judge-test" and refund["n"] == 8
    assert refund["kappa_kind"] == "Cohen's κ on the labels"
    assert refund["accuracy"]["estimate"] == pytest.approx(0.75)
    assert refund["kappa"]["estimate"] == pytest.approx(1 / 3)
    assert refund["confusion"] == {"fail": {"fail": 1, "pass": 1}, "pass": {"fail": 1, "pass": 5}}

    polite = by_metric["politeness"]
    assert polite["scale"] == "1-5" and polite["kappa_kind"].startswith("quadratic-weighted κ on the 1-5 scale")
    assert polite["kappa"]["estimate"] == pytest.approx(9 / 11)
    assert polite["scale_confusion"]["4"] == {"1": 0, "2": 0, "3": 0, "4": 2, "5": 1}
    assert polite["spearman"]["estimate"] is not None

    reply_kind = by_metric["reply_kind"]
    assert reply_kind["n"] == 8 and reply_kind["kappa_kind"] == "Cohen's κ on the categories (unweighted)"
    assert reply_kind["accuracy"]["estimate"] == pytest.approx(5 / 8)
    assert reply_kind["kappa"]["estimate"] == pytest.approx(2 / 5)
    assert reply_kind["precision"]["estimate"] == pytest.approx(1.0)
    assert reply_kind["recall"]["estimate"] == pytest.approx(0.5)
    assert reply_kind["f1"]["estimate"] == pytest.approx(2 / 3)
    assert reply_kind["confusion"] == {
        "answered": {"answered": 3, "handed_off": 1, "refused": 0},
        "handed_off": {"answered": 1, "handed_off": 1, "refused": 0},
        "refused": {"answered": 0, "handed_off": 1, "refused": 1},
    }
    # Compared on the spans the labels name, not on the roots' roll-ups.
    assert {(d["span_id"], d["human_label"], d["judge_label"]) for d in reply_kind["disagreements"]} == {
        ("0000000300000002", "answered", "handed_off"),
        ("0000000600000002", "handed_off", "answered"),
        ("0000000800000002", "refused", "handed_off"),
    }

    resolution = by_metric["resolution"]
    assert resolution["kappa_kind"] == "Cohen's κ on the categories (unweighted)"
    assert resolution["accuracy"]["estimate"] == pytest.approx(0.75)
    assert resolution["kappa"]["estimate"] == pytest.approx(11 / 19)
    # The failing categories (escalated, abandoned) as one class: people fail runs 2 4 6 8,
    # the judge 2 4 8: precision 3/3, recall 3/4, F1 2·3 / (3 + 4).
    assert resolution["failing"] == "the failing categories"
    assert resolution["precision"]["estimate"] == pytest.approx(1.0)
    assert resolution["recall"]["estimate"] == pytest.approx(0.75)
    assert resolution["f1"]["estimate"] == pytest.approx(6 / 7)
    assert resolution["confusion"] == {
        "abandoned": {"abandoned": 1, "escalated": 1, "resolved": 0},
        "escalated": {"abandoned": 0, "escalated": 1, "resolved": 1},
        "resolved": {"abandoned": 0, "escalated": 0, "resolved": 4},
    }
    # The escalation the judge called resolved is the farthest apart (a fail it passed).
    first = resolution["disagreements"][0]
    assert (first["trace_id"], first["human_label"], first["judge_label"]) == (f"a9ee{6:028x}", "escalated", "resolved")


def judge_metrics_config(name: str, output, examples: Path, on: str = "trace") -> JudgeMetricsConfig:
    return JudgeMetricsConfig.model_validate(
        {
            "judge": {"model": "judge-test", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"},
            "metrics": {
                name: {"prompt": "Judge this.\n{output}", "output": output, "on": on, "examples": str(examples)}
            },
        }
    )


@pytest.mark.parametrize(
    ("metric", "output", "on", "expected"),
    [
        # The judge passed run 5's refund promise and failed run 4, which promises nothing.
        ("refund_policy", "binary", "trace", [(5, "fail", None), (4, "pass", None)]),
        # Cut at 0.5, only run 4 parts them: people 2 (0.25, fail), the judge 3 (0.5, pass).
        ("politeness", {"scale": [1, 5]}, "llm", [(4, "fail", 0.25)]),
        # Run 6: people escalated (fail), the judge resolved. Run 4: both fail, by two categories.
        (
            "resolution",
            {"categories": ["resolved", "escalated", "abandoned"], "pass": ["resolved"]},
            "trace",
            [(6, "fail", None), (4, "fail", None)],
        ),
    ],
)
def test_written_examples_load_back_through_the_metric_s_config(tmp_path, capsys, metric, output, on, expected):
    examples = tmp_path / f"{metric}.yaml"
    code, out, err = agree(
        str(SCORED), "--labels", str(LABELS), "--metric", metric, "--write-examples", str(examples), capsys=capsys
    )
    assert code == 0, err
    config = judge_metrics_config(metric, output, examples, on)
    items = config.settings(metric).examples.items
    assert [(int(item.trace_id[4:], 16), item.label, item.score) for item in items] == expected
    assert all(item.metric == metric for item in items)
    assert f"{examples} ({len(items)} worked example" in out


def test_a_category_example_names_both_categories_and_keeps_the_person_s_note(tmp_path, capsys):
    examples = tmp_path / "resolution.yaml"
    agree(
        str(SCORED), "--labels", str(LABELS), "--metric", "resolution", "--write-examples", str(examples), capsys=capsys
    )
    first = (
        judge_metrics_config(
            "resolution", {"categories": ["resolved", "escalated", "abandoned"], "pass": ["resolved"]}, examples
        )
        .settings("resolution")
        .examples.items[0]
    )
    assert (
        first.reason == "People's category: escalated. A transfer to a specialist is an escalation, not a resolution."
    )
    assert "Please hold while I transfer you to a specialist." in first.excerpt


def scale_root(n: int, raw: float, *, low: float = 1, high: float = 5):
    span = scored_root(trace_id(n), "tone", (raw - low) / (high - low))
    for key, value in (("raw_score", float(raw)), ("scale", f"{low:g}-{high:g}")):
        attribute = span.attributes.add(key=f"eval.tone.{key}")
        if isinstance(value, float):
            attribute.value.double_value = value
        else:
            attribute.value.string_value = value
    return span


def test_a_score_without_a_scale_is_on_the_metric_s_scale(tmp_path, capsys):
    # People 1 2 3 4 5 against the judge 1 2 3 5 5, given as raw points without `scale`.
    # Points from 0: Σa = 10, Σa² = 30, Σb = 11, Σb² = 37; observed cost 1/16;
    # expected (5·30 + 5·37 − 2·10·11) / 16 / 5 = 115/80; κ_w = 1 − (1/16) / (115/80) = 22/23.
    scored = write_scored(tmp_path / "s.jsonl", [scale_root(n, raw) for n, raw in enumerate([1, 2, 3, 5, 5], 1)])
    rows = [{"trace_id": trace_id(n), "metric": "tone", "score": s} for n, s in enumerate([1, 2, 3, 4, 5], 1)]
    rows.append({"trace_id": trace_id(6), "metric": "tone", "score": 4})  # no such trace scored
    labels = write_labels(tmp_path / "l.jsonl", rows)
    out_json = tmp_path / "a.json"
    code, _, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), capsys=capsys)
    assert code == 0, err
    [result] = json.loads(out_json.read_text())["results"]
    assert result["scale"] == "1-5"
    assert result["kappa"]["estimate"] == pytest.approx(22 / 23)


def test_a_score_off_the_metric_s_scale_is_reported_at_its_line(tmp_path, capsys):
    scored = write_scored(tmp_path / "s.jsonl", [scale_root(n, raw) for n, raw in enumerate([1, 2, 3], 1)])
    rows = [{"trace_id": trace_id(n), "metric": "tone", "score": s} for n, s in enumerate([1, 7, 3], 1)]
    labels = write_labels(tmp_path / "l.jsonl", rows)
    code, out, err = agree(str(scored), "--labels", str(labels), capsys=capsys)
    assert code == 2
    assert f"{labels}:2: score 7 is outside the metric's scale, 1-5: give the row its scale" in err
    assert "tone · judge-model" in out  # the other two were compared


PASSING = {"resolved"}


def category_root(n: int, category: str):
    span = scored_root(trace_id(n), "ending", 1.0 if category in PASSING else 0.0)
    span.attributes.add(key="eval.ending.category").value.string_value = category
    return span


def compare_categories(tmp_path, capsys, judge: list[str], people: list[str], *args: str) -> tuple[dict, str]:
    scored = write_scored(tmp_path / "s.jsonl", [category_root(n, c) for n, c in enumerate(judge, 1)])
    rows = [{"trace_id": trace_id(n), "metric": "ending", "label": c} for n, c in enumerate(people, 1)]
    labels = write_labels(tmp_path / "l.jsonl", rows)
    out_json = tmp_path / "a.json"
    code, out, err = agree(str(scored), "--labels", str(labels), "--json", str(out_json), *args, capsys=capsys)
    assert code == 0, err
    [result] = json.loads(out_json.read_text())["results"]
    return result, out


def test_a_category_the_judge_never_chose(tmp_path, capsys):
    # People R R E A, the judge R E E E: abandoned is never the judge's. Agree on 2 of 4;
    # margins people R2 E1 A1, judge R1 E3 A0: chance (2·1 + 1·3 + 1·0) / 16 = 5/16, so
    # κ = (8/16 − 5/16) / (11/16) = 3/11.
    examples = tmp_path / "ending.yaml"
    result, _ = compare_categories(
        tmp_path,
        capsys,
        ["resolved", "escalated", "escalated", "escalated"],
        ["resolved", "Resolved", "escalated", "abandoned"],  # a category's case is the judge's
        "--write-examples",
        str(examples),
    )
    assert result["kappa"]["estimate"] == pytest.approx(3 / 11)
    assert result["confusion"]["abandoned"] == {"abandoned": 0, "escalated": 1, "resolved": 0}
    assert result["confusion"]["resolved"] == {"abandoned": 0, "escalated": 1, "resolved": 1}
    # No verdict is known for abandoned (the judge never chose it), so trace 4 gives no
    # example; trace 2 (people resolved, a pass the judge failed) does.
    items = (
        judge_metrics_config(
            "ending", {"categories": ["resolved", "escalated", "abandoned"], "pass": ["resolved"]}, examples
        )
        .settings("ending")
        .examples.items
    )
    assert [(item.trace_id, item.label) for item in items] == [(trace_id(2), "pass")]
    assert items[0].reason == "People's category: resolved; the judge's was escalated."


def test_everyone_on_one_category_leaves_kappa_undefined(tmp_path, capsys):
    result, out = compare_categories(tmp_path, capsys, ["resolved"] * 3, ["resolved"] * 3)
    assert result["kappa"] == {"estimate": None, "low": None, "high": None}
    assert result["accuracy"]["estimate"] == 1.0
    assert "κ n/a  (Cohen's κ on the categories (unweighted))" in out


def test_one_item_has_no_interval(tmp_path, capsys):
    # Apart: observed and chance agreement are both 0 (people's only class is not the
    # judge's), so κ = 0, with no interval from one trace.
    result, _ = compare_categories(tmp_path, capsys, ["escalated"], ["abandoned"])
    assert result["n"] == 1 and result["accuracy"] == {"estimate": 0.0, "low": None, "high": None}
    assert result["kappa"] == {"estimate": 0.0, "low": None, "high": None}
    # Agreeing: chance agreement is 1 as well, so κ is undefined.
    result, _ = compare_categories(tmp_path, capsys, ["escalated"], ["escalated"])
    assert result["kappa"]["estimate"] is None and result["accuracy"]["estimate"] == 1.0


def test_a_pass_fail_label_on_a_category_metric_is_read_against_the_judge_s_verdict(tmp_path, capsys):
    # People said pass/fail (spelled yes/no), not a category: compared with the label the
    # metric gave the judge's category. People P F P, judge resolved (P), escalated (F),
    # escalated (F): κ on pass/fail, agree 2 of 3, chance (2·1 + 1·2) / 9, κ = (6 − 4) / (9 − 4).
    result, _ = compare_categories(tmp_path, capsys, ["resolved", "escalated", "escalated"], ["yes", "no", "pass"])
    assert result["kappa_kind"] == "Cohen's κ on the labels"
    assert result["confusion"] == {"fail": {"fail": 1, "pass": 0}, "pass": {"fail": 1, "pass": 1}}
    assert result["kappa"]["estimate"] == pytest.approx(2 / 5)


def test_bad_invocations_say_what_to_do(tmp_path, capsys):
    examples = tmp_path / "examples.yaml"
    code, _, err = agree(str(SCORED), "--labels", str(LABELS), "--write-examples", str(examples), capsys=capsys)
    assert code == 2 and not examples.exists()
    assert "--write-examples writes one metric's examples: give --metric (the labels cover politeness, " in err
    missing = tmp_path / "nowhere.jsonl"
    code, _, err = agree(str(SCORED), "--labels", str(missing), capsys=capsys)
    assert code == 2 and f"{missing}" in err and "No such file" in err
    code, _, err = agree(str(SCORED), "--labels", str(LABELS), "--metric", "refund", capsys=capsys)
    assert code == 2
    assert "no label of metric 'refund' meets a score" in err


def test_the_page_names_the_failing_categories(tmp_path, capsys):
    page = tmp_path / "agree.html"
    code, out, err = agree(
        str(SCORED), "--labels", str(LABELS), "--metric", "resolution", "-o", str(page), capsys=capsys
    )
    assert code == 0, err
    html = page.read_text()
    assert "F1 of the failing categories" in html and "Cohen&#x27;s κ on the categories (unweighted)" in html
