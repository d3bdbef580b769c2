"""measure.worker's re-timing: which finalists stop being timed before the last round (outpaced, race)."""
from __future__ import annotations

from autotune.measure.timing import Timing
from autotune.measure.worker import _rounds, outpaced


def quiet(*medians: float) -> list[Timing]:
    return [Timing((m, m)) for m in medians]


def test_a_finalist_slower_in_every_round_than_the_fastest_in_any_stops() -> None:
    timings = {0: quiet(1.00, 1.03), 1: quiet(1.05, 1.12), 2: quiet(1.02, 1.06), 3: quiet(1.03, 1.09)}
    assert outpaced(timings, 1.1) == [1]  # 2 and 3 overlap the fastest's rounds: still in the race


def test_nothing_stops_after_one_round_or_with_one_finalist() -> None:
    assert outpaced({0: quiet(1.0), 1: quiet(2.0)}, 1.1) == []
    assert outpaced({0: quiet(1.0, 1.0)}, 1.1) == []
    assert outpaced({}, 1.1) == []


def test_a_busy_spell_keeps_a_finalist_in() -> None:
    disturbed = [Timing((1.2, 1.2)), Timing((1.2, 1.2), waited=1, wait=0.3)]
    assert outpaced({0: quiet(1.0, 1.0), 1: disturbed}, 1.1) == []
    spread = [Timing((1.2, 1.2)), Timing((1.2, 1.6))]
    assert outpaced({0: quiet(1.0, 1.0), 1: spread}, 1.1) == []
    # the fastest's own rounds disturbed: nothing is judged against them
    assert outpaced({0: [Timing((1.0, 1.0), stolen=1), Timing((1.0, 1.0))], 1: quiet(2.0, 2.0)}, 1.1) == []


def test_the_fastest_is_judged_by_the_median_of_its_rounds() -> None:
    # 1 has the single fastest round, 0 the lower median: 0 leads, and 1's rounds overlap it
    assert outpaced({0: quiet(1.00, 1.01, 1.02), 1: quiet(0.99, 1.10, 1.12), 2: quiet(1.2, 1.3, 1.25)}, 1.1) == [2]


def test_a_stopped_finalist_answers_with_the_rounds_it_had() -> None:
    answer = _rounds(quiet(1.1, 1.2), 1.1)
    assert answer["costs"] == [1.1, 1.2] and answer["retimed"] and answer["contention"]["rounds"] == 2


def test_a_race_ends_once_one_finalist_of_several_is_left() -> None:
    from autotune.measure.worker import race
    calls: list[int] = []

    def time_one(i: int) -> Timing:
        calls.append(i)
        tied = 0.99 if calls.count(2) % 2 else 1.01  # 2's rounds straddle 0's: a tie
        return Timing(({0: 1.0, 1: 2.0, 2: tied}[i],) * 2)
    timings = race([0, 1, 2], 5, time_one, 1.1)
    assert calls[:6] == [0, 1, 2, 0, 1, 2] and 1 not in calls[6:]  # 1 outpaced after round 2
    assert len(timings[0]) == len(timings[2]) == 5  # 0 and 2 stay tied: every round
    calls.clear()
    timings = race([0, 1], 5, time_one, 1.1)
    assert calls == [0, 1, 0, 1] and len(timings[0]) == 2  # 0 left alone after round 2: the race ends


def test_a_finalist_that_fails_leaves_the_race_and_a_single_kernel_is_timed_every_round() -> None:
    from autotune.measure.worker import race
    timings = race([0, 1], 3, lambda i: None if i == 1 else Timing((1.0, 1.0)), 1.1)
    assert list(timings) == [0] and len(timings[0]) == 1  # 1 failed: 0 has nothing to be compared with
    timings = race([0], 3, lambda i: Timing((1.0, 1.0)), 1.1)
    assert len(timings[0]) == 3  # a single kernel re-timed on purpose: every round
