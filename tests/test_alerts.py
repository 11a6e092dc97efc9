"""The Prometheus alerting rules in deploy/prometheus: valid, unit-tested, about real metrics.

- `promtool check rules` accepts alerts.yaml and `promtool test rules` passes
  alerts.test.yaml (Debian's prometheus package; skipped without it unless
  SPANSCORE_REQUIRE_PROMETHEUS is set);
- every alert has a unit test where it fires and one where it must not, and carries
  `for`, a severity and a summary and description;
- every metric an expression reads is one spanscore exports: a live spanscore (judge,
  budget, write-ahead log, failure_localization blaming a refused model call) is scraped
  and its names and labels compared;
- a real Prometheus scraping that spanscore loads the rules and evaluates every one
  without error, and the recording rules find the live series.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spanscore.processors.localization.taxonomy import taxonomy
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_client import send
from tests.support.ports import free_port
from tests.support.prometheus_rig import (
    ATTEMPTS,
    SERVICE,
    TRACES_PER_WAVE,
    Prometheus,
    config,
    total,
    unreadable_attempt,
)
from tests.support.running import wait_until
from tests.support.scored_suite import DATASET, attempt

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "deploy" / "prometheus"
ALERTS = RULES_DIR / "alerts.yaml"
ALERTS_TEST = RULES_DIR / "alerts.test.yaml"
PROMTOOL = Path("/usr/bin/promtool")
REQUIRE = "SPANSCORE_REQUIRE_PROMETHEUS"

FAILURE_LABELS = {"eval_failure_category", "eval_failure_group", "service_name", "gen_ai_agent_name"}
TARGET_LABELS = {"job", "instance"}  # Prometheus adds them to every scraped series
KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "inf", "nan"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")
MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")


# --- reading the rule and test files --------------------------------------------------------


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def alerts() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def alert_cases(test_file: dict) -> dict[str, dict[str, int]]:
    """Per alert name: how many alert_rule_test cases expect it to fire and how many expect nothing."""
    cases: dict[str, dict[str, int]] = {}
    for test in test_file["tests"]:
        for case in test.get("alert_rule_test", []):
            counts = cases.setdefault(case["alertname"], {"fires": 0, "quiet": 0})
            counts["fires" if case.get("exp_alerts") else "quiet"] += 1
    return cases


def untested(alert_names: list[str], test_file: dict) -> list[str]:
    """The alerts without both a case where they fire and one where they do not."""
    cases = alert_cases(test_file)
    return [name for name in alert_names if not (cases.get(name, {}).get("fires") and cases.get(name, {}).get("quiet"))]


def selectors(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) a PromQL expression reads; function names are left out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels = {m.group(1) for block in MATCHERS.findall(expr) for m in MATCHER_LABEL.finditer(block)}
    labels |= {label.strip() for group in GROUPING.findall(expr) for label in group.split(",") if label.strip()}
    bare = re.sub(r"\[[^\]]*\]", " ", GROUPING.sub(" ", MATCHERS.sub(" ", expr)))
    names = {m.group(1) for m in IDENTIFIER.finditer(bare) if not m.group(2) and m.group(1).lower() not in KEYWORDS}
    return names, labels


def test_selectors_reads_metrics_and_labels_not_functions():
    names, labels = selectors(
        'sum by (a, b) (rate(x_total{c="d", e=~"f|g"}[1h] offset 1h)) / ignoring(h) lvl:y:rate5m > 0.9 and z'
    )
    assert names == {"x_total", "lvl:y:rate5m", "z"}
    assert labels == {"a", "b", "c", "e", "h"}


# --- promtool -----------------------------------------------------------------------------


@pytest.fixture
def promtool() -> Path:
    if PROMTOOL.is_file():
        return PROMTOOL
    reason = f"{PROMTOOL} not found: install Debian's prometheus package (apt-get install prometheus)"
    if os.environ.get(REQUIRE):
        pytest.fail(f"{reason}; {REQUIRE} is set and requires it")
    pytest.skip(reason)


def run(*command: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=RULES_DIR, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules_accepts_every_rule(promtool):
    result = run(promtool, "check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout, result.stdout


def test_promtool_unit_tests_pass(promtool):
    result = run(promtool, "test", "rules", ALERTS_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout, result.stdout


def test_promtool_unit_tests_catch_a_changed_threshold(promtool, tmp_path):
    """The tests pin the thresholds: 0.9 of the held-spans bound read as 0.5 fails them."""
    text = ALERTS.read_text()
    assert text.count("spanscore_pipeline_held_spans_limit > 0.9") == 1
    changed = text.replace("spanscore_pipeline_held_spans_limit > 0.9", "spanscore_pipeline_held_spans_limit > 0.5")
    (tmp_path / "alerts.yaml").write_text(changed)
    held = [
        t
        for t in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
        if {c["alertname"] for c in t["alert_rule_test"]} == {"SpanscoreHeldSpansNearLimit"}
    ]
    assert len(held) == 2
    (tmp_path / "alerts.test.yaml").write_text(yaml.safe_dump({"rule_files": ["alerts.yaml"], "tests": held}))
    result = subprocess.run(
        [str(promtool), "test", "rules", "alerts.test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "alertname: SpanscoreHeldSpansNearLimit, time: 10m" in output, output


# --- every alert is complete and tested -----------------------------------------------------


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    test_file = yaml.safe_load(ALERTS_TEST.read_text())
    assert test_file["rule_files"] == [ALERTS.name]
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)), f"duplicate alert names: {names}"
    assert not untested(names, test_file), "alerts without a case where they fire and one where they do not"
    unknown = set(alert_cases(test_file)) - set(names)
    assert not unknown, f"unit tests of alerts alerts.yaml does not define: {sorted(unknown)}"


def test_an_alert_added_without_tests_is_caught():
    test_file = yaml.safe_load(ALERTS_TEST.read_text())
    names = [a["alert"] for a in alerts()]
    assert untested([*names, "SpanscoreNew"], test_file) == ["SpanscoreNew"]
    only_firing = {"tests": [t for t in test_file["tests"] if any(c.get("exp_alerts") for c in t["alert_rule_test"])]}
    assert untested(names, only_firing) == names


def test_every_alert_says_how_long_how_bad_and_what():
    for alert in alerts():
        name = alert["alert"]
        assert re.fullmatch(r"Spanscore[A-Z]\w+", name), name
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "")), f"{name}: no for"
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], name
        assert "{{ $labels." in alert["annotations"]["summary"], f"{name}: the summary names no label"


# --- the metrics are spanscore's --------------------------------------------------------------


def test_recording_rules_are_defined_before_use_and_named_level_metric_operation():
    defined: set[str] = set()
    for rule in rules():
        names, _ = selectors(rule["expr"])
        recorded = {n for n in names if ":" in n}
        assert recorded <= defined, f"{rule.get('record') or rule['alert']} reads {sorted(recorded - defined)}"
        if "record" in rule:
            assert re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z0-9_]+", rule["record"]), rule["record"]
            defined.add(rule["record"])


def test_failure_categories_in_the_unit_tests_are_the_taxonomys():
    known = taxonomy()
    for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for series in test["input_series"]:
            if series["series"].startswith("gen_ai_evaluation_failures_total{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', series["series"]))
                category = known[labels["eval_failure_category"]]
                assert labels["eval_failure_group"] == category.group, series["series"]
                assert labels.keys() - TARGET_LABELS == FAILURE_LABELS, series["series"]


@pytest.fixture
def live_spanscore(start_collector, tmp_path):
    """spanscore with the judge metrics (one error each per wave), a judge budget and the
    write-ahead log, its metrics on a free port: a function sending one wave of traces
    and returning the port."""
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    port = free_port()
    with OpenAIServer(handler=schema_judge(score=0.8)) as judge:
        settings = yaml.safe_load(config(dataset, judge.base_url, port, tmp_path / "scored.jsonl"))
        settings["processors"]["judge_metrics"]["judge"]["budget"] = {"requests_per_hour": 10_000}
        settings["extensions"] = {"file_storage": {"directory": str(tmp_path / "storage")}}
        settings["service"]["extensions"] = ["file_storage"]
        collector = start_collector(yaml.safe_dump(settings))
        sent = []

        def wave() -> int:
            for case, city in ATTEMPTS:
                send(collector.grpc_port, attempt(case, city, resource={"service.name": SERVICE}))
            send(collector.grpc_port, unreadable_attempt())
            sent.append(TRACES_PER_WAVE)
            assert wait_until(lambda: collector.pipeline.counts.exported_traces == sum(sent), timeout_s=20)
            return port

        yield wave


def scraped(port: int) -> dict[str, set[str]]:
    """Each sample name of the metrics endpoint with the label names its series carry."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


