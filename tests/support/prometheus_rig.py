"""A real Prometheus on loopback scraping spanscore, and the suite spanscore is fed for
it: the attempts of a small eval suite (one fails its case), and one agent run recorded
without content whose model call was refused. Shared by the dashboard and alerts tests."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from tests.support.ports import free_port
from tests.support.spans import new_span_id, new_trace_id, request_of, span

PROMETHEUS = Path("/usr/bin/prometheus")

SERVICE, AGENT, METRIC = "weather-agent", "weather", "tool_call_accuracy"  # that metric has passes and fails

ATTEMPTS = (("oslo", "Oslo"), ("oslo", "Bergen"), ("paris", "Paris"))  # Bergen fails the oslo case

WAVES = 2  # the second wave moves every counter, so rate() over the window is not zero

SPANS_PER_WAVE = 2 * len(ATTEMPTS) + 2

TRACES_PER_WAVE = len(ATTEMPTS) + 1


class Prometheus:
    """A Prometheus server on loopback scraping one target every second, data in
    `directory`; with `rules`, evaluating that rule file every second too."""

    def __init__(self, binary: Path, directory: Path, target: str, rules: Path | None = None):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = directory / "prometheus.yml"
        settings = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "spanscore", "static_configs": [{"targets": [target]}]}],
        }
        if rules is not None:
            settings["rule_files"] = [str(rules)]
        config.write_text(yaml.safe_dump(settings))
        self.log = directory / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str, **params) -> object:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:  # a bad query: 400 with Prometheus's reason
            body = json.load(error)
        assert body["status"] == "success", f"{path} {params}: {body.get('error')}"
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
        return data["result"]

    def ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited:\n{self.log_tail()}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])


def values_by(result: list[dict], *labels: str) -> dict:
    return {tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1]) for r in result}


def total(prometheus: Prometheus, expr: str) -> float | None:
    result = prometheus.query(f"sum({expr})")
    return float(result[0]["value"][1]) if result else None


def unreadable_attempt():
    """An agent run recorded without message content: each judge metric records an error.
    Its model call was refused (HTTP 429): failure_localization blames it, rate_limiting."""
    trace_id, root = new_trace_id(), new_span_id()
    chat = span(
        trace_id,
        "chat gpt-4o",
        parent=root,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
    )
    chat.status.code = Status.STATUS_CODE_ERROR
    chat.status.message = "RateLimitError: Error code: 429 - Too Many Requests"
    return request_of(
        [
            span(trace_id, "invoke_agent weather", span_id=root, attributes={"gen_ai.operation.name": "invoke_agent"}),
            chat,
        ],
        service=SERVICE,
    )


def config(dataset: Path, judge_url: str, metrics_port: int, scored: Path) -> str:
    # No judge cache: the second wave asks again, so judge calls and tokens move too.
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
  ground_truth: {{dataset: {dataset}}}
  failure_localization: {{}}
  judge_metrics: {{mode: combined, judge: {{model: judge-test, base_url: '{judge_url}', api_key: test-key,
                   max_retries: 1, initial_backoff: 10ms, max_backoff: 20ms, cache: {{enabled: false}}}}}}
exporters:
  prometheus: {{endpoint: 127.0.0.1:{metrics_port}}}
  file: {{path: {scored}}}
service:
  pipelines:
    traces: {{receivers: [otlp], exporters: [file],
              processors: [assembler, ground_truth, judge_metrics, failure_localization]}}
    metrics: {{exporters: [prometheus], span_attributes: [eval.case.id]}}
"""
