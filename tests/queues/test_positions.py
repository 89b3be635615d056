"""stream: one reader's view of a stream's positions (queues.positions), walked
through step by step in the style of Synapse's id generator tests: each step
is an arrival, a log lookup's answer or a give-up, followed by what the
reader now says (`current`, what was handed on, `missing()`, `held`,
`waiting_since`, the counters)."""

from __future__ import annotations

import itertools

import pytest

from queues.positions import PositionReader


def _counters(reader: PositionReader[str]) -> dict[str, int]:
    return {
        "duplicates": reader.duplicates,
        "late_arrivals": reader.late_arrivals,
        "aborted": reader.aborted,
        "given_up": reader.given_up,
    }


NO_COUNTS = {"duplicates": 0, "late_arrivals": 0, "aborted": 0, "given_up": 0}


# -- arrival order ------------------------------------------------------------


def test_in_order_arrivals_are_handed_on_at_once():
    reader: PositionReader[str] = PositionReader()
    assert reader.current == 0
    assert reader.waiting_since is None

    for position in (1, 2, 3):
        assert reader.offer(position, f"e{position}", float(position)) == [
            (position, f"e{position}")
        ]
        assert reader.current == position
        assert reader.held == 0
        assert reader.missing() == []
        assert reader.waiting_since is None

    assert _counters(reader) == NO_COUNTS
    assert reader.late() == []


def test_synapse_table_example():
    """The single-writer example of Synapse's stream ids: the stream starts at 1;
    2 and 3 are reserved, 3 completes first, then 2; 4, 5, 6 are reserved and
    5 completes before 4, then 6."""
    reader: PositionReader[str] = PositionReader(1)

    # Complete 3: current unchanged, waiting for 2.
    assert reader.offer(3, "e3", 10.0) == []
    assert reader.current == 1
    assert reader.held == 1
    assert reader.missing() == [2]
    assert reader.waiting_since == 10.0

    # Complete 2: current jumps 1 -> 3.
    assert reader.offer(2, "e2", 11.0) == [(2, "e2"), (3, "e3")]
    assert reader.current == 3
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None

    # Complete 5: unchanged, waiting for 4.
    assert reader.offer(5, "e5", 12.0) == []
    assert reader.current == 3
    assert reader.missing() == [4]
    assert reader.waiting_since == 12.0

    # Complete 4: current jumps 3 -> 5 even though 6 is pending.
    assert reader.offer(4, "e4", 13.0) == [(4, "e4"), (5, "e5")]
    assert reader.current == 5
    assert reader.waiting_since is None

    # Complete 6.
    assert reader.offer(6, "e6", 14.0) == [(6, "e6")]
    assert reader.current == 6
    assert reader.held == 0
    assert _counters(reader) == NO_COUNTS


def test_two_writers_committing_out_of_allocation_order():
    """Writer A reserves 1, writer B reserves 2 and 3; B's 3 commits first,
    then A's 1, then B's 2: the events go on in 1, 2, 3 order."""
    reader: PositionReader[str] = PositionReader()

    assert reader.offer(3, "b3", 1.0) == []
    assert reader.current == 0
    assert reader.held == 1
    assert reader.missing() == [1, 2]
    assert reader.waiting_since == 1.0

    # 1 goes on alone: 2 is still a gap below the held 3.
    assert reader.offer(1, "a1", 2.0) == [(1, "a1")]
    assert reader.current == 1
    assert reader.held == 1
    assert reader.missing() == [2]

    assert reader.offer(2, "b2", 3.0) == [(2, "b2"), (3, "b3")]
    assert reader.current == 3
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None
    assert _counters(reader) == NO_COUNTS


def test_every_arrival_order_is_released_in_position_order():
    positions = range(1, 6)
    for order in itertools.permutations(positions):
        reader: PositionReader[str] = PositionReader()
        released: list[tuple[int, str]] = []
        for step, position in enumerate(order):
            released += reader.offer(position, f"e{position}", float(step))
            # `current` is always the length of the contiguous prefix seen.
            assert reader.current == len(released)
        assert released == [(p, f"e{p}") for p in positions], order
        assert reader.held == 0
        assert reader.waiting_since is None
        assert _counters(reader) == NO_COUNTS


# -- a stalled writer ------------------------------------------------------------


