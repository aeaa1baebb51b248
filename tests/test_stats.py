"""The statistics behind the verdicts (traceparse/stats.py), against values worked out by hand."""

import math

import pytest

from traceparse import stats


def test_students_t_tail():
    # one degree of freedom is the Cauchy distribution: P(T >= t) = 1/2 - atan(t) / pi
    for t in (0.0, 1.0, 3.5, -2.0):
        assert stats._t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-12)
    # two: P(T >= t) = (1 - t / sqrt(t^2 + 2)) / 2
    for t in (0.5, 1.0, 10.0):
        assert stats._t_sf(t, 2) == pytest.approx((1 - t / math.sqrt(t * t + 2)) / 2, rel=1e-12)
    assert (stats._t_sf(math.inf, 5), stats._t_sf(-math.inf, 5)) == (0.0, 1.0)


def test_binomial_and_poisson_binomial_tails():
    assert stats._binomial_pmf(4, 0.5) == pytest.approx([1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16], rel=1e-12)
    assert list(stats._binomial_pmf(3, 1.0)) == [0, 0, 0, 1]
    long = stats._binomial_pmf(5000, 1 / 8)  # no overflow over a long run of trials
    assert long.sum() == pytest.approx(1.0, rel=1e-9) and long.argmax() == 625
    # last at 3 or more of 4 collectives of 2 ranks: (4 + 1) / 16
    assert stats.last_tail([0.5] * 4, 3) == pytest.approx(5 / 16, rel=1e-12)
    # one collective of 2 ranks and one of 4: last at both with 1/2 x 1/4; at one or more, 1 - 1/2 x 3/4
    assert stats.last_tail([0.5, 0.25], 2) == pytest.approx(1 / 8, rel=1e-12)
    assert stats.last_tail([0.5, 0.25], 1) == pytest.approx(5 / 8, rel=1e-12)


def test_students_t_tail_against_scipy():
    """The continued fraction against scipy.special.stdtr over degrees of freedom from 0.3 to 10^6 and |t| from 1e-8
    to 1000, and the normal distribution beyond LARGE_DF."""
    from scipy.special import stdtr

    ts = [s * 10 ** (e / 4) for e in range(-32, 13) for s in (1, -1)] + [0.0]
    for df in (0.3, 0.5, 1, 1.5, 2, 3, 4.7, 10, 29.5, 100, 1e3, 9999, 1e4, 10001, 1e5, 1e6):
        for t in ts:
            want = float(stdtr(df, -t))
            assert stats._t_sf(t, df) == pytest.approx(want, rel=1e-6, abs=1e-8), (df, t)
    for t in (0.0, 1.0, -2.5, 5.0):
        assert stats._t_sf(t, 1e8) == pytest.approx(float(stdtr(1e8, -t)), rel=1e-6, abs=1e-8)


@pytest.mark.slow  # importing scipy.stats takes about 2 s: the fast tier keeps the hand-worked values
def test_binomial_against_scipy():
    from scipy.stats import binom

    for n, p in ((1, 0.3), (17, 0.5), (400, 1 / 64), (3000, 0.9)):
        assert stats._binomial_pmf(n, p) == pytest.approx(binom.pmf(range(n + 1), n, p), rel=1e-9, abs=1e-300)


def test_two_term_fit_is_least_squares_with_each_coefficients_t():
    """y = a x1 + b x2 fitted by hand: the normal equations, the residual variance over n - 2, each coefficient's
    standard error from the inverse of X'X, and its one-sided tail."""
    rows = [(1.0, 2.0, 5.2), (2.0, 1.0, 4.1), (3.0, 3.0, 8.8), (1.0, 4.0, 9.1), (2.0, 2.0, 6.0)]
    got = stats.two_term_fit(rows)
    s11, s22, s12 = 19.0, 34.0, 21.0  # sums of x1^2, x2^2, x1 x2
    s1y, s2y = 5.2 + 8.2 + 26.4 + 9.1 + 12.0, 10.4 + 4.1 + 26.4 + 36.4 + 12.0
    det = s11 * s22 - s12 * s12
    a, b = (s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det
    var = sum((y - a * x1 - b * x2) ** 2 for x1, x2, y in rows) / 3
    assert (got["a"], got["b"], got["df"]) == (pytest.approx(a), pytest.approx(b), 3)
    assert got["p_a"] == pytest.approx(stats._t_sf(a / math.sqrt(var * s22 / det), 3))
    assert got["p_b"] == pytest.approx(stats._t_sf(b / math.sqrt(var * s11 / det), 3))
    assert stats.two_term_fit(rows[:2]) is None  # fewer than 3 rows: no residual to weigh them by
    assert stats.two_term_fit([(1.0, 2.0, 1.0), (2.0, 4.0, 2.1), (3.0, 6.0, 2.9)]) is None  # x2 = 2 x1: singular
