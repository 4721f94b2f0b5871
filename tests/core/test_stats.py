import numpy as np

from jaxlab.core import stats


def test_spread_is_mean_sample_std_and_range():
  s = stats.spread([1.0, 2.0, 3.0, 6.0])
  assert s.mean == 3.0 and s.n == 4 and (s.min, s.max) == (1.0, 6.0)
  np.testing.assert_allclose(s.std, np.sqrt(14 / 3))  # ddof=1 by hand: sum sq dev 14
  one = stats.spread([2.5])
  assert one.mean == 2.5 and np.isnan(one.std)
  diverged = stats.spread([1.0, np.nan, 3.0])  # a NaN seed is not silently dropped
  assert diverged.n == 3 and np.isnan(diverged.mean) and np.isnan(diverged.std)


def test_format_spread():
  assert stats.format_spread([1.0, 2.0, 3.0], ".2f") == "2.00 ± 1.00"
  assert stats.format_spread([1.0, 2.0, 3.0], ".1f", minmax=True) == "2.0 ± 1.0 [1.0, 3.0]"
  assert stats.format_spread([4.0], ".1f") == "4.0"
