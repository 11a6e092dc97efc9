"""Config loading: Collector shape, env expansion, every problem reported by key path."""

from __future__ import annotations

import pytest

from spanscore.config.loader import ConfigError, load_config, parse_config
from spanscore.pipeline.settings import PipelineSettings
from tests.support.configs import MINIMAL, problems_of
from tests.support.factories import TEST_FACTORIES


def test_minimal_config_gets_defaults_and_an_implicit_assembler():
    config = parse_config(MINIMAL, environ={})
    assert config.processor_ids == ("assembler",) and config.assembler.id == "assembler" and config.processors == []
    settings = config.pipeline_settings
    assert settings.trace_wait == 1.0 and settings.trace_timeout == 30.0
    assert settings.session_idle == 300.0
    assert settings.session_keys[0] == "session.id"
    receiver = config.receivers[0].config
    assert receiver.protocols.http is None and receiver.protocols.grpc.max_recv_msg_size_mib == 64
    assert config.service.shutdown_timeout == 30.0
    assert config.service.export_reserve == 10.0  # a third of shutdown_timeout


def shutdown(timeout: str, reserve: str | None = None) -> str:
    keys = f"shutdown_timeout: {timeout}" + (f", shutdown_export_reserve: {reserve}" if reserve else "")
    return MINIMAL.rsplit("service:", 1)[0] + (
        f"service: {{{keys}, pipelines: {{traces: {{receivers: [otlp], exporters: [debug]}}}}}}"
    )


def test_the_export_reserve_is_a_third_of_shutdown_timeout_unless_set_within_it():
    assert parse_config(shutdown("6s")).service.export_reserve == 2.0
    assert parse_config(shutdown("6s", "500ms")).service.export_reserve == 0.5
    for reserve in ("6s", "10s", "0s"):
        [problem] = problems_of(shutdown("6s", reserve))
        assert problem == (
            "service.shutdown_export_reserve: must be more than 0 and less than shutdown_timeout (6s) "
            f"(got '{reserve}')"
        )


def test_the_shipped_default_config_is_valid():
    config = load_config("otel-config.yaml")
    assert [c.id for c in config.exporters] == ["file", "debug"]
    assert config.receivers[0].config.protocols.grpc.endpoint == "127.0.0.1:4317"


def test_design_card_keys_are_accepted():
    config = parse_config(
        """
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:4317}
      http: {endpoint: 127.0.0.1:4318}
exporters:
  otlp:     {endpoint: 127.0.0.1:14317, tls: {insecure: true}}
  otlphttp: {endpoint: http://127.0.0.1:14318}
  file:     {path: ./scored.jsonl}
  debug:    {}
service:
  pipelines:
    traces: {receivers: [otlp], processors: [], exporters: [otlp, otlphttp, file, debug]}
""",
        environ={},
    )
    assert [c.type for c in config.exporters] == ["otlp", "otlphttp", "file", "debug"]
    assert config.exporters[1].config.url == "http://127.0.0.1:14318/v1/traces"
    assert config.exporters[0].config.plaintext


def test_env_references_expand_with_types_and_defaults():
    config = parse_config(
        """
receivers:
  otlp:
    protocols:
      http:
        endpoint: ${env:HOST:-127.0.0.1}:${env:PORT}
        max_request_body_size: ${env:LIMIT}
exporters:
  otlp/backend:
    endpoint: ${env:BACKEND}
    tls: {insecure: "${env:PLAIN:-true}"}  # quoted inside flow style; still a bool once expanded
    headers: {x-key: "$${env:NOT_EXPANDED}"}
service: {pipelines: {traces: {receivers: [otlp], exporters: [otlp/backend]}}}
""",
        environ={"PORT": "9999", "LIMIT": "1024", "BACKEND": "tempo:4317"},
    )
    http = config.receivers[0].config.protocols.http
    assert http.endpoint == "127.0.0.1:9999" and http.max_request_body_size == 1024
    exporter = config.exporters[0]
    assert (exporter.id, exporter.type) == ("otlp/backend", "otlp")
    assert exporter.config.tls.insecure is True
    assert exporter.config.headers == {"x-key": "${env:NOT_EXPANDED}"}


