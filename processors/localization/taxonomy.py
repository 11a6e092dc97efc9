"""The failure categories, read from the package's taxonomy.yaml: 21 leaf categories in
three groups, the same set as the TRAIL benchmark's so its human labels compare."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml

Group = Literal["reasoning", "system_execution", "planning_coordination"]
FoundBy = Literal["evidence", "judge", "both"]


@dataclass(frozen=True)
class Category:
    id: str
    group: Group
    trail: str  # TRAIL's spelling, to read its labels
    found_by: FoundBy
    description: str


@dataclass(frozen=True)
class Taxonomy:
    groups: dict[str, str]  # group id -> what it covers
    categories: dict[str, Category]  # by id, in the file's order

    def __getitem__(self, category_id: str) -> Category:
        return self.categories[category_id]

    def for_judge(self) -> list[Category]:
        """The categories a judge may assign: all of them (evidence-only ones included, as
        a judge reading a run can see a timeout the spans did not mark)."""
        return list(self.categories.values())

    def from_label(self, label: str) -> Category | None:
        """The category a person's or a model's label names, or None.

        Matched as TRAIL's scorer matches: ignoring case, spaces, hyphens and underscores,
        on the id or the TRAIL spelling, then by one containing the other (so "Context
        Handling Failure" and "Tool Selection" find theirs)."""
        wanted = _key(label)
        if not wanted:
            return None
        for category in self.categories.values():
            if wanted in (_key(category.id), _key(category.trail)):
                return category
        for category in self.categories.values():
            names = (_key(category.id), _key(category.trail))
            if any(wanted in name or name in wanted for name in names):
                return category
        return None


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).lower()


@cache
def taxonomy() -> Taxonomy:
    raw = yaml.safe_load(
        resources.files(__name__.rpartition(".")[0]).joinpath("taxonomy.yaml").read_text(encoding="utf-8")
    )
    categories = {entry["id"]: Category(**entry) for entry in raw["categories"]}
    return Taxonomy(groups=dict(raw["groups"]), categories=categories)