def test_stalled_writer_holds_later_positions():
    """Writer A holds 2 in an open transaction; writer B commits 3, 4, 5."""
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(1, "a1", 1.0) == [(1, "a1")]
    assert reader.waiting_since is None

    # The gap at 2 begins when 3 arrives.
    assert reader.offer(3, "b3", 2.0) == []
    assert reader.waiting_since == 2.0
    assert reader.missing() == [2]

    # Further arrivals above the same gap do not restart the wait.
    assert reader.offer(4, "b4", 3.0) == []
    assert reader.offer(5, "b5", 4.0) == []
    assert reader.current == 1
    assert reader.held == 3
    assert reader.missing() == [2]
    assert reader.waiting_since == 2.0

    # A finally commits: everything goes through.
    assert reader.offer(2, "a2", 9.0) == [(2, "a2"), (3, "b3"), (4, "b4"), (5, "b5")]
    assert reader.current == 5
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None

    # A later gap is a new wait, from when it began.
    assert reader.offer(7, "b7", 12.0) == []
    assert reader.missing() == [6]
    assert reader.waiting_since == 12.0
    assert _counters(reader) == NO_COUNTS


def test_waiting_since_restarts_when_progress_leaves_a_new_gap():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(2, "e2", 1.0) == []
    assert reader.offer(4, "e4", 2.0) == []
    assert reader.missing() == [1, 3]
    assert reader.waiting_since == 1.0

    # 1 arrives: 1, 2 go on, and the reader now waits on 3, from now.
    assert reader.offer(1, "e1", 5.0) == [(1, "e1"), (2, "e2")]
    assert reader.current == 2
    assert reader.held == 1
    assert reader.missing() == [3]
    assert reader.waiting_since == 5.0

    # An arrival that makes no progress leaves the wait where it was.
    assert reader.offer(6, "e6", 7.0) == []
    assert reader.missing() == [3, 5]
    assert reader.waiting_since == 5.0

    assert reader.offer(3, "e3", 8.0) == [(3, "e3"), (4, "e4")]
    assert reader.missing() == [5]
    assert reader.waiting_since == 8.0

    assert reader.offer(5, "e5", 9.0) == [(5, "e5"), (6, "e6")]
    assert reader.waiting_since is None


# -- a log lookup: aborted writers, gaps filled from the log ------------------


def test_aborted_writer_lets_the_held_events_through():
    """Writer A reserved 1 and rolled back; B committed 2 and 3."""
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(2, "b2", 1.0) == []
    assert reader.offer(3, "b3", 2.0) == []
    assert reader.missing() == [1]

    assert reader.resolve({}, [1], 5.0) == [(2, "b2"), (3, "b3")]
    assert reader.current == 3
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None
    assert _counters(reader) == {**NO_COUNTS, "aborted": 1}
    # A rolled-back position is not "late": it will never come.
    assert reader.late() == []

    # If a notice for it came anyway, it would be dropped.
    assert reader.offer(1, "a1", 6.0) == []
    assert reader.duplicates == 1


def test_aborted_position_above_another_gap_waits_for_it():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(4, "e4", 1.0) == []
    assert reader.missing() == [1, 2, 3]

    # The log says 2 rolled back; 1 and 3 are still unknown.
    assert reader.resolve({}, [2], 2.0) == []
    assert reader.current == 0
    assert reader.missing() == [1, 3]
    assert reader.aborted == 1
    assert reader.waiting_since == 1.0

    # A notice for the rolled-back 2 is dropped.
    assert reader.offer(2, "e2", 3.0) == []
    assert reader.duplicates == 1
    assert reader.held == 1

    # 1 arrives: current passes 1 and the rolled-back 2, stops at 3.
    assert reader.offer(1, "e1", 4.0) == [(1, "e1")]
    assert reader.current == 2
    assert reader.missing() == [3]
    assert reader.waiting_since == 4.0

    assert reader.resolve({}, [3], 5.0) == [(4, "e4")]
    assert reader.current == 4
    assert reader.aborted == 2
    assert reader.waiting_since is None


def test_gap_filled_from_the_log_then_its_notice_is_a_duplicate():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(2, "e2", 1.0) == []
    assert reader.missing() == [1]

    assert reader.resolve({1: "e1 from the log"}, [], 3.0) == [
        (1, "e1 from the log"),
        (2, "e2"),
    ]
    assert reader.current == 2
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None
    assert _counters(reader) == NO_COUNTS

    # The notice for 1, delayed, arrives after the lookup: dropped.
    assert reader.offer(1, "e1", 4.0) == []
    assert _counters(reader) == {**NO_COUNTS, "duplicates": 1}


