"""The statistics behind a verdict: how likely a pattern is by chance, from the numbers the traces give.

``rank_outliers(table)``: which rank stands out, from values per step and rank (e.g. how late it arrives
at each collective): its effect against the step-to-step noise measured from the table itself, tested with
Student's t, one-sided, Bonferroni-corrected for the number of ranks tested.
``last_tail(chances, k)``: the probability of arriving last at least ``k`` times by chance, when at each
collective the chance is 1 / its group size (Poisson-binomial, exact).
``top_share_tail(spells, n)``: the probability that one of ``n`` ranks holds this large a share of a critical path
by chance, when which rank each of its spells ran on were drawn at random.
``mean_difference(a, b)``: the difference of two means against its standard error (Welch), for compare.
``two_term_fit(rows)``: least squares of y = a x1 + b x2 (no intercept), each coefficient against its standard
error (one-sided: how likely a coefficient this far above 0 is when it is 0), for what a collective costs per call.

Student's t tail is the regularized incomplete beta function's continued fraction (``_t_sf``), and the binomial's
log factorials ``math.lgamma``: importing scipy.special for them cost 0.1 s (scipy.stats, which holds the same
functions behind its distribution classes, 0.9 s), about a tenth of a small run's whole analysis.
tests/test_stats.py holds them to closed forms and to scipy.special's stdtr and binom.
"""

import math
import statistics
from collections import Counter

from traceparse.thresholds import check_thresholds

ALPHA = check_thresholds()["stats"]["alpha"]  # conclusive when chance gives it at most this often (rules/thresholds.toml)


LARGE_DF = 1e7  # beyond this, Student's t is the normal distribution within 1e-8 (its difference falls as 1 / df)


def _t_sf(t: float, df: float) -> float:
    """P(T >= t) for Student's t with ``df`` degrees of freedom: half the regularized incomplete beta function
    I_x(df/2, 1/2) at x = df / (df + t^2) for t > 0 (Abramowitz and Stegun 26.7.1), one less it below 0."""
    t, df = float(t), float(df)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > LARGE_DF:
        return statistics.NormalDist().cdf(-t)
    half = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t), t * t / (df + t * t))
    return half if t > 0 else 1.0 - half


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """The regularized incomplete beta function I_x(a, b), ``y`` = 1 - x given apart (x near 1 loses its digits as
    1 - x), by its continued fraction on the side where it converges (Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if y <= 0:
        return 1.0
    front = math.exp(_log_inverse_beta(a, b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def _log_inverse_beta(a: float, b: float) -> float:
    """-log B(a, b); for b = 1/2 and a large, lgamma(a + 1/2) - lgamma(a) by its asymptotic series (the difference of
    two lgamma near 10^6 loses five digits)."""
    if b == 0.5 and a > 1e4:
        return 0.5 * math.log(a) - 1 / (8 * a) + 1 / (192 * a**3) - math.lgamma(0.5)
    return math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)


def _beta_fraction(a: float, b: float, x: float, tiny: float = 1e-300) -> float:
    """The continued fraction of I_x(a, b), by the modified Lentz method, to double precision."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):  # about sqrt(a) terms where x is near the mean: a = 5e6 at LARGE_DF
        for term in (m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
                     -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m))):
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + term / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def rank_outliers(table: dict) -> dict:
    """``table``: {step: {rank: [values]}} (e.g. how late the rank arrived at each collective of the step).
    Per rank ``{effect, se, t, df, p, steps}``. The steps are the independent observations (values within a
    step are not: a rank held up early in a step stays behind for a while). A rank's value in a step = the
    mean of its values there less the step's mean over the ranks (what a slow step does to every rank);
    effect = its mean over the rank's steps; noise = how much those values move from step to step (the
    residual mean square pooled over ranks, df = (R-1)(S-1) on a full table); se = sqrt((R-1)/R x noise / S);
    p = P(t_df >= effect / se) x R (Bonferroni over the R ranks tested, capped at 1): the chance that some
    rank looks this far above the others when none is. With one step (df 0) a one-off delay cannot be told
    from a steady one: se, t and p are None."""
    cells = {(s, r): statistics.fmean(v) for s, row in table.items() for r, v in row.items() if v}
    ranks = sorted({r for _, r in cells})
    if len(ranks) < 2:
        return {}
    n_ranks = len(ranks)
    step_mean = {s: statistics.fmean(x for (u, _), x in cells.items() if u == s) for s in {u for u, _ in cells}}
    cells = {(s, r): x - step_mean[s] for (s, r), x in cells.items()}
    steps_of = {r: [s for s, q in cells if q == r] for r in ranks}
    effect = {r: statistics.fmean(cells[(s, r)] for s in steps_of[r]) for r in ranks}
    df = sum(len(v) - 1 for v in steps_of.values()) * (n_ranks - 1) / n_ranks
    noise = sum((cells[(s, r)] - effect[r]) ** 2 for r in ranks for s in steps_of[r]) / df if df else None
    out = {}
    for r in ranks:
        k = len(steps_of[r])
        row = {"effect": effect[r], "steps": k, "df": round(df, 2), "se": None, "t": None, "p": None}
        if df >= 1:
            se = math.sqrt((n_ranks - 1) / n_ranks * noise / k)
            t = effect[r] / se if se else (math.inf if effect[r] > 0 else -math.inf if effect[r] < 0 else 0.0)
            row.update(se=se, t=t, p=min(1.0, _t_sf(t, df) * n_ranks))
        out[r] = row
    return out