@pytest.mark.timeout(60)
def test_alerts_read_only_metrics_and_labels_spanscore_exports(live_spanscore):
    exported = scraped(live_spanscore())
    assert "gen_ai_evaluation_results_total" in exported and "spanscore_write_ahead_size_bytes" in exported
    assert exported["gen_ai_evaluation_failures_total"] == FAILURE_LABELS  # the refused model call, blamed
    known = exported
    for rule in rules():
        names, labels = selectors(rule["expr"])
        raw = {n for n in names if ":" not in n}
        what = rule.get("record") or rule["alert"]
        assert raw <= known.keys(), f"{what} reads {sorted(raw - known.keys())}, not among {sorted(exported)}"
        # Grouping labels may come from any series read (or the recorded ones, which keep them).
        available = TARGET_LABELS.union(*(known[n] for n in raw)) if raw else None
        if available is not None:
            assert labels <= available, f"{what} uses labels {sorted(labels - available)} its series lack"


@pytest.mark.timeout(90)
def test_prometheus_evaluates_every_rule_against_a_live_spanscore(prometheus_binary, live_spanscore, tmp_path):
    # The same rules, evaluated every second instead of every minute.
    groups = yaml.safe_load(ALERTS.read_text())
    for group in groups["groups"]:
        group["interval"] = "1s"
    rules_file = tmp_path / "alerts.yaml"
    rules_file.write_text(yaml.safe_dump(groups))
    port = live_spanscore()
    prometheus = Prometheus(prometheus_binary, tmp_path, f"127.0.0.1:{port}", rules=rules_file)
    try:
        assert wait_until(prometheus.ready, timeout_s=15), f"prometheus not ready:\n{prometheus.log_tail()}"
        # Two scraped waves: every counter of the second one moves, so rates are not empty.
        for wave in (1, 2):
            if wave == 2:
                live_spanscore()
            n = wave * TRACES_PER_WAVE
            assert wait_until(
                lambda n=n: total(prometheus, "spanscore_pipeline_exported_traces_total") == n, timeout_s=10
            ), prometheus.log_tail()

        # As Prometheus names them: every metric the rules read.
        names = set(prometheus.get("/api/v1/label/__name__/values"))
        read = {n for rule in rules() for n in selectors(rule["expr"])[0] if ":" not in n}
        assert read <= names, sorted(read - names)

        def evaluated() -> list[dict]:
            found = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
            return found if found and all(r["health"] != "unknown" for r in found) else []

        assert wait_until(lambda: bool(evaluated()), timeout_s=10), prometheus.log_tail()
        assert {r["name"] for r in evaluated()} == {r.get("record") or r["alert"] for r in rules()}
        failing = {r["name"]: r.get("lastError") for r in evaluated() if r["health"] != "ok"}
        assert not failing, failing

        # The recording rules match the live labels: 2 of 3 tool_call_accuracy results pass
        # (Bergen fails the oslo case), and the judge records one error per metric a wave.
        def answer(expr: str) -> dict:
            return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in prometheus.query(expr)}

        pass_ratio = 'metric_agent:gen_ai_evaluation_pass_ratio:rate1h{gen_ai_evaluation_name="tool_call_accuracy"}'
        expected = (("gen_ai_agent_name", "weather"), ("gen_ai_evaluation_name", "tool_call_accuracy"))
        expected += (("__name__", pass_ratio.partition("{")[0]), ("service_name", SERVICE))
        assert wait_until(lambda: answer(pass_ratio), timeout_s=10), prometheus.log_tail()
        assert answer(pass_ratio) == {tuple(sorted(expected)): pytest.approx(2 / 3)}
        error_ratio = 'evaluator_service:gen_ai_evaluation_error_ratio:rate10m{eval_evaluator="judge-test"}'
        assert wait_until(lambda: answer(error_ratio), timeout_s=10), prometheus.log_tail()
        errors = answer(error_ratio)
        assert len(errors) == 1 and 0 < next(iter(errors.values())) < 1, errors
        # The unreadable attempt of each wave (no message content) is an error of every
        # judge metric: a quarter of the judge's results, pending for SpanscoreJudgeErrorRateHigh.
        assert next(iter(errors.values())) == pytest.approx(0.25)
        assert wait_until(lambda: answer("ALERTS"), timeout_s=10), prometheus.log_tail()
        [(labels, _)] = answer("ALERTS").items()
        assert dict(labels) == {
            "__name__": "ALERTS",
            "alertname": "SpanscoreJudgeErrorRateHigh",
            "alertstate": "pending",
            "eval_evaluator": "judge-test",
            "service_name": SERVICE,
            "severity": "warning",
        }
    finally:
        prometheus.stop()
