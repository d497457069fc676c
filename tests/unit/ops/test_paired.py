from __future__ import annotations

import pytest

from ops.paired import Outcomes, Paired, sign_test


def test_the_paired_comparison_counts_changes_each_way_with_an_exact_sign_test() -> None:
    before = Outcomes((True, True, False, False, False, False, False, False, False, False))
    after = Outcomes((True, False, True, True, True, True, True, True, True, True))
    paired = Paired.of(before, after)
    assert (paired.gained, paired.lost) == (8, 1)
    assert paired.p_value == pytest.approx(2 * 10 / 512)  # P(at most 1 of 9 changes one way), both tails
    assert paired.line() == "8 gained, 1 lost (two-sided sign test p = 0.039)"
    assert Paired.of(before, before).p_value == 1.0
    assert Paired.of(Outcomes((False,)), Outcomes((True,))).p_value == 1.0  # one change proves nothing
    with pytest.raises(ValueError, match="same samples"):
        Paired.of(before, Outcomes((True,)))


def test_the_sign_test_is_symmetric_and_small_only_for_lopsided_splits() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 5) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 1024) == sign_test(0, 10)
    assert sign_test(59, 0) == pytest.approx(2 / 2**59)
    assert sign_test(30, 29) > 0.5


def test_outcomes_read_as_a_rate() -> None:
    assert str(Outcomes((True, False, False, False))) == "25% (1/4)"
    assert Outcomes(()).rate == 0.0
