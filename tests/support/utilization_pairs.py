"""The labelled (tool result, answer) pairs of tests/fixtures/utilization/, and how often
the no-judge utilization rule disagrees with their labels.

Each pair was labelled by a person reading it: `uses` when the answer draws on something
the result holds that the agent did not have before (the question, the call's
arguments), `does not use` when it ignores the result, contradicts it, or answers from
elsewhere. The rule is `answer_utilization` with that one call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spanscore.processors.ground_truth.result_values import ToolOutcome, answer_utilization

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "utilization" / "pairs.jsonl"
LABELS = ("uses", "does not use")
SPLITS = ("dev", "held-out")


@dataclass(frozen=True)
class LabelledPair:
    id: int
    split: str
    label: str
    reason: str
    source: str
    known: str
    result: str
    answer: str

    @property
    def uses(self) -> bool:
        return self.label == "uses"


def read_pairs(path: Path = PAIRS) -> list[LabelledPair]:
    pairs = [LabelledPair(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for pair in pairs:
        if pair.label not in LABELS or pair.split not in SPLITS:
            raise ValueError(f"pair {pair.id}: label {pair.label!r} / split {pair.split!r} not known")
    return pairs


def rule_says_used(pair: LabelledPair) -> bool:
    return answer_utilization(pair.answer, [ToolOutcome(pair.result, pair.known)]).score == 1.0


@dataclass(frozen=True)
class RuleErrors:
    """False fails: labelled `uses`, the rule says not used. False passes: labelled
    `does not use`, the rule says used."""

    uses: int
    false_fails: tuple[int, ...]  # pair ids
    not_used: int
    false_passes: tuple[int, ...]

    @property
    def false_fail_rate(self) -> float:
        return len(self.false_fails) / self.uses if self.uses else 0.0

    @property
    def false_pass_rate(self) -> float:
        return len(self.false_passes) / self.not_used if self.not_used else 0.0


def rule_errors(
    pairs: Iterable[LabelledPair], says_used: Callable[[LabelledPair], bool] = rule_says_used
) -> RuleErrors:
    """How `says_used` (the rule by default) disagrees with the labels of the pairs."""
    pairs = list(pairs)
    used = {pair.id: says_used(pair) for pair in pairs}
    uses: Sequence[LabelledPair] = [p for p in pairs if p.uses]
    not_used: Sequence[LabelledPair] = [p for p in pairs if not p.uses]
    return RuleErrors(
        uses=len(uses),
        false_fails=tuple(p.id for p in uses if not used[p.id]),
        not_used=len(not_used),
        false_passes=tuple(p.id for p in not_used if used[p.id]),
    )
