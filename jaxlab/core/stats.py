"""The one convention for spread over seeds in every table and report (a leaf module).

Everywhere jaxlab reports a quantity measured over seeds, ``a ± b`` means the
mean ``a`` and the sample standard deviation ``b`` (``ddof=1``: an unbiased
variance estimate from few seeds), and ``[lo, hi]`` is the min-max range over
seeds. One seed has no spread: its std is reported as NaN ("±" omitted). A NaN
among the values (a diverged seed) propagates: it is never silently dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Interval", "Spread", "bootstrap_interval", "format_spread", "spread", "t_interval",
           "units_needed"]


class Spread(NamedTuple):
  """Summary of one quantity over seeds."""

  mean: float
  std: float  # sample std, ddof=1; NaN for a single seed
  min: float
  max: float
  n: int


def spread(values: ArrayLike) -> Spread:
  """Mean, sample std (``ddof=1``), min and max of per-seed ``values`` (NaN propagates).

  Example:
    >>> spread([1.0, 2.0, 3.0])
    Spread(mean=2.0, std=1.0, min=1.0, max=3.0, n=3)
  """
  x = np.asarray(values, np.float64).reshape(-1)
  n = int(x.size)
  if n == 0:
    nan = float("nan")
    return Spread(nan, nan, nan, nan, 0)
  std = float(np.std(x, ddof=1)) if n > 1 else float("nan")
  return Spread(float(np.mean(x)), std, float(np.min(x)), float(np.max(x)), n)


def format_spread(values: ArrayLike, fmt: str = ".3g", *, minmax: bool = False) -> str:
  """``"mean ± std"`` (``ddof=1``) of per-seed values, with ``" [min, max]"`` if asked."""
  s = spread(values)
  text = format(s.mean, fmt) if np.isnan(s.std) else f"{s.mean:{fmt}} ± {s.std:{fmt}}"
  return text + (f" [{s.min:{fmt}}, {s.max:{fmt}}]" if minmax and s.n > 1 else "")


class Interval(NamedTuple):
  """A mean paired difference and its confidence interval."""

  mean: float
  lo: float
  hi: float
  n: int  # units (seeds or items) the interval is over
  method: str  # how it was computed, in words ("t, 5 seeds")


def t_interval(diffs: ArrayLike, level: float = 0.95) -> Interval:
  """Student-t interval of the mean of per-seed paired differences.

  ``mean ± t_{(1+level)/2, n-1} · s / sqrt(n)`` with ``s`` the sample std (``ddof=1``). The
  unit is the seed: use it where arms train models and each seed pairs the arms.

  Example:
    >>> t_interval([1.0, 2.0, 3.0]).lo  # 2 - 4.303 * 1 / sqrt(3)
    -0.484...

  Raises:
    ValueError: if ``level`` is not in (0, 1) or there are fewer than 2 finite differences.
  """
  from scipy import stats  # noqa: PLC0415 (scipy only where an interval is formed)

  if not 0 < level < 1:
    raise ValueError(f"level must be in (0, 1), got {level!r}")
  d = np.asarray(diffs, np.float64).reshape(-1)
  if d.size < 2 or not np.all(np.isfinite(d)):
    raise ValueError(f"diffs must hold at least 2 finite values, got {d.tolist()!r}")
  n, mean = d.size, float(d.mean())
  half = float(stats.t.ppf((1 + level) / 2, n - 1) * d.std(ddof=1) / np.sqrt(n))
  return Interval(mean, mean - half, mean + half, n, f"t, {n} seeds")


def bootstrap_interval(diffs: ArrayLike, strata: ArrayLike | None = None, level: float = 0.95,
                       resamples: int = 2000, seed: int = 0) -> Interval:
  """Percentile interval of the mean paired difference by a stratified paired bootstrap.

  Items (instances, questions, prompts) are the unit: each resample draws, within every
  stratum (a seed), as many items as that stratum holds, with replacement, and takes the mean
  difference over all of them; the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2``
  quantiles of those means. The differences are paired, so each item's two arms move together.

  Args:
    diffs: per-item paired differences.
    strata: per-item stratum labels (the seed that produced the item); ``None``: one stratum.
    level: coverage.
    resamples: bootstrap draws.
    seed: the resampling's seed (same seed, same interval).

  Raises:
    ValueError: on a bad ``level`` or ``resamples``, fewer than 2 finite differences,
      ``strata`` of another length or with non-finite labels, or a stratum of one item.
  """
  if not 0 < level < 1:
    raise ValueError(f"level must be in (0, 1), got {level!r}")
  if not isinstance(resamples, int) or resamples < 100:
    raise ValueError(f"resamples must be an int >= 100, got {resamples!r}")
  d = np.asarray(diffs, np.float64).reshape(-1)
  if d.size < 2 or not np.all(np.isfinite(d)):
    raise ValueError(f"diffs must hold at least 2 finite values, got {d.size} values")
  labels = np.zeros(d.size, np.int64) if strata is None else np.asarray(strata).reshape(-1)
  if labels.shape != d.shape:
    raise ValueError(f"strata must have one label per difference ({d.size}), got "
                     f"{labels.size}")
  if labels.dtype.kind == "f" and not np.all(np.isfinite(labels)):
    raise ValueError("strata labels must be finite")
  groups = [d[labels == s] for s in np.unique(labels)]
  if min(g.size for g in groups) < 2:
    raise ValueError("every stratum needs at least 2 items (a stratum of one item has no "
                     "spread to resample: use the seed as the unit, with t_interval)")
  rng = np.random.default_rng(seed)
  total = np.zeros(resamples)
  for g in groups:
    idx = rng.integers(0, g.size, size=(resamples, g.size))
    total += g[idx].sum(axis=1)
  means = total / d.size
  lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
  return Interval(float(d.mean()), float(lo), float(hi), int(d.size),
                  f"paired bootstrap, {d.size} items in {len(groups)} strata, "
                  f"{resamples} resamples")


def units_needed(diffs: ArrayLike, margin: float, level: float = 0.95) -> int:
  """Units for an interval's half-width to be at most ``margin / 2`` (normal approximation).

  ``n ≈ (2 z s / margin)^2`` with ``s`` the sample std of the pilot ``diffs``: how a full run
  is sized from its quick run (the protocol: half-width at most δ/2).
  """
  from scipy import stats  # noqa: PLC0415

  d = np.asarray(diffs, np.float64).reshape(-1)
  if not margin > 0:
    raise ValueError(f"margin must be > 0, got {margin!r}")
  if d.size < 2:
    raise ValueError("diffs must hold at least 2 values to estimate their spread")
  z = stats.norm.ppf((1 + level) / 2)
  return max(2, int(np.ceil((2 * z * d.std(ddof=1) / margin) ** 2)))
