"""Trace readiness, timeouts, late spans, invalid ids and session keys, on a hand-held clock."""

from __future__ import annotations

from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from tests.support.spans import kv, new_span_id, new_trace_id, request_of, span


def assembler(**settings) -> Assembler:
    return Assembler(PipelineSettings(**{"trace_wait": 1.0, "trace_timeout": 30.0, **settings}))


def test_trace_is_ready_after_root_and_trace_wait_of_quiet():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "child", parent=root_id)]), now=0.0)
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=0.5)
    assert a.pop_ready(1.4) == []  # 0.9 s quiet
    a.add(request_of([span(trace_id, "late child", parent=root_id)]), now=1.4)
    assert a.pop_ready(2.3) == []  # quiet clock restarted at 1.4
    ready = a.pop_ready(2.4)
    assert [t.trace_id for t in ready] == [trace_id]
    assert ready[0].complete and ready[0].span_count == 3 and ready[0].root.name == "root"
    assert a.buffered_spans == 0 and len(a) == 0


def test_trace_without_root_waits_for_timeout_and_is_marked_incomplete():
    a = assembler(trace_timeout=5.0)
    trace_id = new_trace_id()
    a.add(request_of([span(trace_id, "orphan", parent=new_span_id())]), now=0.0)
    assert a.pop_ready(2.0) == []  # quiet, but no root: parked
    assert a.pop_ready(4.99) == []
    ready = a.pop_ready(5.0)
    assert len(ready) == 1 and not ready[0].complete
    assert ready[0].anchor.name == "orphan"


def test_parked_rootless_trace_becomes_ready_when_its_root_arrives():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "child", parent=root_id)]), now=0.0)
    assert a.pop_ready(3.0) == []
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=3.0)
    assert a.pop_ready(3.9) == []
    assert [t.complete for t in a.pop_ready(4.0)] == [True]


def test_timeout_releases_a_busy_trace_even_with_spans_still_arriving():
    a = assembler(trace_timeout=3.0)
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=0.0)
    for t in (0.5, 1.0, 1.5, 2.0, 2.5):
        a.add(request_of([span(trace_id, "step", parent=root_id)]), now=t)
        assert a.pop_ready(t) == []
    ready = a.pop_ready(3.0)
    assert len(ready) == 1 and ready[0].span_count == 6 and ready[0].complete


def test_span_whose_parent_is_remote_counts_as_the_local_root():
    a = assembler()
    trace_id = new_trace_id()
    local_root = span(trace_id, "agent entry", parent=new_span_id())
    local_root.flags = 0x301  # parent is_remote known and true
    a.add(request_of([local_root]), now=0.0)
    assert [t.complete for t in a.pop_ready(1.0)] == [True]


def test_the_runs_own_root_takes_over_from_a_remote_parented_span_that_came_first():
    # A tool server's span (its parent in the agent's process) is exported before the
    # agent's root: the scores go on the agent's root, not on the tool server's span.
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    tool_server = span(trace_id, "tool server", parent=new_span_id())
    tool_server.flags = 0x301
    a.add(request_of([tool_server]), now=0.0)
    a.add(request_of([span(trace_id, "agent", span_id=root_id)]), now=0.5)
    other_service = span(trace_id, "other service", parent=new_span_id())
    other_service.flags = 0x301
    a.add(request_of([other_service]), now=0.6)
    [ready] = a.pop_ready(2.0)
    assert ready.root.name == "agent" and ready.anchor.name == "agent"


def test_late_spans_of_a_released_trace_form_a_late_trace():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=0.0)
    assert len(a.pop_ready(1.0)) == 1
    a.add(request_of([span(trace_id, "straggler", parent=root_id)]), now=5.0)
    ready = a.pop_ready(6.0)  # no root in it, yet ready after trace_wait: nothing waits for a root twice
    assert len(ready) == 1 and ready[0].late and ready[0].span_count == 1


def test_forwarded_trace_memory_is_bounded():
    a = assembler(forwarded_trace_memory=2)
    ids = [new_trace_id() for _ in range(3)]
    for i, trace_id in enumerate(ids):
        a.add(request_of([span(trace_id, "root")]), now=float(i))
    a.pop_ready(10.0)
    a.add(request_of([span(ids[0], "late"), span(ids[2], "late")]), now=20.0)
    late = {t.trace_id: t.late for t in a.pop_ready(21.0)}
    assert late == {ids[0]: False, ids[2]: True}  # the oldest id was forgotten


