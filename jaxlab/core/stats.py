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

__all__ = ["Spread", "format_spread", "spread"]


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
