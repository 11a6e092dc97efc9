"""What of a block the judge sees when the block must fit a token budget, and how much that is.

A long agent trace (hundreds of steps, web pages as tool results) does not fit a judge's
input even with every field cut to `max_field_chars`. `fit` shrinks it in a fixed order,
each stage only when the one before was not enough:

1. the per-field limit, bisected down from `max_field_chars` to `FIELD_CHARS_FLOOR`: every
   step stays in view, each shorter;
2. at the floor, whole entries (steps) from the middle: the first and the last are kept,
   then the second and the one before last, and so on while they fit; one marker line
   says how many were left out and their numbers;
3. with only the first and last entries left, the per-field limit again, bisected below
   the floor down to one character.

A block that does not fit even then raises `DoesNotFit`. Every stage is deterministic:
the same trace and budget give the same block, byte for byte. `Coverage` says how much
of the trace's text and steps the block shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spanscore.processors.judge_metrics.prompts import Layout, Rendered, elision_marker, render, render_entry
from spanscore.processors.judge_metrics.token_estimate import estimate_tokens, tokens_of_bytes

# Below this many characters a field says little; past it, leaving whole steps out keeps
# more of what the judge can use than cutting every step shorter.
FIELD_CHARS_FLOOR = 200


class DoesNotFit(Exception):
    """Not even the first and last entries with one-character fields fit the budget."""


@dataclass(frozen=True)
class Coverage:
    """How much of a block's content the judge saw.

    `chars_shown` of `chars_total`: characters of the fields' text (redacted, before any
    cut) shown, of all of them; `steps_shown` of `steps_total`: the entries (steps) in
    view; `field_limit`: the per-field limit it was rendered with; `tokens` and
    `tokens_uncut`: the estimated tokens of the block shown, and of the block with every
    entry and every field cut only to `max_field_chars`.
    """

    chars_shown: int
    chars_total: int
    steps_shown: int
    steps_total: int
    field_limit: int
    tokens: int
    tokens_uncut: int

    @property
    def share(self) -> float:
        """The share of the text shown, 0..1; 1.0 for a block with no text."""
        return self.chars_shown / self.chars_total if self.chars_total else 1.0

    @property
    def complete(self) -> bool:
        return self.chars_shown == self.chars_total and self.steps_shown == self.steps_total


@dataclass(frozen=True)
class View:
    text: str
    coverage: Coverage
    kept: tuple[int, ...] = ()  # the indexes of the entries shown, ascending


def fit(layout: Layout, max_field_chars: int, max_tokens: int | None) -> View:
    """The block as large as `max_tokens` (None: no cap) lets it be, and its coverage."""
    total = layout.chars_total()
    count = len(layout.entries)

    def view(rendered: Rendered, limit: int, kept: Sequence[int], uncut_tokens: int) -> View:
        tokens = estimate_tokens(rendered.text)
        coverage = Coverage(rendered.chars_shown, total, len(kept), count, limit, tokens, uncut_tokens)
        return View(rendered.text, coverage, tuple(kept))

    every = range(count)
    uncut = render(layout, max_field_chars)
    uncut_tokens = estimate_tokens(uncut.text)
    if max_tokens is None or uncut_tokens <= max_tokens:
        return view(uncut, max_field_chars, every, uncut_tokens)

    def fits(rendered: Rendered) -> bool:
        return estimate_tokens(rendered.text) <= max_tokens

    # 1. Shorter fields, every entry kept.
    floor = min(FIELD_CHARS_FLOOR, max_field_chars)
    at_floor = render(layout, floor)
    if fits(at_floor):
        limit = _largest_fitting(floor, max_field_chars, lambda n: fits(render(layout, n)))
        return view(render(layout, limit), limit, every, uncut_tokens)
    # 2. Entries left out from the middle, fields at the floor.
    kept = _ends_that_fit(layout, floor, max_tokens)
    if kept is not None:
        return view(render(layout, floor, kept), floor, kept, uncut_tokens)
    # 3. The first and last entries only, fields below the floor.
    ends = sorted({0, count - 1}) if count else []
    if not fits(render(layout, 1, ends)):
        raise DoesNotFit(
            f"needs {estimate_tokens(render(layout, 1, ends).text):,} tokens with fields cut to 1 character "
            f"and only the first and last {layout.noun}; {max_tokens:,} are left for it"
        )
    limit = _largest_fitting(1, floor, lambda n: fits(render(layout, n, ends)))
    return view(render(layout, limit, ends), limit, ends, uncut_tokens)


def _largest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest limit in [low, high) that fits, by bisection; `low` must fit and `high` not."""
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _ends_that_fit(layout: Layout, limit: int, max_tokens: int) -> list[int] | None:
    """Entry indexes to keep: the first and the last, then inwards from both ends in turn
    while the block still fits; None when not even the first and last fit."""
    entries = layout.entries
    count = len(entries)
    # Sizes add up: the block is its lines joined by newlines, each entry and the marker
    # adding their bytes and one newline, so candidates are sized without rendering them.
    size = len(render(Layout(layout.head, (), layout.tail, layout.noun), limit).text.encode("utf-8"))
    sizes = [len(render_entry(entry, limit).text.encode("utf-8")) + 1 for entry in entries]

    def tokens(size: int, head: int, tail: int) -> int:  # entries [0, head) and [tail, count) kept
        marker = len(elision_marker(layout, entries[head:tail]).encode("utf-8")) + 1 if head < tail else 0
        return tokens_of_bytes(size + marker)

    head, tail = min(1, count), count - 1 if count > 1 else count
    size += sum(sizes[:head]) + sum(sizes[tail:])
    if tokens(size, head, tail) > max_tokens:
        return None
    from_head = True
    while head < tail:
        index = head if from_head else tail - 1
        grown = size + sizes[index]
        new_head, new_tail = (head + 1, tail) if from_head else (head, tail - 1)
        if tokens(grown, new_head, new_tail) > max_tokens:
            break
        size, head, tail, from_head = grown, new_head, new_tail, not from_head
    return [*range(head), *range(tail, count)]