def test_spans_with_invalid_ids_are_rejected_and_others_kept():
    a = assembler()
    good = span(new_trace_id(), "good")
    bad_trace = span(b"\x00" * 16, "zero trace id")
    short_span = span(new_trace_id(), "short span id", span_id=b"\x01\x02")
    bad_parent = span(new_trace_id(), "bad parent", parent=b"\x01")
    outcome = a.add(request_of([good, bad_trace, short_span, bad_parent]), now=0.0)
    assert (outcome.accepted, outcome.rejected) == (1, 3)
    assert "invalid trace_id" in outcome.error
    assert a.buffered_spans == 1


def test_spans_of_many_traces_in_one_request_are_grouped():
    a = assembler()
    t1, t2 = new_trace_id(), new_trace_id()
    r1, r2 = new_span_id(), new_span_id()
    a.add(
        request_of(
            [
                span(t1, "root1", span_id=r1),
                span(t2, "root2", span_id=r2),
                span(t1, "c1", parent=r1),
                span(t2, "c2", parent=r2),
                span(t1, "c3", parent=r1),
            ]
        ),
        now=0.0,
    )
    counts = {t.trace_id: t.span_count for t in a.pop_ready(1.0)}
    assert counts == {t1: 3, t2: 2}


def test_pop_all_releases_everything_at_shutdown():
    a = assembler()
    a.add(request_of([span(new_trace_id(), "root"), span(new_trace_id(), "orphan", parent=new_span_id())]), now=0.0)
    released = a.pop_all()
    assert sorted(t.complete for t in released) == [False, True]
    assert a.buffered_spans == 0 and a.next_deadline() is None


def test_next_deadline_tracks_the_earliest_possible_release():
    a = assembler(trace_wait=1.0, trace_timeout=30.0)
    assert a.next_deadline() is None
    a.add(request_of([span(new_trace_id(), "root")]), now=2.0)
    assert a.next_deadline() == 3.0


def test_session_id_key_order_first_found_wins():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    root = span(trace_id, "root", span_id=root_id, attributes={"gen_ai.conversation.id": "conv-9"})
    child = span(trace_id, "child", parent=root_id, attributes={"session.id": "sess-1"})
    a.add(request_of([child, root]), now=0.0)
    [trace] = a.pop_ready(1.0)
    # The root span is read first; within a span the key listed first wins.
    assert a.session_id_of(trace) == "conv-9"
    trace.root.attributes.append(kv("session.id", "sess-root"))
    assert a.session_id_of(trace) == "sess-root"


def test_session_id_from_resource_and_custom_keys():
    a = assembler(session_keys=["my.session"])
    trace_id = new_trace_id()
    a.add(
        request_of(
            [span(trace_id, "root", attributes={"session.id": "ignored"})], resource_attributes={"my.session": 42}
        ),
        now=0.0,
    )
    [trace] = a.pop_ready(1.0)
    assert a.session_id_of(trace) == "42"


def test_no_session_keys_means_no_sessions():
    a = assembler(session_keys=[])
    a.add(request_of([span(new_trace_id(), "root", attributes={"session.id": "s"})]), now=0.0)
    [trace] = a.pop_ready(1.0)
    assert a.session_id_of(trace) is None


def test_a_missing_local_parent_holds_a_trace_with_its_root_until_it_arrives():
    a = assembler()
    trace_id, root_id, parent_id = new_trace_id(), new_span_id(), new_span_id()
    child = span(trace_id, "child", parent=parent_id)
    child.flags = 0x100  # parent is_remote known and false
    a.add(request_of([child, span(trace_id, "root", span_id=root_id)]), now=0.0)
    assert a.pop_ready(10.0) == []  # parked, not rescanned each tick
    assert a.next_deadline() == 30.0  # only the timeout is due
    a.add(request_of([span(trace_id, "parent", parent=root_id, span_id=parent_id)]), now=10.0)
    assert a.pop_ready(10.9) == []
    ready = a.pop_ready(11.0)
    assert [t.span_count for t in ready] == [3]


