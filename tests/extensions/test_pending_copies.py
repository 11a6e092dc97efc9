"""The on-disk copies of traces that left with results to follow: what a reopen gives
back, a trace that left again, a torn record, compaction."""

from __future__ import annotations

import logging

from spanscore.extensions.pending_copies import COMPACT_SLACK, FILE_NAME, PendingCopies, PendingCopy
from tests.support.torn_file import tear_the_end


def opened(directory) -> tuple[PendingCopies, list[PendingCopy]]:
    copies = PendingCopies(directory)
    return copies, copies.open()


def test_a_reopen_gives_back_the_traces_whose_results_had_not_followed_first_left_first(tmp_path):
    copies, kept = opened(tmp_path)
    assert kept == []
    copies.keep(b"a" * 16, ("task_completion", "confidence"), b"spans of a")
    copies.keep(b"b" * 16, ("plan_quality",), b"spans of b")
    copies.keep(b"c" * 16, ("ünïcode metric",), b"")
    copies.done(b"b" * 16)
    copies.done(b"z" * 16)  # never kept: nothing to do
    assert b"a" * 16 in copies and b"b" * 16 not in copies and len(copies) == 2
    copies.close()

    reopened, kept = opened(tmp_path)
    assert kept == [
        PendingCopy(b"a" * 16, ("task_completion", "confidence"), b"spans of a"),
        PendingCopy(b"c" * 16, ("ünïcode metric",), b""),
    ]
    assert reopened.bytes_on_disk == reopened.live_bytes == (tmp_path / FILE_NAME).stat().st_size


def test_a_trace_that_left_again_counts_once_with_its_latest_record(tmp_path):
    copies, _ = opened(tmp_path)
    copies.keep(b"a" * 16, ("first",), b"spans 1")
    copies.keep(b"a" * 16, ("second",), b"spans 2")
    assert len(copies) == 1
    copies.close()
    assert opened(tmp_path)[1] == [PendingCopy(b"a" * 16, ("second",), b"spans 2")]


def test_a_torn_record_at_the_end_is_cut_off_with_a_warning(tmp_path, caplog):
    copies, _ = opened(tmp_path)
    copies.keep(b"a" * 16, ("m",), b"whole")
    copies.keep(b"b" * 16, ("m",), b"torn by the crash")
    copies.close()
    tear_the_end(tmp_path / FILE_NAME)
    with caplog.at_level(logging.WARNING, "spanscore.file_storage"):
        copies, kept = opened(tmp_path)
    assert kept == [PendingCopy(b"a" * 16, ("m",), b"whole")]
    assert "cut off at the end" in caplog.text
    copies.close()
    assert opened(tmp_path)[1] == kept  # and it stays readable


def test_records_done_are_compacted_away_past_twice_the_live_size_and_the_live_ones_kept(tmp_path):
    copies, _ = opened(tmp_path)
    size = 64 << 10
    copies.keep(b"L" * 16, ("lasting",), b"l" * size)  # live across every compaction
    for n in range(40):  # 2.5 MiB written, two records live at a time
        trace_id = n.to_bytes(16, "big")
        copies.keep(trace_id, ("m",), bytes([n]) * size)
        copies.done(trace_id)
    assert copies.live_bytes < copies.bytes_on_disk <= 2 * copies.live_bytes + COMPACT_SLACK + size
    assert copies.bytes_on_disk == (tmp_path / FILE_NAME).stat().st_size
    copies.keep(b"M" * 16, ("after",), b"m")  # appended after a compaction, where it belongs
    copies.close()
    assert opened(tmp_path)[1] == [
        PendingCopy(b"L" * 16, ("lasting",), b"l" * size),
        PendingCopy(b"M" * 16, ("after",), b"m"),
    ]
