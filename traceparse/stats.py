"""The statistics behind a verdict: how likely a pattern is by chance, from the numbers the traces give.

``rank_outliers(table)``: which rank stands out, from values per step and rank (e.g. how late it arrives
at each collective): its effect against the step-to-step noise measured from the table itself, tested with
Student's t, one-sided, Bonferroni-corrected for the number of ranks tested.
``last_tail(chances, k)``: the probability of arriving last at least ``k`` times by chance, when at each
collective the chance is 1 / its group size (Poisson-binomial, exact).
``top_share_tail(spells, n)``: the probability that one of ``n`` ranks holds this large a share of a critical path
by chance, when which rank each of its spells ran on were drawn at random.
``mean_difference(a, b)``: the difference of two means against its standard error (Welch), for compare.

scipy.special is imported on first use (its import costs ~0.3 s; scipy.stats, which holds the same functions
behind its distribution classes, ~0.9 s: more than a small run's whole analysis).
"""

import math
import statistics
from collections import Counter

from traceparse.thresholds import check_thresholds

ALPHA = check_thresholds()["stats"]["alpha"]  # conclusive when chance gives it at most this often (rules/thresholds.toml)


def _t_sf(t: float, df: float) -> float:
    """P(T >= t) for Student's t with ``df`` degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


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
    from scipy.special import gammaln

    if p >= 1 or p <= 0:
        out = np.zeros(n + 1)
        out[n if p >= 1 else 0] = 1.0
        return out
    k = np.arange(n + 1)
    return np.exp(gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p))


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
