# syntax=docker/dockerfile:1
# spanscore as a container, to run beside an agent:
#   docker build -t spanscore .
#   docker run -p 4317:4317 -p 4318:4318 -p 9464:9464 -p 13133:13133 spanscore
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the build reads: pyproject, the readme it names, the folders its package-dir
# maps, and otel-config.yaml, which src/spanscore/otel-config.yaml (package data) links to.
WORKDIR /build
COPY pyproject.toml README.md otel-config.yaml ./
COPY src/ src/
COPY core/ core/
COPY receivers/ receivers/
COPY processors/ processors/
COPY exporters/ exporters/
COPY extensions/ extensions/
COPY pipeline/ pipeline/
COPY config/ config/
COPY offline/ offline/
COPY collector/ collector/
RUN pip install --no-cache-dir . && rm -rf /build

# A fixed numeric uid, so Kubernetes' runAsNonRoot can check it without a name lookup.
RUN groupadd --system --gid 10001 spanscore \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/spanscore --shell /usr/sbin/nologin spanscore \
 && mkdir -p /var/lib/spanscore \
 && chown spanscore:spanscore /var/lib/spanscore

# Loopback is unreachable from outside a container: listen on every interface. These
# also apply to the built-in default config (`spanscore run` without --config).
ENV SPANSCORE_GRPC_ENDPOINT=0.0.0.0:4317 \
    SPANSCORE_HTTP_ENDPOINT=0.0.0.0:4318 \
    SPANSCORE_PROMETHEUS_ENDPOINT=0.0.0.0:9464 \
    SPANSCORE_HEALTH_ENDPOINT=0.0.0.0:13133 \
    SPANSCORE_OUTPUT=/var/lib/spanscore/scored.jsonl

# The default config (otel-config.yaml) plus the health_check extension that HEALTHCHECK
# and Kubernetes probes call. Mount another file here to replace it.
COPY <<"EOF" /etc/spanscore/config.yaml
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${env:SPANSCORE_GRPC_ENDPOINT:-0.0.0.0:4317}
      http:
        endpoint: ${env:SPANSCORE_HTTP_ENDPOINT:-0.0.0.0:4318}

processors:
  assembler:
    trace_wait: 1s
    trace_timeout: 30s
    session_idle: 5m
    score:
      agent_traces_only: true
  embedding_metrics:
    embedder:
      type: ${env:SPANSCORE_EMBEDDER:-auto}
  rag_metrics:            # faithfulness, context and answer relevance on traces that retrieved, per span
    tool_error:
      enabled: false      # a tool_error score per tool span; off: it would add one per tool call to every trace
    judge:                # judges faithfulness and the relevances when OPENAI_API_KEY is set, else the embedder
      api_key: ${env:OPENAI_API_KEY:-}
      base_url: ${env:OPENAI_BASE_URL:-}
      model: ${env:SPANSCORE_JUDGE_MODEL:-gpt-4.1-mini}
  judge_metrics:          # on when OPENAI_API_KEY is set
    mode: per_metric
    judge:
      api_key: ${env:OPENAI_API_KEY:-}
      base_url: ${env:OPENAI_BASE_URL:-}
      model: ${env:SPANSCORE_JUDGE_MODEL:-gpt-4.1-mini}
  failure_localization:
    when: failed
    judge:
      api_key: ${env:OPENAI_API_KEY:-}
      base_url: ${env:OPENAI_BASE_URL:-}
      model: ${env:SPANSCORE_JUDGE_MODEL:-gpt-4.1-mini}
  session_metrics: {}

exporters:
  file:
    path: ${env:SPANSCORE_OUTPUT:-/var/lib/spanscore/scored.jsonl}
  debug: {}
  prometheus:
    endpoint: ${env:SPANSCORE_PROMETHEUS_ENDPOINT:-0.0.0.0:9464}

extensions:
  health_check:
    endpoint: ${env:SPANSCORE_HEALTH_ENDPOINT:-0.0.0.0:13133}

service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [assembler, embedding_metrics, rag_metrics, judge_metrics, failure_localization, session_metrics]
      exporters: [file, debug]
    metrics:
      exporters: [prometheus]
EOF

# scored.jsonl (the file exporter) lands here; keep it across container restarts.
WORKDIR /var/lib/spanscore
VOLUME /var/lib/spanscore
USER 10001:10001

# OTLP gRPC, OTLP HTTP, Prometheus scrape, health_check.
EXPOSE 4317 4318 9464 13133

# slim has no curl; urlopen raises (exit 1) on a refused connection and on the 503 that
# health_check answers once shutdown began.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:13133/', timeout=4)"]

ENTRYPOINT ["spanscore"]
CMD ["run", "--config", "/etc/spanscore/config.yaml"]
