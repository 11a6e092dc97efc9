"""`spanscore agree --write-examples`: the disagreements most worth teaching the judge, as a
worked-examples file for a person to review and then give the metric (`examples:`).

The most informative disagreements are the farthest apart, taken alternately from the
two ways a judge goes wrong (passing what people failed, failing what they passed) so
the file does not teach it to lean one way. Each example holds an excerpt of the trace
(what the judge is shown of it, fields cut short), the person's verdict and their note
as the reason.

An example's verdict is what `examples:` reads, whatever the metric answers: pass or
fail and a 0..1 score. For a judge metric of your own the answer people gave goes first
in the reason, since the judge answers in it: the category (the verdict the metric gives
that category, as its scored spans show; a category the judge never chose has none
known, so it makes no example) or the value on the metric's scale.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from pathlib import Path

import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.redaction import Redaction
from spanscore.offline.agreement import Compared, Joined, disagreements
from spanscore.offline.human_labels import PASS
from spanscore.offline.otlp_files import read_requests
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import agent_trace_of
from spanscore.processors.judge_metrics.examples import WorkedExample
from spanscore.processors.judge_metrics.prompts import TRACE_CLOSE, TRACE_OPEN, PromptBuilder

EXCERPT_FIELD_CHARS = 400
EXCERPT_CHARS = 3000
# Where the case came from, then what the judge is shown, the verdict and why.
_WRITTEN_ORDER = ("metric", "trace_id", "excerpt", "label", "score", "reason")


class ExamplesError(ValueError):
    pass


def write(path: Path, joined: Joined, args: argparse.Namespace, count: int) -> int:
    """Write up to `count` examples of the one metric compared; how many were written."""
    metrics = sorted({group.metric for group in joined.groups})
    if len(metrics) > 1:
        raise ExamplesError(
            f"--write-examples writes one metric's examples: give --metric (the labels cover {', '.join(metrics)})"
        )
    chosen = most_informative([row for group in joined.groups for row in group.rows], count)
    excerpts = trace_excerpts([Path(f) for f in args.files], {row.judge.trace_id for row in chosen})
    examples = [_example(row, excerpts.get(row.judge.trace_id, "")) for row in chosen]
    header = (
        f"# Worked examples for {metrics[0]}: disagreements between its judge and people, farthest apart\n"
        "# first. Review each one (is the person right? is the excerpt enough to see why?), then\n"
        f"# give the file to the metric: judge_metrics: metrics: {{{metrics[0]}: {{examples: {path.name}}}}}\n"
    )
    body = yaml.safe_dump({"examples": examples}, sort_keys=False, allow_unicode=True, width=100)
    path.write_text(header + body, encoding="utf-8")
    return len(examples)


def most_informative(rows: Sequence[Compared], count: int) -> list[Compared]:
    """Disagreements farthest apart first, alternating between the judge passing what people
    failed and failing what they passed; one per trace."""
    seen: set[str] = set()
    lenient, harsh = [], []
    for row in disagreements(rows):
        if row.judge.trace_id in seen or (row.human_verdict is None and row.human.score is None):
            continue  # an example needs a verdict the judge can give: pass, fail or a score
        seen.add(row.judge.trace_id)
        (lenient if (row.judge.label or row.judge_class) == PASS else harsh).append(row)
    alternated = itertools.chain.from_iterable(itertools.zip_longest(lenient, harsh))
    return [row for row in alternated if row is not None][:count]


def trace_excerpts(paths: Sequence[Path], trace_ids: set[str]) -> dict[str, str]:
    """What the judge is shown of each trace in `trace_ids`, fields cut short."""
    if not trace_ids:
        return {}
    wanted = {bytes.fromhex(t) for t in trace_ids}
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for path in paths:
        for _, request in read_requests(path, []):
            kept = _only(request, wanted)
            if kept is not None:
                assembler.add(kept, 0.0)
    builder = PromptBuilder(Redaction(), EXCERPT_FIELD_CHARS)
    excerpts = {}
    for trace in assembler.pop_all():
        block = builder.data_block(agent_trace_of(trace))
        text = block.removeprefix(TRACE_OPEN).removesuffix(TRACE_CLOSE).strip()
        if len(text) > EXCERPT_CHARS:
            text = f"{text[:EXCERPT_CHARS]}\n[… {len(text) - EXCERPT_CHARS:,} more characters]"
        excerpts[trace.trace_id_hex] = text
    return excerpts


def _only(request: ExportTraceServiceRequest, trace_ids: set[bytes]) -> ExportTraceServiceRequest | None:
    kept = ExportTraceServiceRequest()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = [span for span in scope_spans.spans if span.trace_id in trace_ids]
            if spans:
                out = kept.resource_spans.add(resource=resource_spans.resource)
                out.scope_spans.add(scope=scope_spans.scope).spans.extend(spans)
    return kept if kept.resource_spans else None


def _example(row: Compared, excerpt: str) -> dict:
    """The disagreement as the metric reads it back, its fields in the order a reviewer reads them."""
    person = row.human
    judged = f"the judge scored {row.judge.score:.2f} ({row.judge_class})"
    answer = _answer(row)
    if answer is None:
        reason = person.note or f"People labelled it {row.human_class}; {judged}."
    else:
        reason = f"{answer}. {person.note}" if person.note else f"{answer}; the judge's was {_judge_answer(row)}."
    verdict = row.human_verdict
    example = WorkedExample(
        metric=row.judge.metric,
        trace_id=row.judge.trace_id,
        excerpt=excerpt,
        label=verdict if verdict in ("pass", "fail") else None,
        score=None if person.unit_score is None else round(person.unit_score, 4),
        reason=reason,
    )
    fields = example.model_dump(exclude_none=True)
    return {key: fields[key] for key in _WRITTEN_ORDER if key in fields}


def _answer(row: Compared) -> str | None:
    """People's answer in a metric of your own's terms (its category, its scale), or None."""
    if row.judge.category is not None and row.judge_class == row.judge.category:
        return f"People's category: {row.human_class}"
    if row.judge.scale is not None and row.human.score is not None:
        return f"People's score: {row.human.score:g} on {row.human.scale}"
    return None


def _judge_answer(row: Compared) -> str:
    if row.judge.category is not None and row.judge_class == row.judge.category:
        return row.judge.category
    scale = row.judge.scale
    assert scale is not None
    return f"{scale.low + row.judge.score * (scale.high - scale.low):g}"
