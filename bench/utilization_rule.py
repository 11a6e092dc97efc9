"""How often the no-judge utilization rule disagrees with people, on labelled pairs.

    python bench/utilization_rule.py [--pairs FILE] [--list] [--frontier] [--meaning [--embedder static|minilm]]

The pairs (tests/fixtures/utilization/pairs.jsonl, described in its README) are real tool
results and the agent's next answer, from TRAIL and Who&When traces and the framework
captures of tests/fixtures, each labelled by a person as `uses` / `does not use` the
result. For each, `answer_utilization` is run with that one call (what the agent knew
before it: the question and the call's arguments). Printed, for the rule and for its
values alone (the word rule before answers reacting to a failed or empty result counted),
for the dev half, the held-out half and all pairs:
- false fails: labelled `uses`, the rule says not used (count / labelled uses);
- false passes: labelled `does not use`, the rule says used (count / labelled not used).
`--list` also prints the ids of the pairs the rule gets wrong.

`--frontier` asks whether any threshold on the words' evidence could do better: per
pair, the evidence is how many informative values of the result the answer holds (plus
one when it reacts to a failed or empty result; a result with no value to look for is
always used). Printed per half: how often it ranks a `uses` pair above a `does not use`
pair (ROC area), then for each threshold k (used when the evidence is at least k) the
false fails and false passes, so the whole trade-off is in view, not one point of it.

`--meaning` also measures what the meaning of the texts would add, with the base
install's static embedder (`--embedder minilm`: the full MiniLM model, from the
`minilm` extra): per pair, the margin = the best cosine between a sentence of
the answer and a sentence (or line) of the result, less the best cosine between a
sentence of the answer and one of what the agent had before. Printed: how often it ranks
a `uses` pair above a `does not use` pair (ROC area; 0.5 is chance), the rule's errors
when a margin above t also counts as use, and the time per pair.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.processors.ground_truth.result_values import ToolOutcome, answer_utilization  # noqa: E402
from tests.support.utilization_pairs import (  # noqa: E402
    PAIRS,
    SPLITS,
    LabelledPair,
    RuleErrors,
    read_pairs,
    rule_errors,
    rule_says_used,
)


def values_found(pair: LabelledPair) -> bool:
    """The word rule alone: a value of the result found, or none to look for."""
    found = answer_utilization(pair.answer, [ToolOutcome(pair.result, pair.known)])
    return bool(found.found) or not found.looked_for


RULES = {"values found, or a failed or empty result reacted to": rule_says_used, "values found only": values_found}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--list", action="store_true", help="print the ids of the pairs the rule gets wrong")
    parser.add_argument("--frontier", action="store_true", help="the errors at every threshold on the evidence")
    parser.add_argument("--meaning", action="store_true", help="measure an embedding margin beside the rule")
    parser.add_argument("--embedder", choices=("static", "minilm"), default="static", help="for --meaning")
    args = parser.parse_args(argv)
    pairs = read_pairs(args.pairs)
    print(f"{len(pairs)} labelled pairs ({args.pairs.name})")
    for rule, says_used in RULES.items():
        print(f"\n{rule}\n{'pairs':<9} {'false fails':>20} {'false passes':>20}")
        for name in (*SPLITS, "all"):
            errors = rule_errors((p for p in pairs if name in ("all", p.split)), says_used)
            print(f"{name:<9} {_error_columns(errors)}")
            if args.list and name != "all":
                print(f"  false fails: {list(errors.false_fails)}\n  false passes: {list(errors.false_passes)}")
    if args.frontier:
        frontier(pairs)
    if args.meaning:
        meaning(pairs, args.embedder)


def _error_columns(errors: RuleErrors) -> str:
    """The false fails and false passes, each as count / labelled (rate), in columns."""
    fails = f"{len(errors.false_fails)}/{errors.uses} ({errors.false_fail_rate:.1%})"
    passes = f"{len(errors.false_passes)}/{errors.not_used} ({errors.false_pass_rate:.1%})"
    return f"{fails:>20} {passes:>20}"


def evidence(pair: LabelledPair) -> float:
    """Informative values of the result found in the answer, plus one for a reaction to a
    failed or empty result; infinite when there was no value to look for (always used)."""
    found = answer_utilization(pair.answer, [ToolOutcome(pair.result, pair.known)])
    if not found.looked_for:
        return float("inf")
    return len(set(found.found)) + (1 if found.reaction else 0)


def frontier(pairs: list[LabelledPair]) -> None:
    scores = {pair.id: evidence(pair) for pair in pairs}
    print("\nevidence = values found (+1 for a reaction); used when evidence >= k")
    _print_roc_areas(pairs, scores)
    print(f"{'k':<9} {'pairs':<9} {'false fails':>20} {'false passes':>20}")
    for k in (0, 1, 2, 3, 4, 6):
        for name in (*SPLITS, "all"):
            errors = rule_errors((p for p in pairs if name in ("all", p.split)), lambda p, k=k: scores[p.id] >= k)
            print(f"{k:<9} {name:<9} {_error_columns(errors)}")


def _print_roc_areas(pairs: list[LabelledPair], scores: dict[int, float]) -> None:
    """Per half: how often a `uses` pair scores above a `does not use` pair (ties count half)."""
    for name in (*SPLITS, "all"):
        half = [p for p in pairs if name in ("all", p.split)]
        uses = [scores[p.id] for p in half if p.uses]
        unused = [scores[p.id] for p in half if not p.uses]
        area = sum((u > n) + 0.5 * (u == n) for u in uses for n in unused) / (len(uses) * len(unused))
        print(f"{name:<9} ROC area {area:.2f}")


def _sentences(text: str) -> list[str]:
    """Sentences and lines of at least three words, at most 200."""
    parts = (part.strip() for part in re.split(r"(?<=[.!?])\s+|\n+", text))
    return [part for part in parts if len(re.findall(r"[^\W\d_]{2,}", part)) >= 3][:200]


def meaning(pairs: list[LabelledPair], embedder_name: str) -> None:
    if embedder_name == "minilm":
        from spanscore.processors.embedders.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    else:
        from spanscore.processors.embedders.static import StaticEmbedder

        embedder = StaticEmbedder()
    margins: dict[int, float] = {}
    started = time.perf_counter()
    for pair in pairs:
        answer, result, known = (_sentences(t) for t in (pair.answer, pair.result, pair.known))
        if not (answer and result and known):
            margins[pair.id] = 0.0
            continue
        a, r, k = (embedder.embed_sync(texts) for texts in (answer, result, known))
        margins[pair.id] = float(((a @ r.T).max(axis=1) - (a @ k.T).max(axis=1)).max())
    per_pair = (time.perf_counter() - started) / len(pairs)
    print(f"\nembedding margin ({embedder_name} embedder, {per_pair * 1e6:,.0f} us per pair)")
    _print_roc_areas(pairs, margins)
    print(f"{'rule or margin > t':<20} {'pairs':<9} {'false fails':>20} {'false passes':>20}")
    for threshold in (0.1, 0.2, 0.25, 0.3):
        for name in SPLITS:
            errors = rule_errors(
                (p for p in pairs if p.split == name), lambda p, t=threshold: rule_says_used(p) or margins[p.id] > t
            )
            print(f"t = {threshold:<16} {name:<9} {_error_columns(errors)}")


if __name__ == "__main__":
    main()
