"""The on-disk copies of traces awaiting late spans: what a reopen gives back, a torn
record, the window's end, compaction."""

from __future__ import annotations

import logging

from spanscore.extensions.rescore_copies import COMPACT_SLACK, FILE_NAME, KeptCopy, RescoreCopies
from tests.support.torn_file import tear_the_end

NOW = 1_800_000_000.0  # Unix seconds


def opened(directory, now: float = NOW) -> tuple[RescoreCopies, list[KeptCopy]]:
    copies = RescoreCopies(directory)
    return copies, copies.open(now)


def test_a_reopen_gives_back_each_copy_with_its_late_spans_and_latest_sequence(tmp_path):
    copies, kept = opened(tmp_path)
    assert kept == []
    copies.keep(b"a" * 16, NOW + 600, 1, b"spans of a")
    copies.keep(b"b" * 16, NOW + 600, 1, b"spans of b")
    copies.add(b"a" * 16, 2, b"late 1")
    copies.add(b"a" * 16, 3, b"late 2")
    copies.add(b"c" * 16, 2, b"never kept")  # not kept here: nothing to add to
    copies.forget(b"b" * 16)
    copies.close()

    _, kept = opened(tmp_path)
    assert kept == [KeptCopy(b"a" * 16, NOW + 600, 3, [b"spans of a", b"late 1", b"late 2"])]


def test_copies_past_their_window_are_dropped_at_open_and_the_file_holds_the_rest(tmp_path):
    copies, _ = opened(tmp_path)
    copies.keep(b"a" * 16, NOW + 10, 1, b"x" * 100)
    copies.keep(b"b" * 16, NOW + 1_000, 1, b"y" * 100)
    copies.close()
    reopened, kept = opened(tmp_path, now=NOW + 11)
    assert [copy.trace_id for copy in kept] == [b"b" * 16]
    assert reopened.bytes_on_disk == reopened.live_bytes == (tmp_path / FILE_NAME).stat().st_size
    reopened.close()
    assert opened(tmp_path, now=NOW + 1_000)[1] == []


def test_a_torn_record_at_the_end_is_cut_off_with_a_warning(tmp_path, caplog):
    copies, _ = opened(tmp_path)
    copies.keep(b"a" * 16, NOW + 600, 1, b"whole")
    copies.keep(b"b" * 16, NOW + 600, 1, b"torn by the crash")
    copies.close()
    tear_the_end(tmp_path / FILE_NAME)
    with caplog.at_level(logging.WARNING, "spanscore.file_storage"):
        _, kept = opened(tmp_path)
    assert [(copy.trace_id, copy.parts) for copy in kept] == [(b"a" * 16, [b"whole"])]
    assert "cut off at the end" in caplog.text
    assert opened(tmp_path)[1] == kept  # and it stays readable


def test_forgotten_copies_are_compacted_away_past_twice_the_live_size(tmp_path):
    copies, _ = opened(tmp_path)
    size = 64 << 10
    for n in range(40):  # 2.5 MiB written, one copy live at a time
        trace_id = n.to_bytes(16, "big")
        copies.keep(trace_id, NOW + 600, 1, b"s" * size)
        if copies.wants_compaction:
            copies.compact([KeptCopy(trace_id, NOW + 600, 1, [b"s" * size])])
        copies.forget(trace_id)
    assert copies.bytes_on_disk <= 2 * copies.live_bytes + COMPACT_SLACK + size
    assert copies.bytes_on_disk == (tmp_path / FILE_NAME).stat().st_size
    copies.close()
    assert opened(tmp_path)[1] == []