def test_every_problem_is_listed_with_its_key_path():
    problems = problems_of("""
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "no-port", max_recv_msg_size_mib: lots}
      htpp: {}
processors:
  assembler: {trace_wait: soon, trace_timeout: 30s}
exporters:
  otlp: {endpoint: 127.0.0.1:4317, tls: {insecure: maybe}}
  file: {}
  kafka: {brokers: [a]}
  debug: {verbosity: loud, colour: true}
service:
  pipelines:
    traces: {receivers: [otlp, zipkin], exporters: [otlp, debug, missing]}
""")
    expected = [
        "receivers.otlp.protocols.grpc.endpoint:",
        "receivers.otlp.protocols.grpc.max_recv_msg_size_mib:",
        "receivers.otlp.protocols.htpp: unknown key",
        "processors.assembler.trace_wait:",
        "exporters.otlp.tls.insecure:",
        "exporters.file.path: Field required",
        "exporters.kafka: unknown exporter type 'kafka'",
        "exporters.debug.verbosity:",
        "exporters.debug.colour: unknown key",
        "service.pipelines.traces.receivers[1]: 'zipkin' is not defined under receivers",
        "service.pipelines.traces.exporters[2]: 'missing' is not defined under exporters",
    ]
    for prefix in expected:
        assert any(p.startswith(prefix) for p in problems), f"no problem starting {prefix!r} in {problems}"
    assert len(problems) == len(expected)


def test_unknown_sections_missing_service_and_unset_env_are_errors():
    problems = problems_of("recievers: {}\nexporters:\n  debug:\n    x: ${env:NOPE}\n")
    assert any(p.startswith("recievers: unknown section") for p in problems)
    assert any(p.startswith("service: missing") for p in problems)
    assert any("exporters.debug.x: environment variable NOPE is not set" in p for p in problems)


def test_pipeline_needs_receivers_and_exporters():
    problems = problems_of("service: {pipelines: {traces: {receivers: [], exporters: []}}}")
    assert any(p.startswith("service.pipelines.traces.receivers:") for p in problems)
    assert any(p.startswith("service.pipelines.traces.exporters:") for p in problems)


def test_assembler_must_come_first_and_timeout_cover_wait():
    base = MINIMAL.replace("exporters: [debug]", "processors: [toy_metric, assembler], exporters: [debug]")

    problems = problems_of(base + "processors: {assembler: {}, toy_metric: {}}\n")
    assert problems == [
        "service.pipelines.traces.processors: the assembler must come first; processors read assembled traces"
    ]
    problems = problems_of(base + "processors: {assembler: {trace_wait: 5s, trace_timeout: 1s}, toy_metric: {}}\n")
    assert any(p.startswith("processors.assembler: trace_timeout must be at least trace_wait") for p in problems)


def test_service_waits_are_checked_at_their_key_path():
    problems = problems_of(
        MINIMAL
        + "processors:\n  assembler:\n    trace_timeout: 30s\n"
        + "    trace_wait_by_service: {tool-server: 1m, retriever: soon, ' ': 2s, agent: 6s}\n"
        + "    wait_for_parents: maybe\n"
    )
    assert problems == [
        "processors.assembler.trace_wait_by_service.retriever: 'soon' is not a duration; "
        "use forms like 1s, 500ms, 2m, 1h30m",
        "processors.assembler.wait_for_parents: Input should be a valid boolean, "
        "unable to interpret input (got 'maybe')",
    ]
    problems = problems_of(
        MINIMAL + "processors: {assembler: {trace_wait_by_service: {tool-server: 1m, ' ': 2s, cache: 100ms}}}\n"
    )
    assert problems == [
        "processors.assembler.trace_wait_by_service.tool-server: must be at most trace_timeout (30s), "
        "which releases every trace first (got '1m')",
        "processors.assembler.trace_wait_by_service. : a service.name cannot be empty",
        "processors.assembler.trace_wait_by_service.cache: must be at least trace_wait (1s): "
        "a service's wait lengthens it (got '100ms')",
    ]
    problems = problems_of(MINIMAL + "processors: {assembler: {trace_wait_by_service: [tool-server]}}\n")
    assert problems == ["processors.assembler.trace_wait_by_service: Input should be a valid dictionary"]


def test_service_waits_parse_as_durations():
    config = PipelineSettings(trace_wait="1s", trace_wait_by_service={"tool-server": "6s", "retriever": "1500ms"})
    assert config.trace_wait_by_service == {"tool-server": 6.0, "retriever": 1.5} and config.wait_for_parents


def test_invalid_yaml_and_wrong_shapes():
    assert "not valid YAML" in problems_of("receivers: [unclosed")[0]
    assert problems_of("- a list")[0].startswith("<root>: expected a mapping")
    assert any(
        p.startswith("exporters: expected a mapping")
        for p in problems_of("exporters: [debug]\n" + MINIMAL.split("\n", 3)[3])
    )


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


STORED = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:4317}}}}}}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:4319, tls: {{insecure: true}}, sending_queue: {{storage: {storage}}}}}
  file: {{path: out.jsonl, sending_queue: {{storage: file_storage}}}}
extensions: {{file_storage: {{directory: /tmp/x}}, health_check: {{}}}}
service:
  extensions: [{listed}]
  pipelines: {{traces: {{receivers: [otlp], exporters: [otlp, file]}}}}
