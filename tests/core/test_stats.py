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


def test_t_interval_matches_scipy():
  from scipy import stats as sps

  d = np.array([0.3, -0.1, 0.5, 0.2, 0.4, 0.0])
  iv = stats.t_interval(d)
  lo, hi = sps.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sps.sem(d))
  np.testing.assert_allclose([iv.mean, iv.lo, iv.hi], [d.mean(), lo, hi], rtol=1e-12)
  assert iv.n == 6 and "6 seeds" in iv.method
  # by hand for three seeds: 2 ± t_{0.975, 2} * 1 / sqrt(3), t = 4.302652729911275
  three = stats.t_interval([1.0, 2.0, 3.0])
  np.testing.assert_allclose(three.lo, 2 - 4.302652729911275 / np.sqrt(3), rtol=1e-9)
  narrow = stats.t_interval(d, level=0.5)
  assert iv.lo < narrow.lo < narrow.hi < iv.hi


def test_bootstrap_interval_resamples_within_strata():
  rng = np.random.default_rng(0)
  d = np.concatenate([rng.normal(1.0, 1.0, 300), rng.normal(-1.0, 1.0, 100)])
  strata = np.repeat([0, 1], [300, 100])
  iv = stats.bootstrap_interval(d, strata)
  # stratified: the strata's sizes are fixed, so the spread is the within-stratum one,
  # sqrt(300 + 100) / 400 = 0.05 per unit sd, half-width about 1.96 * 0.05
  assert iv.lo < d.mean() < iv.hi and iv.n == 400 and "2 strata" in iv.method
  np.testing.assert_allclose((iv.hi - iv.lo) / 2, 1.96 * np.sqrt(400) / 400, rtol=0.15)
  # unstratified, the mixture's between-stratum variance widens it
  pooled = stats.bootstrap_interval(d)
  assert (pooled.hi - pooled.lo) > 1.3 * (iv.hi - iv.lo)
  # the same seed gives the same interval; a constant difference has no width
  assert stats.bootstrap_interval(d, strata) == iv
  flat = stats.bootstrap_interval(np.full(10, 0.5))
  assert flat.lo == flat.hi == 0.5


def test_units_needed_halves_the_margin():
  d = np.array([1.0, -1.0] * 10)  # sd = 1.026
  n = stats.units_needed(d, margin=0.5)
  # half-width z s / sqrt(n) <= 0.25  <=>  n >= (2 * 1.96 * 1.026 / 0.5)^2 = 64.7
  assert n == 65


def test_intervals_reject_bad_input():
  import pytest

  with pytest.raises(ValueError, match="level"):
    stats.t_interval([1.0, 2.0], level=1.5)
  with pytest.raises(ValueError, match="at least 2"):
    stats.t_interval([1.0])
  with pytest.raises(ValueError, match="strata"):
    stats.bootstrap_interval([1.0, 2.0, 3.0], strata=[0, 1])
  with pytest.raises(ValueError, match="resamples"):
    stats.bootstrap_interval([1.0, 2.0], resamples=10)


def test_bootstrap_percentiles_match_the_normal_interval():
  # for a normal sample the percentile interval's half-width is 1.96 sd / sqrt(n), to the
  # resampling's error (under 1.2% with 10,000 resamples here; a 94% interval would be 4% off)
  rng = np.random.default_rng(0)
  d = rng.normal(0.3, 1.0, 400)
  iv = stats.bootstrap_interval(d, resamples=10_000)
  se = d.std() / np.sqrt(d.size)
  np.testing.assert_allclose((iv.hi - iv.lo) / 2 / se, 1.96, rtol=0.012)
  assert iv.lo < d.mean() < iv.hi


def test_bootstrap_rejects_strata_it_cannot_resample():
  import pytest

  with pytest.raises(ValueError, match="at least 2 items"):
    stats.bootstrap_interval([1.0, 2.0, 3.0], strata=[0, 0, 1])
  with pytest.raises(ValueError, match="finite"):
    stats.bootstrap_interval([1.0, 2.0, 3.0, 4.0], strata=[0.0, 0.0, np.nan, np.nan])