def test_a_parent_that_arrives_before_its_child_holds_nothing():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=0.0)
    a.add(request_of([span(trace_id, "child", parent=root_id)]), now=0.5)
    assert [t.span_count for t in a.pop_ready(1.5)] == [2]


def test_a_remote_parent_is_not_waited_for_and_wait_for_parents_false_waits_for_none():
    for flags, settings, ready_at in ((0x300, {}, 1.0), (0x100, {"wait_for_parents": False}, 1.0)):
        a = assembler(**settings)
        trace_id = new_trace_id()
        called = span(trace_id, "called", parent=new_span_id())
        called.flags = flags
        a.add(request_of([span(trace_id, "root"), called]), now=0.0)
        assert [t.span_count for t in a.pop_ready(ready_at)] == [2], (flags, settings)


def test_a_trace_never_given_its_parent_goes_at_the_timeout_with_its_root():
    a = assembler(trace_timeout=5.0)
    trace_id = new_trace_id()
    a.add(request_of([span(trace_id, "root"), span(trace_id, "orphan", parent=new_span_id())]), now=0.0)
    assert a.pop_ready(4.99) == []
    ready = a.pop_ready(5.0)
    assert len(ready) == 1 and ready[0].complete and a.buffered_spans == 0


def test_late_spans_are_not_held_for_parents_of_the_released_trace():
    a = assembler()
    trace_id, root_id = new_trace_id(), new_span_id()
    a.add(request_of([span(trace_id, "root", span_id=root_id)]), now=0.0)
    assert len(a.pop_ready(1.0)) == 1
    a.add(request_of([span(trace_id, "straggler", parent=new_span_id())]), now=2.0)
    ready = a.pop_ready(3.0)
    assert len(ready) == 1 and ready[0].late


def test_a_service_wait_holds_the_traces_with_a_span_of_that_service_only():
    a = assembler(trace_wait_by_service={"tool-server": 6.0, "retriever": 2.0})
    slow, slow_root, fast, middle = new_trace_id(), new_span_id(), new_trace_id(), new_trace_id()
    a.add(request_of([span(slow, "root", span_id=slow_root)]), now=0.0)
    a.add(request_of([span(slow, "tools/call", parent=slow_root)], service="tool-server"), now=0.25)
    a.add(request_of([span(middle, "retrieve")], service="retriever"), now=0.5)
    a.add(request_of([span(fast, "root")]), now=0.5)
    # The slow trace heads the idle order; the others are not kept behind it.
    assert a.next_deadline() == 1.5
    assert [t.trace_id for t in a.pop_ready(1.5)] == [fast]
    assert a.next_deadline() == 2.5
    assert [t.trace_id for t in a.pop_ready(2.5)] == [middle]
    assert a.next_deadline() == 6.25
    assert a.pop_ready(6.24) == []
    assert [t.trace_id for t in a.pop_ready(6.25)] == [slow]


def test_a_trace_takes_the_longest_wait_of_its_services_and_keeps_it():
    a = assembler(trace_wait_by_service={"tool-server": 4.0, "retriever": 2.0})
    trace_id = new_trace_id()
    a.add(request_of([span(trace_id, "retrieve")], service="retriever"), now=0.0)
    a.add(request_of([span(trace_id, "tools/call")], service="tool-server"), now=0.25)
    a.add(request_of([span(trace_id, "retrieve")], service="retriever"), now=0.5)
    a.add(request_of([span(trace_id, "root")]), now=0.5)
    assert a.pop_ready(4.49) == []
    assert len(a.pop_ready(4.5)) == 1 and len(a) == 0 and a.next_deadline() is None


def test_a_late_span_of_a_slow_service_is_forwarded_after_trace_wait():
    a = assembler(trace_wait_by_service={"tool-server": 6.0})
    trace_id = new_trace_id()
    a.add(request_of([span(trace_id, "root")]), now=0.0)
    assert len(a.pop_ready(1.0)) == 1
    a.add(request_of([span(trace_id, "tools/call")], service="tool-server"), now=2.0)
    ready = a.pop_ready(3.0)
    assert len(ready) == 1 and ready[0].late