"""


@pytest.mark.parametrize(
    ("storage", "listed", "problem"),
    [
        ("file_storage/other", "file_storage, health_check", "'file_storage/other' is not defined under extensions"),
        ("file_storage", "health_check", "'file_storage' is not listed in service.extensions"),
        ("health_check", "file_storage, health_check", "'health_check' is not a file_storage extension"),
    ],
)
def test_a_sending_queue_storage_must_be_a_started_file_storage(storage, listed, problem):
    with pytest.raises(ConfigError) as error:
        parse_config(STORED.format(storage=storage, listed=listed), factories=TEST_FACTORIES, environ={})
    assert f"exporters.otlp.sending_queue.storage: {problem}" in error.value.problems
    # The file exporter writes files itself: it has no queue to keep in storage.
    assert (
        "exporters.file.sending_queue.storage: exporter 'file' cannot keep its queue in storage; otlp and otlphttp can"
    ) in error.value.problems


# -- every layer in one run: no problem hides another ------------------------------------------


def judged(metrics: str) -> str:
    return MINIMAL.replace("exporters: [debug]", "processors: [judge_metrics], exporters: [debug]") + (
        f"processors: {{judge_metrics: {{metrics: {metrics}}}}}\n"
    )


def test_a_metric_of_your_own_and_the_settings_under_it_are_both_reported():
    known = "task_completion, tool_correctness, argument_correctness, step_efficiency, confidence, "
    assert problems_of(judged("{politeness: {prompt: Be polite, on: llm, tresh: 1}}")) == [
        "processors.judge_metrics.metrics.politeness.output: required with a prompt: binary, score, "
        "{scale: [lo, hi]} or {categories: [...], pass: [...]}",
        "processors.judge_metrics.metrics.politeness.tresh: unknown key",
    ]
    assert problems_of(judged("{task_completion: {threshold: 3}, politeness: {}}")) == [
        "processors.judge_metrics.metrics.task_completion.threshold: Input should be less than or equal to 1 (got 3)",
        f"processors.judge_metrics.metrics.politeness.prompt: politeness is not a built-in judge metric ({known}"
        "plan_adherence, plan_quality); to define your own, give it a prompt and an output",
    ]


def test_an_unknown_key_does_not_hide_the_check_of_the_mapping_it_is_in():
    problems = problems_of(
        MINIMAL.replace(
            "{endpoint: 127.0.0.1:4317}",
            "{endpoint: 127.0.0.1:4317, tls: {cert_file: c.pem, key_file: c.key, bogus: 1}}",
        )
        + "processors: {assembler: {trace_wait: 5s, trace_timeout: 1s, trace_wiat: 1s}}\n"
    )
    assert problems == [
        "receivers.otlp.protocols.grpc.tls.bogus: unknown key",
        "receivers.otlp.protocols.grpc.tls: cert_file 'c.pem' does not exist; key_file 'c.key' does not exist",
        "processors.assembler.trace_wiat: unknown key",
        "processors.assembler: trace_timeout must be at least trace_wait",
    ]


def test_pipeline_references_are_checked_when_other_service_settings_are_invalid():
    service = (
        "service:\n"
        "  shutdown_timeout: soon\n"
        "  telemetry: {logs: {level: loud}}\n"
        "  pipelines: {traces: {receivers: [otlp, zipkin], exporters: [debug], span_event: false}}\n"
    )
    problems = problems_of(MINIMAL.rsplit("service:", 1)[0] + service)
    assert problems == [
        "service.pipelines.traces.span_event: unknown key",
        "service.telemetry.logs.level: String should match pattern '^(?i)(debug|info|warn|warning|error)$' "
        "(got 'loud')",
        "service.shutdown_timeout: 'soon' is not a duration; use forms like 1s, 500ms, 2m, 1h30m",
        "service.pipelines.traces.receivers[1]: 'zipkin' is not defined under receivers",
    ]


def test_the_references_of_a_component_with_an_unknown_key_are_checked():
    problems = problems_of(
        MINIMAL.replace("exporters: [debug]", "processors: [score_router], exporters: [debug]") + "processors:\n"
        "  score_router: {table: [{when: {label: fail}, exporters: [file]}], colour: red}\n"
    )
    assert problems == [
        "processors.score_router.colour: unknown key",
        "processors.score_router: exporter 'file' is not in service.pipelines.traces.exporters",
    ]


def test_an_unset_variable_is_the_one_problem_of_its_setting():
    # What the empty text would add (an endpoint without a host, an empty path) is not listed.
    problems = problems_of(
        MINIMAL.replace("exporters: {debug: {}}", "exporters: {debug: {}, file: {path: '${env:OUT}'}}")
        .replace("[debug]", "[debug, file]")
        .replace("127.0.0.1:4317", "'${env:HOST}:4317'")
        + "processors: {assembler: {trace_wait: soon}}\n"
    )
    assert problems == [
        "receivers.otlp.protocols.grpc.endpoint: environment variable HOST is not set and has no default",
        "exporters.file.path: environment variable OUT is not set and has no default",
        "processors.assembler.trace_wait: 'soon' is not a duration; use forms like 1s, 500ms, 2m, 1h30m",
    ]


def test_where_a_component_is_listed_is_checked_when_its_settings_are_invalid():
    problems = problems_of(
        MINIMAL.replace(
            "exporters: [debug]", "processors: [toy_metric, assembler], exporters: [debug, prometheus]"
        ).replace("exporters: {debug: {}}", "exporters: {debug: {}, prometheus: {endpoint: nowhere}}")
        + "processors: {assembler: {trace_wait: soon}, toy_metric: {}}\n"
    )
    assert [p.split(": ", 1)[0] for p in problems] == [
        "processors.assembler.trace_wait",
        "exporters.prometheus.endpoint",
        "service.pipelines.traces.exporters[1]",
        "service.pipelines.traces.processors",
    ]
    assert problems[2:] == [
        "service.pipelines.traces.exporters[1]: 'prometheus' exports metrics only; list it under "
        "service.pipelines.metrics",
        "service.pipelines.traces.processors: the assembler must come first; processors read assembled traces",
    ]


def test_the_traces_pipeline_is_checked_when_another_pipeline_is_invalid():
    service = (
        "service:\n"
        "  pipelines:\n"
        "    traces: {receivers: [otlp, zipkin], exporters: [debug]}\n"
        "    metrics: {exporters: [debug], export_interval: often}\n"
    )
    assert problems_of(MINIMAL.rsplit("service:", 1)[0] + service) == [
        "service.pipelines.metrics.export_interval: 'often' is not a duration; use forms like 1s, 500ms, 2m, 1h30m",
        "service.pipelines.traces.receivers[1]: 'zipkin' is not defined under receivers",
        "service.pipelines.metrics.exporters[0]: 'debug' cannot export metrics; use prometheus, otlp or otlphttp",
    ]


def test_every_wrong_signal_weight_is_reported():
    config = MINIMAL.replace("exporters: [debug]", "processors: [session_metrics], exporters: [debug]") + (
        "processors: {session_metrics: {weights: {confidnce: 1, coherence: -0.5, tool_correctness: 'high'}}}\n"
    )
    assert problems_of(config) == [
        "processors.session_metrics.weights.confidnce: not a signal; known signals: confidence, loop_detection, "
        "tool_correctness, coherence",
        "processors.session_metrics.weights.coherence: Input should be greater than or equal to 0 (got -0.5)",
        "processors.session_metrics.weights.tool_correctness: Input should be a valid number (got 'high')",
    ]


def test_what_a_config_holds_is_quoted_escaped_and_cut_short():
    long = "x" * 5000
    problems = problems_of(
        MINIMAL.replace("[otlp]", f"[otlp, '{long}']")
        + f"processors: {{assembler: {{trace_wait: '{long}', \"\\e[31mred\": 1}}}}\n"
        + f"extensions:\n  ? '{long}'\n  : {{}}\n"  # an explicit key: a plain one is kept under 1024 characters
    )
    assert len(problems) == 4
    assert all(len(problem) < 600 and "\x1b" not in problem for problem in problems), problems
    assert problems[0].startswith("processors.assembler.trace_wait: 'xxx")
    assert problems[0].endswith("... (5002 characters) is not a duration; use forms like 1s, 500ms, 2m, 1h30m")
    assert problems[1] == "processors.assembler.\\x1b[31mred: unknown key"
    assert problems[2].startswith("extensions.xxx")
    assert "x... (5000 characters): unknown extension type 'xxx" in problems[2]
    assert problems[2].endswith("x... (5002 characters); known: bearertokenauth, file_storage, health_check")
    assert problems[3].endswith("... (5002 characters) is not defined under receivers")


def test_every_tls_file_that_does_not_exist_is_named():
    problems = problems_of(
        MINIMAL.replace("127.0.0.1:4317}", "127.0.0.1:4317, tls: {cert_file: c.pem, key_file: c.key}}")
        .replace(
            "exporters: {debug: {}}",
            "exporters: {debug: {}, otlp: {endpoint: 'h:1', tls: {cert_file: c.pem, ca_file: ca.pem}}}",
        )
        .replace("[debug]", "[debug, otlp]")
    )
    assert problems == [
        "receivers.otlp.protocols.grpc.tls: cert_file 'c.pem' does not exist; key_file 'c.key' does not exist",
        "exporters.otlp.tls: cert_file and key_file go together; ca_file 'ca.pem' does not exist; "
        "cert_file 'c.pem' does not exist",
    ]
