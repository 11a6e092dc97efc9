"""How often the no-judge utilization rule disagrees with people, on labelled pairs.

    python bench/utilization_rule.py [--pairs FILE] [--list]

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
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.processors.ground_truth.result_values import ToolOutcome, answer_utilization  # noqa: E402
from tests.support.utilization_pairs import PAIRS, SPLITS, LabelledPair, read_pairs, rule_errors, rule_says_used  # noqa: E402


def values_found(pair: LabelledPair) -> bool:
    """The word rule alone: a value of the result found, or none to look for."""
    found = answer_utilization(pair.answer, [ToolOutcome(pair.result, pair.known)])
    return bool(found.found) or not found.looked_for


RULES = {"values found, or a failed or empty result reacted to": rule_says_used, "values found only": values_found}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--list", action="store_true", help="print the ids of the pairs the rule gets wrong")
    args = parser.parse_args(argv)
    pairs = read_pairs(args.pairs)
    print(f"{len(pairs)} labelled pairs ({args.pairs.name})")
    for rule, says_used in RULES.items():
        print(f"\n{rule}\n{'pairs':<9} {'false fails':>20} {'false passes':>20}")
        for name in (*SPLITS, "all"):
            errors = rule_errors((p for p in pairs if name in ("all", p.split)), says_used)
            fails = f"{len(errors.false_fails)}/{errors.uses} ({errors.false_fail_rate:.1%})"
            passes = f"{len(errors.false_passes)}/{errors.not_used} ({errors.false_pass_rate:.1%})"
            print(f"{name:<9} {fails:>20} {passes:>20}")
            if args.list and name != "all":
                print(f"  false fails: {list(errors.false_fails)}\n  false passes: {list(errors.false_passes)}")


if __name__ == "__main__":
    main()
