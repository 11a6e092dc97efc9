"""The Grafana dashboard in deploy/grafana, against a real Prometheus scraping spanscore.

spanscore grades an eval suite (`ground_truth`, case ids as labels) and runs the judge
metrics against the loopback OpenAI server; Debian's Prometheus scrapes its `prometheus`
exporter every second. The score, judge and self-telemetry series must arrive with the
values sent, the dashboard's variable queries must find the service, agent and metric,
and every panel's query, its variables filled in, must return data: a panel showing
"No data" against a live spanscore is a broken panel. The static test checks the
dashboard and provisioning files without Prometheus.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
import yaml

from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_client import send
from tests.support.ports import free_port
from tests.support.prometheus_rig import (
    AGENT,
    ATTEMPTS,
    METRIC,
    SERVICE,
    SPANS_PER_WAVE,
    TRACES_PER_WAVE,
    WAVES,
    Prometheus,
    config,
    total,
    unreadable_attempt,
    values_by,
)
from tests.support.running import wait_until
from tests.support.scored_suite import DATASET, attempt

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "spanscore.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's own variables; `$__all` is the stored value of an "All" selection.
BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms", "__all"}
VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")
LABEL_VALUES = re.compile(r"label_values\((?:(.+),\s*)?(\w+)\)")

METRIC_NAMES_EXPOSED = [
    "gen_ai_evaluation_score_bucket",
    "gen_ai_evaluation_score_sum",
    "gen_ai_evaluation_score_count",
    "gen_ai_evaluation_results_total",
    "gen_ai_evaluation_failures_total",
    "gen_ai_evaluation_judge_calls_total",
    "gen_ai_evaluation_judge_tokens_total",
    "otelcol_receiver_accepted_spans_total",
    "spanscore_receiver_rejected_spans_total",
    "spanscore_receiver_refused_requests_total",
    "spanscore_pipeline_exported_traces_total",
    "spanscore_pipeline_unscored_traces_total",
    "otelcol_exporter_send_failed_spans_total",
    "spanscore_pipeline_held_spans",
    "spanscore_pipeline_held_spans_limit",
]


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def every_panel(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def query_panels(dashboard: dict) -> list[dict]:
    return [p for p in every_panel(dashboard) if p["type"] != "row"]


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def used_variables(node) -> set[str]:
    return {next(g for g in m.groups() if g) for text in strings(node) for m in VARIABLE.finditer(text)}


def substitute(text: str, values: dict[str, str]) -> str:
    """Fill in variables as Grafana would."""

    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        assert name in values, f"${name} in {text!r} has no value here"
        return values[name]

    return VARIABLE.sub(value, text)


def test_dashboard_and_provisioning_files_are_well_formed():
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in every_panel(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    for panel in query_panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        targets = panel.get("targets", [])
        assert targets and all(t.get("expr", "").strip() for t in targets), f"{panel['title']}: a target without expr"
        assert all(t.get("datasource", DATASOURCE) == DATASOURCE for t in targets), panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["service"]["definition"] == "label_values(gen_ai_evaluation_results_total, service_name)"
    assert LABEL_VALUES.fullmatch(variables["agent"]["definition"]).group(2) == "gen_ai_agent_name"
    assert LABEL_VALUES.fullmatch(variables["metric"]["definition"]).group(2) == "gen_ai_evaluation_name"
    for price in ("input_price", "output_price"):
        assert variables[price]["type"] in ("textbox", "custom") and float(variables[price]["query"]) > 0
    undefined = used_variables(dashboard) - set(variables) - BUILTINS
    assert not undefined, f"variables used but not defined: {sorted(undefined)}"
    unused = set(variables) - used_variables(dashboard["panels"]) - used_variables(dashboard["templating"])
    assert not unused, f"variables defined but never used: {sorted(unused)}"

    # The paths the compose file mounts: provisioning at /etc/grafana/provisioning,
    # dashboards at /var/lib/grafana/dashboards.
    [provider] = yaml.safe_load((GRAFANA / "provisioning/dashboards/spanscore.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
    [source] = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"


@pytest.mark.timeout(60)
def test_scores_reach_prometheus_and_every_dashboard_panel_has_data(prometheus_binary, start_collector, tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    metrics_port = free_port()
    with OpenAIServer(handler=schema_judge(score=0.8)) as judge:
        collector = start_collector(config(dataset, judge.base_url, metrics_port, tmp_path / "scored.jsonl"))
        prometheus = Prometheus(prometheus_binary, tmp_path, f"127.0.0.1:{metrics_port}")
        try:
            assert wait_until(prometheus.ready, timeout_s=15), f"prometheus not ready:\n{prometheus.log_tail()}"
            for wave in range(1, WAVES + 1):
                for case, city in ATTEMPTS:
                    send(collector.grpc_port, attempt(case, city, resource={"service.name": SERVICE}))
                send(collector.grpc_port, unreadable_attempt())
                traces = wave * TRACES_PER_WAVE
                assert wait_until(lambda n=traces: collector.pipeline.counts.exported_traces == n)
                # Scored and exported before this scrape: every counter of the wave is in it.
                assert wait_until(
                    lambda n=traces: total(prometheus, "spanscore_pipeline_exported_traces_total") == n, timeout_s=10
                ), prometheus.log_tail()
            check_series(prometheus, collector, judge_calls=len(judge.requests_to("/chat/completions")))
            check_every_panel(prometheus)
        finally:
            prometheus.stop()


def check_series(prometheus: Prometheus, collector, judge_calls: int) -> None:
    """What Prometheus scraped: every name, the suite's verdicts per case, scores, judge usage."""
    names = set(prometheus.get("/api/v1/label/__name__/values"))
    assert not set(METRIC_NAMES_EXPOSED) - names, sorted(n for n in names if not n.startswith(("go_", "net_", "prom")))

    labels = "service_name, gen_ai_agent_name, eval_case_id, gen_ai_evaluation_score_label"
    success = prometheus.query(
        f'sum by ({labels}) (gen_ai_evaluation_results_total{{gen_ai_evaluation_name="success"}})'
    )
    assert values_by(success, *labels.split(", ")) == {
        (SERVICE, AGENT, "oslo", "pass"): WAVES,
        (SERVICE, AGENT, "oslo", "fail"): WAVES,
        (SERVICE, AGENT, "paris", "pass"): WAVES,
    }
    # The unreadable attempt: one error per judge metric, no score observed.
    errors = prometheus.query(
        'sum by (gen_ai_evaluation_name) (gen_ai_evaluation_results_total{gen_ai_evaluation_score_label="error"})'
    )
    assert values_by(errors, "gen_ai_evaluation_name") == {(name,): WAVES for name in METRIC_NAMES}
    # The judge answers 0.8 for every judged attempt: all six land in the (0.7, 0.8] bucket.
    judged = 'gen_ai_evaluation_name="task_completion"'
    assert total(prometheus, f"gen_ai_evaluation_score_count{{{judged}}}") == WAVES * len(ATTEMPTS)
    assert total(prometheus, f"gen_ai_evaluation_score_sum{{{judged}}}") == pytest.approx(0.8 * WAVES * len(ATTEMPTS))
    assert total(prometheus, f'gen_ai_evaluation_score_bucket{{{judged}, le="0.8"}}') == WAVES * len(ATTEMPTS)
    assert total(prometheus, f'gen_ai_evaluation_score_bucket{{{judged}, le="0.7"}}') == 0
    # Each request the loopback judge answered, counted with its usage (120 in, 30 out).
    assert judge_calls >= WAVES * len(ATTEMPTS)  # every wave was judged, none served from a cache
    assert total(prometheus, "gen_ai_evaluation_judge_calls_total") == judge_calls
    tokens = prometheus.query("sum by (gen_ai_token_type) (gen_ai_evaluation_judge_tokens_total)")
    assert values_by(tokens, "gen_ai_token_type") == {("input",): 120 * judge_calls, ("output",): 30 * judge_calls}

    expected = {
        "otelcol_receiver_accepted_spans_total": WAVES * SPANS_PER_WAVE,
        "spanscore_pipeline_exported_traces_total": WAVES * TRACES_PER_WAVE,
        "spanscore_pipeline_unscored_traces_total": 0,
        "spanscore_receiver_rejected_spans_total": 0,
        "spanscore_receiver_refused_requests_total": 0,
        "otelcol_exporter_send_failed_spans_total": 0,
        "spanscore_pipeline_held_spans": 0,
        "spanscore_pipeline_held_spans_limit": collector.pipeline.counts.max_held_spans,
    }
    assert {name: total(prometheus, name) for name in expected} == expected


