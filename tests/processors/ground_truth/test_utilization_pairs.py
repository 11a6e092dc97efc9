"""The no-judge utilization rule against people: 157 real (tool result, answer) pairs
labelled by reading them (tests/fixtures/utilization/, bench/utilization_rule.py)."""

from __future__ import annotations

from tests.support.utilization_pairs import read_pairs, rule_errors

# What the rule reaches on the pairs (docs/eval-suites.md): 13 of 110 false fails, 13 of
# 47 false passes; on the held-out half, which the rule was not worked on, 8 of 49 and 7
# of 24. The aim, under 5% and at most 10%, is not reached: what is left are outputs that
# print what the agent's own code or request already held, pages whose content the answer
# acts on without naming it, answers that take a common word from a result by chance, and
# answers that acknowledge a failed search and then answer from nowhere. These bounds hold
# the rule to what it reaches; the values alone, before answers reacting to a failed or
# empty result counted, had 26 of 110 false fails (16 of 49 held out).
FALSE_FAIL_BOUND = 0.12
FALSE_PASS_BOUND = 0.28
HELD_OUT_FALSE_FAIL_BOUND = 0.17
HELD_OUT_FALSE_PASS_BOUND = 0.30


def test_the_pairs_are_many_of_both_labels_in_both_halves():
    pairs = read_pairs()
    assert len(pairs) >= 150
    for split in ("dev", "held-out"):
        labels = [p.label for p in pairs if p.split == split]
        assert labels.count("uses") >= 40 and labels.count("does not use") >= 20, split


def test_the_rule_agrees_with_people_within_its_bounds():
    errors = rule_errors(read_pairs())
    assert (errors.uses, errors.not_used) == (110, 47)
    assert errors.false_fail_rate <= FALSE_FAIL_BOUND, errors.false_fails
    assert errors.false_pass_rate <= FALSE_PASS_BOUND, errors.false_passes


def test_the_rule_agrees_with_people_within_its_bounds_on_the_held_out_half():
    errors = rule_errors(p for p in read_pairs() if p.split == "held-out")
    assert (errors.uses, errors.not_used) == (49, 24)
    assert errors.false_fail_rate <= HELD_OUT_FALSE_FAIL_BOUND, errors.false_fails
    assert errors.false_pass_rate <= HELD_OUT_FALSE_PASS_BOUND, errors.false_passes
