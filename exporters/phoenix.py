"""`phoenix` exporter: scores as Arize Phoenix annotations.

Phoenix keeps evaluations as annotations, records beside a span or a session that its UI
lists, charts and filters on (`annotations['coherence'].score < 0.5`), apart from the
span's attributes. The scores already travel as `eval.<metric>.*` attributes with the
spans an `otlphttp` exporter sends to Phoenix's `/v1/traces`; this exporter adds them as
annotations. It sends no spans, so it is paired with that `otlphttp` exporter.

Per batch, one `POST <endpoint>/v1/span_annotations` holds an annotation per result of
every trace, on the trace's scored span (its root): name = metric, result = {label,
score, explanation}, annotator_kind LLM (a judge scored it) or CODE (code or an
embedder did, as the pipeline's provenance says), metadata = evaluator, revision and
threshold. A failure_localization finding on another span of the trace (docs/
score-encoding.md, "Findings on other spans") is an annotation on that span: name
`failure_localization`, label = its category, metadata = group, impact, evidence and
source; its identifier names the category, so several on one span stay apart. A
span-level result (docs/score-encoding.md, "Results on other spans") is an annotation
on the span it names, as a trace's result is on the root, which has the metric's
roll-up. Session
results (an `evaluate_session` carrier) go in one
`POST <endpoint>/v1/session_annotations` on the session id, or with
`annotate_sessions: false` on the carrier span as span annotations. The results of a
trace scored again with late spans (an `evaluate_trace` carrier) go on the root span
the carrier links to: same name, same identifier, so Phoenix replaces the first
results with them; each annotation's metadata has the result's `sequence`.

Phoenix ingests spans asynchronously, and the spans come through another exporter, so
an annotation may reach Phoenix before its span: the requests are asynchronous
(Phoenix's default, no `sync=true`), so Phoenix holds such an annotation and retries it
(Phoenix 20: every 10 s, for up to 10 minutes) rather than answering 404. Each annotation has
the identifier `spanscore`, so a resent batch updates the annotations it wrote instead
of adding copies, and leaves alone annotations of the same name from anyone else.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from spanscore.core.attributes import find_attribute
from spanscore.core.component import ComponentFactory
from spanscore.core.evaluation_event import EXPLANATION, evaluation_events
from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import (
    BLAMED_SPAN_IDS,
    FAILURE_CATEGORY,
    FAILURE_DETAILS,
    FAILURE_SOURCE,
    is_session_carrier,
    is_trace_carrier,
    result_keys,
)
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig
from spanscore.exporters.http_client import client_session, post
from spanscore.exporters.tls import TlsClientConfig

log = logging.getLogger("spanscore.exporters.phoenix")

SPAN_ANNOTATIONS_PATH = "/v1/span_annotations"
SESSION_ANNOTATIONS_PATH = "/v1/session_annotations"
IDENTIFIER = "spanscore"
ERROR_LABEL = "error"  # the label of a result with no score, so errors can be filtered on
# Exporters may not import processors (pyproject's layers), so the judge's metric names
# (processors/judge_metrics/rubrics.py) and the embedding metrics' names
# (processors/embedding_metrics.py) are repeated here; tests/e2e/test_phoenix.py
# checks they match.
JUDGE_METRICS = frozenset(
    {
        "task_completion",
        "tool_correctness",
        "argument_correctness",
        "step_efficiency",
        "confidence",
        "plan_adherence",
        "plan_quality",
    }
)
EMBEDDING_METRICS = frozenset({"coherence", "loop_detection"})
CODE_EVALUATOR = "code"  # spanscore.core.provenance.CODE


class PhoenixExporterConfig(ExporterConfig):
    endpoint: str  # Phoenix's base URL, e.g. http://127.0.0.1:6006
    # e.g. authorization: Bearer <api key>; kept out of the config's repr, as the judge's api_key is.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    annotate_sessions: bool = True
    tls: TlsClientConfig = Field(default_factory=TlsClientConfig)

    @model_validator(mode="after")
    def _http_url(self) -> PhoenixExporterConfig:
        # Checked on the whole section, not the field: a field's errors quote its value,
        # and credentials in a URL would be quoted with it.
        parts = urllib.parse.urlsplit(self.endpoint)
        if parts.username is not None or parts.password is not None:
            raise ValueError("endpoint: credentials go in headers (e.g. authorization), not in the URL")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint: {self.endpoint!r} must be an http:// or https:// URL")
        return self

    @property
    def base_url(self) -> str:
        return self.endpoint.rstrip("/")


def annotator_kind(metric: str, evaluator: str | None, kinds: Mapping[str, str] | None = None) -> str:
    """LLM when a language model gave the score, CODE otherwise.

    `kinds` (metric -> kind) holds what the pipeline's provenance says of the metrics it
    scores: an embedder is a model but not a judge, so the embedding metrics, and the RAG
    metrics scored without a judge, are CODE. A metric not in it (scored by another
    collector) goes by `eval.<metric>.evaluator`, which names the judge model, the
    embedder or `code`, and by the embedding metrics' names; spans scored before the
    evaluator was recorded fall back to the judge's metric names.
    """
    if kinds and metric in kinds:
        return kinds[metric]
    if evaluator is None:
        return "LLM" if metric in JUDGE_METRICS else "CODE"
    return "CODE" if evaluator == CODE_EVALUATOR or metric in EMBEDDING_METRICS else "LLM"


def annotation(result: MetricResult, span_attributes: Any, kinds: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields Phoenix's span and session annotations share, for one result (`kinds`:
    `annotator_kind`'s)."""
    keys = result_keys(result.name)
    evaluator = find_attribute(span_attributes, keys.evaluator)
    metadata: dict[str, Any] = {"threshold": result.threshold}
    if evaluator is not None:
        metadata["evaluator"] = evaluator
    revision = find_attribute(span_attributes, keys.revision)
    if revision is not None:
        metadata["revision"] = revision
    sequence = find_attribute(span_attributes, keys.sequence)
    if sequence is not None:
        metadata["sequence"] = sequence
    if result.error is not None:
        metadata["error_type"] = result.error_type or "error"
        outcome = {"label": ERROR_LABEL, "score": None, "explanation": result.error}
    else:
        outcome = {"label": result.label, "score": result.score, "explanation": result.explanation}
    return {
        "name": result.name,
        "annotator_kind": annotator_kind(result.name, evaluator, kinds),
        "result": outcome,
        "metadata": metadata,
        "identifier": IDENTIFIER,
    }