def variable_values(prometheus: Prometheus, dashboard: dict) -> dict[str, str]:
    """Run the dashboard's label_values queries as Grafana would and pick this test's values."""
    picked = {"service": SERVICE, "agent": AGENT, "metric": METRIC}
    values = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        selector, label = LABEL_VALUES.fullmatch(variable["definition"]).groups()
        found = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": substitute(selector, values)})
        assert picked[variable["name"]] in found, f"${variable['name']}: {variable['definition']} -> {found}"
        values[variable["name"]] = picked[variable["name"]]
    return values


def check_every_panel(prometheus: Prometheus) -> None:
    """Every target of every panel, with concrete values and with "All", returns finite data."""
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    common = {
        "__rate_interval": "1m",
        "__interval": "1m",
        "__range": "1m",
        "input_price": variables["input_price"]["query"],
        "output_price": variables["output_price"]["query"],
    }
    concrete = {**common, **variable_values(prometheus, dashboard)}
    everything = {**common, **{name: variables[name]["allValue"] for name in ("service", "agent", "metric")}}
    pending = {}
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            for selection, values in (("selected", concrete), ("All", everything)):
                key = (panel["id"], panel["title"], target["refId"], selection)
                pending[key] = substitute(target["expr"], values)
    checked, answers = len(pending), {}
    deadline = time.monotonic() + 20  # rate() needs two scrapes of each series
    while pending and time.monotonic() < deadline:
        for key, expr in list(pending.items()):
            answers[key] = {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in prometheus.query(expr)}
            if answers[key] and all(math.isfinite(v) for v in answers[key].values()):
                del pending[key]
        if pending:
            time.sleep(0.5)
    failures = "\n".join(
        f"panel {key[0]} {key[1]!r} {key[2]} ({key[3]}): {expr}\n  -> {answers.get(key)}"
        for key, expr in pending.items()
    )
    assert not pending, f"{len(pending)} of {checked} panel queries returned no (finite) data:\n{failures}"
    assert checked == 2 * sum(len(p["targets"]) for p in query_panels(dashboard))

    # A few panels by value: 4 of 6 attempts succeeded, oslo 2 of 4, paris 2 of 2; the judge
    # was paid for. Window edges make increase() extrapolate, hence the tolerance.
    def only(title: str) -> dict:
        [answer] = [
            a for (_, t, ref, selection), a in answers.items() if (t, ref, selection) == (title, "A", "selected")
        ]
        return answer

    assert list(only("Suite TSR (time range)").values()) == [pytest.approx(2 / 3, rel=0.1)]
    # The unreadable attempt's refused model call, once a wave.
    assert only("Why runs fail") == {
        (("eval_failure_category", "rate_limiting"), ("eval_failure_group", "system_execution")): pytest.approx(
            WAVES, abs=1
        )
    }
    assert only("Pass rate per case") == {
        (("eval_case_id", "oslo"),): pytest.approx(0.5, rel=0.1),
        (("eval_case_id", "paris"),): 1.0,
    }
    assert all(
        v > 0
        for title in ("Judge calls/s", "Judge spend per hour", "Judge spend in time range")
        for v in only(title).values()
    )
