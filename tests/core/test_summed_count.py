"""SummedCount: what happens at the trace rate, said at most once an interval, summed."""

from spanscore.core.once import SummedCount


def test_the_first_report_is_due_at_once_then_once_an_interval_with_the_sum():
    count = SummedCount(60.0)
    assert count.due(0.0) == 0  # nothing counted: nothing to say
    count.add()
    assert count.due(0.0) == 1
    count.add(2)
    count.add()
    assert count.due(59.9) == 0  # within the interval: kept for later
    assert count.due(60.0) == 3
    assert count.due(500.0) == 0
    count.add(5)
    assert count.flush() == 5 and count.flush() == 0  # at a stop, whatever is left
    assert count.total == 9


def test_the_first_is_said_on_its_own_and_the_next_ones_summed_an_interval_later():
    count = SummedCount(60.0)
    assert count.add_first(10.0) is True
    assert count.add_first(11.0) is False and count.add_first(12.0) is False
    assert count.due(69.9) == 0  # the first was said at 10 s: the interval runs from then
    assert count.due(70.0) == 2 and count.total == 3