def test_resolve_mixes_found_and_never_and_keeps_held_events():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(3, "e3", 1.0) == []
    assert reader.offer(5, "e5", 1.0) == []
    assert reader.missing() == [1, 2, 4]

    # 1 found, 2 and 4 rolled back; the lookup also read 3 from the log,
    # but the event already held for 3 is the one handed on.
    assert reader.resolve({1: "e1", 3: "e3 from the log"}, [2, 4], 2.0) == [
        (1, "e1"),
        (3, "e3"),
        (5, "e5"),
    ]
    assert reader.current == 5
    assert reader.held == 0
    assert reader.aborted == 2
    assert reader.waiting_since is None


def test_resolve_ignores_positions_already_passed():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(1, "e1", 1.0) == [(1, "e1")]
    assert reader.resolve({1: "e1 again"}, [1], 2.0) == []
    assert reader.current == 1
    assert _counters(reader) == NO_COUNTS


def test_resolve_with_nothing_new_keeps_the_wait():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(3, "e3", 1.0) == []
    assert reader.resolve({}, [], 5.0) == []
    assert reader.missing() == [1, 2]
    assert reader.waiting_since == 1.0


def test_aborted_counts_each_rolled_back_position_once():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(3, "e3", 1.0) == []
    # Two lookups started before either answered both say 2 rolled back.
    assert reader.resolve({}, [2], 2.0) == []
    assert reader.resolve({}, [2, 2], 3.0) == []
    assert reader.missing() == [1]
    assert reader.aborted == 1


# -- giving up -------------------------------------------------------------------


def test_give_up_releases_held_events_and_accepts_skipped_ones_late():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(3, "e3", 1.0) == []
    assert reader.offer(5, "e5", 2.0) == []
    assert reader.missing() == [1, 2, 4]
    assert reader.waiting_since == 1.0

    # Give up below the lowest held event (3); the gap at 4 is a new wait.
    assert reader.give_up(30.0) == ([1, 2], [(3, "e3")])
    assert reader.current == 3
    assert reader.held == 1
    assert reader.missing() == [4]
    assert reader.waiting_since == 30.0
    assert reader.late() == [1, 2]
    assert _counters(reader) == {**NO_COUNTS, "given_up": 2}

    # 2 arrives after all: handed on once, out of order.
    assert reader.offer(2, "e2", 31.0) == [(2, "e2")]
    assert reader.current == 3
    assert reader.late() == [1]
    assert reader.late_arrivals == 1
    # A second copy is a duplicate.
    assert reader.offer(2, "e2", 32.0) == []
    assert reader.duplicates == 1

    # Giving up again skips 4 and lets 5 through.
    assert reader.give_up(60.0) == ([4], [(5, "e5")])
    assert reader.current == 5
    assert reader.held == 0
    assert reader.missing() == []
    assert reader.waiting_since is None
    assert reader.late() == [1, 4]
    assert _counters(reader) == {
        "duplicates": 1,
        "late_arrivals": 1,
        "aborted": 0,
        "given_up": 3,
    }


def test_late_positions_found_in_the_log_are_handed_on_once_and_rolled_back_ones_forgotten():
    reader: PositionReader[str] = PositionReader()
    reader.offer(4, "e4", 1.0)
    assert reader.give_up(10.0) == ([1, 2, 3], [(4, "e4")])
    assert reader.newest_late(2) == [3, 2]
    assert reader.newest_late(10) == [3, 2, 1]
    # The log has 2 (its notice was lost); 1 is known never to come.
    reader.forget_late([1])
    assert reader.resolve({2: "e2 from the log"}, [], 11.0) == [(2, "e2 from the log")]
    assert reader.late() == [3]
    assert reader.late_arrivals == 1
    # Its notice, if it comes after all, is a duplicate; so is 1's.
    assert reader.offer(2, "e2", 12.0) == []
    assert reader.offer(1, "e1", 12.0) == []
    assert reader.duplicates == 2
    # Forgetting a position that is not late changes nothing.
    reader.forget_late([2, 99])
    assert reader.late() == [3]


def test_give_up_with_nothing_held_does_nothing():
    reader: PositionReader[str] = PositionReader()
    assert reader.give_up(1.0) == ([], [])
    assert reader.offer(1, "e1", 2.0) == [(1, "e1")]
    assert reader.give_up(3.0) == ([], [])
    assert reader.current == 1
    assert reader.late() == []
    assert _counters(reader) == NO_COUNTS


