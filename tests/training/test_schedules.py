import numpy as np
import pytest

from jaxlab.training import lr_schedule


def test_schedules():
  n, peak = 100, 0.5
  const = np.asarray(lr_schedule("constant", n, peak, warmup_fraction=0.1))
  cos = np.asarray(lr_schedule("cosine", n, peak, warmup_fraction=0.1))
  wsd = np.asarray(lr_schedule("wsd", n, peak, warmup_fraction=0.1, decay_fraction=0.2))
  for s in (const, cos, wsd):
    assert s.shape == (n,) and s[0] == 0.0 and s.max() == pytest.approx(peak)
    np.testing.assert_allclose(s[:10], np.arange(10) * peak / 10, rtol=1e-6)
  np.testing.assert_allclose(const[10:], peak)
  assert np.all(np.diff(cos[10:]) <= 0) and cos[-1] < 1e-3
  np.testing.assert_allclose(wsd[10:80], peak)
  np.testing.assert_allclose(wsd[80:], peak * np.arange(20, 0, -1) / 20, rtol=1e-5)
  np.testing.assert_allclose(lr_schedule("constant", 5, 0.1), 0.1)  # no warmup


def test_schedule_bad_input():
  with pytest.raises(ValueError, match="kind"):
    lr_schedule("step", 10, 0.1)
  with pytest.raises(ValueError, match="peak_lr"):
    lr_schedule("wsd", 10, 0.0)
  with pytest.raises(ValueError, match="warmup_fraction \\+ decay_fraction"):
    lr_schedule("wsd", 10, 0.1, warmup_fraction=0.6, decay_fraction=0.6)
