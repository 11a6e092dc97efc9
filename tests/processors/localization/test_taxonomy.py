"""The failure taxonomy as shipped: 21 categories in three groups, each TRAIL spelling read back."""

from __future__ import annotations

from collections import Counter

import pytest

from spanscore.processors.localization.taxonomy import taxonomy


def test_twenty_one_categories_in_three_groups():
    categories = taxonomy().categories
    assert len(categories) == 21
    assert Counter(c.group for c in categories.values()) == {
        "reasoning": 9,
        "system_execution": 8,
        "planning_coordination": 4,
    }
    assert set(taxonomy().groups) == {"reasoning", "system_execution", "planning_coordination"}
    assert all(c.description and c.found_by in ("evidence", "judge", "both") for c in categories.values())


@pytest.mark.parametrize(
    ("label", "category"),
    [
        ("Formatting Errors", "formatting_error"),
        ("Context Handling Failure", "context_handling_failure"),  # upstream's singular
        ("Context Handling Failures", "context_handling_failure"),
        (" Tool Selection", "tool_selection_error"),  # a leading space and a short form
        ("Tool-related", "tool_related_hallucination"),
        ("Language-only", "language_only_hallucination"),
        ("Timeout Issues", "timeout"),
        ("rate_limiting", "rate_limiting"),  # the id itself
        ("Something Else", None),
        ("", None),
    ],
)
def test_labels_are_read_as_trail_spells_them(label, category):
    found = taxonomy().from_label(label)
    assert (found.id if found else None) == category


def test_every_trail_spelling_reads_back_to_its_own_category():
    for category in taxonomy().categories.values():
        assert taxonomy().from_label(category.trail) is category