def test_give_up_does_not_count_rolled_back_positions():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(4, "e4", 1.0) == []
    assert reader.resolve({}, [2], 2.0) == []

    assert reader.give_up(10.0) == ([1, 3], [(4, "e4")])
    assert reader.current == 4
    assert reader.late() == [1, 3]
    assert _counters(reader) == {**NO_COUNTS, "aborted": 1, "given_up": 2}

    # 3 is late and accepted; the rolled-back 2 is not.
    assert reader.offer(3, "e3", 11.0) == [(3, "e3")]
    assert reader.offer(2, "e2", 12.0) == []
    assert reader.late_arrivals == 1
    assert reader.duplicates == 1


# -- duplicates -----------------------------------------------------------------


def test_redelivery_of_a_released_position_is_a_duplicate():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(1, "e1", 1.0) == [(1, "e1")]
    assert reader.offer(1, "e1", 2.0) == []
    assert reader.current == 1
    assert reader.waiting_since is None
    assert _counters(reader) == {**NO_COUNTS, "duplicates": 1}


def test_redelivery_of_a_held_position_is_a_duplicate():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(2, "e2", 1.0) == []
    assert reader.offer(2, "e2 copy", 5.0) == []
    assert reader.held == 1
    assert reader.duplicates == 1
    # The redelivery did not restart the wait.
    assert reader.waiting_since == 1.0

    # The first copy is the one handed on, once.
    assert reader.offer(1, "e1", 6.0) == [(1, "e1"), (2, "e2")]
    assert reader.offer(2, "e2", 7.0) == []
    assert reader.duplicates == 2


# -- bounds ---------------------------------------------------------------------


def test_overflowing_once_more_than_max_held_are_held():
    reader: PositionReader[str] = PositionReader(max_held=2)
    assert reader.offer(2, "e2", 1.0) == []
    assert reader.offer(3, "e3", 1.0) == []
    assert reader.held == 2
    assert not reader.overflowing

    assert reader.offer(4, "e4", 2.0) == []
    assert reader.held == 3
    assert reader.overflowing

    # A duplicate does not add to what is held.
    assert reader.offer(4, "e4", 3.0) == []
    assert reader.held == 3

    assert reader.give_up(4.0) == ([1], [(2, "e2"), (3, "e3"), (4, "e4")])
    assert reader.held == 0
    assert not reader.overflowing


def test_max_late_forgets_the_oldest_late_positions():
    reader: PositionReader[str] = PositionReader(max_late=2)
    assert reader.offer(4, "e4", 1.0) == []
    assert reader.give_up(10.0) == ([1, 2, 3], [(4, "e4")])
    assert reader.given_up == 3
    assert reader.late() == [2, 3]

    # 1 was forgotten: its arrival is now a duplicate.
    assert reader.offer(1, "e1", 11.0) == []
    assert reader.duplicates == 1
    assert reader.late_arrivals == 0
    # 2 is still accepted.
    assert reader.offer(2, "e2", 12.0) == [(2, "e2")]
    assert reader.late_arrivals == 1
    assert reader.late() == [3]

    # A later give-up pushes out the oldest remaining one.
    assert reader.offer(7, "e7", 13.0) == []
    assert reader.give_up(20.0) == ([5, 6], [(7, "e7")])
    assert reader.late() == [5, 6]
    assert reader.offer(3, "e3", 21.0) == []
    assert reader.duplicates == 2


def test_allow_late_accepts_positions_unknown_at_start():
    reader: PositionReader[str] = PositionReader(10)
    reader.allow_late([7, 9])
    assert reader.offer(9, "e9", 1.0) == [(9, "e9")]
    assert reader.offer(8, "e8", 1.0) == []
    assert reader.late() == [7]
    assert _counters(reader) == {**NO_COUNTS, "duplicates": 1, "late_arrivals": 1}


# -- missing() and the constructor ----------------------------------------------


def test_missing_respects_its_limit():
    reader: PositionReader[str] = PositionReader()
    assert reader.offer(10, "e10", 1.0) == []
    assert reader.offer(5, "e5", 1.0) == []
    assert reader.missing() == [1, 2, 3, 4, 6, 7, 8, 9]
    assert reader.missing(3) == [1, 2, 3]
    assert reader.missing(5) == [1, 2, 3, 4, 6]
    assert reader.missing(0) == []


def test_constructor_starts_at_a_given_position():
    reader: PositionReader[str] = PositionReader(5)
    assert reader.current == 5
    assert reader.offer(5, "e5", 1.0) == []
    assert reader.duplicates == 1
    assert reader.offer(6, "e6", 2.0) == [(6, "e6")]
    assert reader.current == 6


def test_constructor_rejects_a_negative_position():
    with pytest.raises(ValueError, match="never negative"):
        PositionReader(-1)
