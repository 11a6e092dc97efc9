"""The labelled (question, context, answer) triples of tests/fixtures/faithfulness/, and how
the no-judge `faithfulness` metric agrees with their labels.

Each answer was labelled by a person reading it against its context: `faithful` when
every claim of it is stated or implied by the documents, `unfaithful` when some part is
not (the `unsupported` spans say which), with the `kind` of change that made it so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.metrics.faithfulness import DEFAULT_THRESHOLD, faithfulness

TRIPLES = Path(__file__).resolve().parents[1] / "fixtures" / "faithfulness" / "triples.jsonl"
LABELS = ("faithful", "unfaithful")
SPLITS = ("dev", "held-out")
FAITHFUL_KINDS = ("paraphrase", "summary", "combined")
UNFAITHFUL_KINDS = ("number", "date", "name", "negation", "outside", "partial")


@dataclass(frozen=True)
class Triple:
    id: str
    split: str
    label: str
    kind: str
    question: str
    context: tuple[str, ...]  # the documents' texts
    sources: tuple[str, ...]
    answer: str
    unsupported: tuple[str, ...]  # the answer's unsupported spans, quoted

    @property
    def faithful(self) -> bool:
        return self.label == "faithful"


def read_triples(path: Path = TRIPLES) -> list[Triple]:
    triples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            continue
        row = json.loads(line)
        triple = Triple(
            id=row["id"],
            split=row["split"],
            label=row["label"],
            kind=row["kind"],
            question=row["question"],
            context=tuple(document["text"] for document in row["context"]),
            sources=tuple(document["source"] for document in row["context"]),
            answer=row["answer"],
            unsupported=tuple(span["text"] for span in row["unsupported"]),
        )
        kinds = FAITHFUL_KINDS if triple.faithful else UNFAITHFUL_KINDS
        if triple.label not in LABELS or triple.split not in SPLITS or triple.kind not in kinds:
            raise ValueError(
                f"triple {triple.id}: label {triple.label!r} / split {triple.split!r} / kind {triple.kind!r}"
            )
        for span in row["unsupported"]:
            if row["answer"][span["start"] : span["end"]] != span["text"]:
                raise ValueError(f"triple {triple.id}: unsupported span {span} is not the answer's text there")
        if triple.faithful == bool(triple.unsupported):
            raise ValueError(
                f"triple {triple.id}: a {triple.label} answer with {len(triple.unsupported)} unsupported spans"
            )
        triples.append(triple)
    return triples


def scores(triples: Iterable[Triple], embedder: Embedder) -> dict[str, float]:
    """The metric's score of each triple, by id."""
    return {t.id: faithfulness(t.answer, t.context, embedder, question=t.question).score for t in triples}


def roc_area(triples: Sequence[Triple], scored: dict[str, float]) -> float:
    """How often a faithful answer scores above an unfaithful one (ties count half)."""
    faithful = [scored[t.id] for t in triples if t.faithful]
    unfaithful = [scored[t.id] for t in triples if not t.faithful]
    wins = sum((f > u) + 0.5 * (f == u) for f in faithful for u in unfaithful)
    return wins / (len(faithful) * len(unfaithful))


@dataclass(frozen=True)
class Agreement:
    """At a threshold: false fails are faithful answers scored below it, false passes
    unfaithful answers scored at or above it."""

    faithful: int
    false_fails: tuple[str, ...]  # triple ids
    unfaithful: int
    false_passes: tuple[str, ...]

    @property
    def accuracy(self) -> float:
        total = self.faithful + self.unfaithful
        return 1 - (len(self.false_fails) + len(self.false_passes)) / total if total else 0.0


def agreement(triples: Iterable[Triple], scored: dict[str, float], threshold: float = DEFAULT_THRESHOLD) -> Agreement:
    triples = list(triples)
    return Agreement(
        faithful=sum(t.faithful for t in triples),
        false_fails=tuple(t.id for t in triples if t.faithful and scored[t.id] < threshold),
        unfaithful=sum(not t.faithful for t in triples),
        false_passes=tuple(t.id for t in triples if not t.faithful and scored[t.id] >= threshold),
    )