def span_result_annotations(trace: Trace, kinds: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """An annotation per span-level result, on the span it is about (the root has the
    metric's roll-up among the trace's results)."""
    if not trace.span_results:
        return []
    wanted = {result.span_id for result in trace.span_results}
    spans = {hex_id: span for span, _ in trace.spans() if (hex_id := span.span_id.hex()) in wanted}
    return [
        {**annotation(result, spans[result.span_id].attributes, kinds), "span_id": result.span_id}
        for result in trace.span_results
        if result.span_id in spans
    ]


def finding_annotations(trace: Trace, anchor: Any) -> list[dict[str, Any]]:
    """An annotation per finding on the spans the anchor names as blamed."""
    blamed = find_attribute(anchor.attributes, BLAMED_SPAN_IDS)
    if not isinstance(blamed, str) or not blamed:
        return []
    wanted = set(blamed.split(","))
    found = []
    for span, _ in trace.spans():
        span_id = span.span_id.hex()
        if span_id not in wanted:
            continue
        for event in evaluation_events(span):
            category = event.get(FAILURE_CATEGORY)
            if category is None:  # the root's own result event
                continue
            source = event.get(FAILURE_SOURCE)
            metadata = {name: value for name, key in FAILURE_DETAILS.items() if (value := event.get(key)) is not None}
            found.append(
                {
                    "name": event.name or "failure_localization",
                    "annotator_kind": "CODE" if source == "evidence" else "LLM",
                    "result": {
                        "label": category,
                        "score": None,
                        "explanation": event.get(EXPLANATION),
                    },
                    "metadata": metadata,
                    "identifier": f"{IDENTIFIER}:{category}",
                    "span_id": span_id,
                }
            )
    return found


class PhoenixExporter(Exporter):
    config: PhoenixExporterConfig

    kinds: Mapping[str, str] = {}  # annotator kind by metric, from the pipeline's provenance

    def read_provenance(self, provenance: Mapping[str, Provenance]) -> None:
        self.kinds = {metric: "LLM" if source.judged else "CODE" for metric, source in provenance.items()}

    async def open(self) -> None:
        config = self.config
        self._session = client_session(config.base_url, config.tls, config.sending_queue.num_consumers, config.timeout)
        self._headers = {**self.headers, "Content-Type": "application/json"}

    def annotations(self, traces: list[Trace]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The span and the session annotations for `traces`."""
        spans: list[dict[str, Any]] = []
        sessions: list[dict[str, Any]] = []
        for trace in traces:
            anchor = trace.anchor
            if not (trace.results or trace.span_results) or anchor is None:
                continue
            if self.config.annotate_sessions and trace.session_id is not None and is_session_carrier(trace):
                sessions.extend(
                    {**annotation(r, anchor.attributes, self.kinds), "session_id": trace.session_id}
                    for r in trace.results
                )
            elif is_trace_carrier(trace):
                # A re-score: on the root it is linked to, replacing the results there by name.
                span_id = anchor.links[0].span_id.hex() if anchor.links else anchor.span_id.hex()
                spans.extend(
                    {**annotation(r, anchor.attributes, self.kinds), "span_id": span_id} for r in trace.results
                )
            else:
                span_id = anchor.span_id.hex()
                spans.extend(
                    {**annotation(r, anchor.attributes, self.kinds), "span_id": span_id} for r in trace.results
                )
                spans.extend(span_result_annotations(trace, self.kinds))
                spans.extend(finding_annotations(trace, anchor))
        return spans, sessions

    async def send(self, traces: list[Trace]) -> None:
        spans, sessions = self.annotations(traces)
        # A retried batch sends both again: annotations are updated in place by identifier.
        if spans:
            await self._post(SPAN_ANNOTATIONS_PATH, spans)
        if sessions:
            await self._post(SESSION_ANNOTATIONS_PATH, sessions)

    async def _post(self, path: str, data: list[dict[str, Any]]) -> None:
        url = self.config.base_url + path
        body = json.dumps({"data": data}).encode()
        await post(self._session, url, body, self._headers, lambda status: status == 429 or status >= 500)
        log.debug("exporter %s: %d annotations to %s", self.id, len(data), url)

    async def close(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            await session.close()


FACTORY = ComponentFactory("exporter", "phoenix", PhoenixExporterConfig, PhoenixExporter)