def last_tail(chances: list[float], k: int) -> float:
    """P(at least ``k`` successes) of independent trials with success probabilities ``chances``: the trials of
    one probability are binomial, and the distribution of the total is the convolution of those (exact; a rank
    meets a handful of group sizes, so this costs a few convolutions of the length of ``chances``)."""
    import numpy as np

    dist = np.ones(1)
    for p, n in Counter(chances).items():
        dist = np.convolve(dist, _binomial_pmf(n, p))
    return min(1.0, float(dist[k:].sum()))


def _binomial_pmf(n: int, p: float):
    """P(X = k) for k = 0..n, X binomial with ``n`` trials of success probability ``p`` (in log space: no
    overflow for long runs of trials)."""
    import numpy as np

    if p >= 1 or p <= 0:
        out = np.zeros(n + 1)
        out[n if p >= 1 else 0] = 1.0
        return out
    k = np.arange(n + 1)
    log_factorial = np.array([math.lgamma(i + 1) for i in range(n + 1)])
    return np.exp(log_factorial[n] - log_factorial - log_factorial[::-1] + k * math.log(p) + (n - k) * math.log1p(-p))


def top_share_tail(spells: list[tuple[int, float]], n: int, draws: int = 4000, seed: int = 0) -> float | None:
    """P(some rank holds at least the largest share that one rank holds of the total length) when each spell (rank,
    length) is put on one of ``n`` ranks at random, uniformly: how likely a path this concentrated is on ranks that
    are alike. A path of a few long spells is concentrated by chance; of many, only when a rank sets the pace. Monte
    Carlo over ``draws`` seeded draws, the observed path counted among them ((1 + hits) / (1 + draws)); None without
    two ranks or a spell."""
    import numpy as np

    total = sum(length for _, length in spells)
    if n < 2 or not total:
        return None
    held = Counter()
    for r, length in spells:
        held[r] += length
    top = max(held.values()) / total
    lengths = np.array([length for _, length in spells], dtype=float) / total
    where = np.random.default_rng(seed).integers(0, n, size=(draws, len(spells)))
    shares = np.zeros((draws, n))
    np.add.at(shares, (np.arange(draws)[:, None], where), lengths)
    hits = int((shares.max(axis=1) >= top - 1e-9).sum())
    return (1 + hits) / (1 + draws)


def mean_difference(a: list[float], b: list[float]) -> dict | None:
    """``{delta, se, t, df, p}`` for mean(b) - mean(a) (Welch; p one-sided, P(t_df >= t) when b is no larger
    than a on average); None when either side has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    delta = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    if not se:
        return {"delta": delta, "se": 0.0, "t": None, "df": None, "p": 0.0 if delta else 1.0}
    df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    t = delta / se
    return {"delta": delta, "se": se, "t": t, "df": df, "p": _t_sf(t, df)}


def two_term_fit(rows: list[tuple[float, float, float]]) -> dict | None:
    """Least squares of y = a x1 + b x2 over ``rows`` (x1, x2, y): {a, b, p_a, p_b (P(T >= coefficient / its standard
    error) with n - 2 degrees of freedom), df}; None with fewer than 3 rows or x1 and x2 proportional (a singular
    fit). A coefficient is shown above 0 when its p is at most ALPHA."""
    n = len(rows)
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    det = s11 * s22 - s12 * s12
    if n < 3 or det <= 1e-12 * s11 * s22:
        return None
    s1y = sum(x1 * y for x1, _, y in rows)
    s2y = sum(x2 * y for _, x2, y in rows)
    a, b = (s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det
    df = n - 2
    var = sum((y - a * x1 - b * x2) ** 2 for x1, x2, y in rows) / df
    se_a, se_b = math.sqrt(var * s22 / det), math.sqrt(var * s11 / det)
    return {"a": a, "b": b, "df": df,
            "p_a": _t_sf(a / se_a, df) if se_a > 0 else float(a <= 0),
            "p_b": _t_sf(b / se_b, df) if se_b > 0 else float(b <= 0)}
