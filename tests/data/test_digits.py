"""The digits variants against scikit-learn's raw arrays: values, shapes, ranges, caching."""

import numpy as np
import pytest
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab.data import digits


@pytest.fixture(scope="module")
def raw():
  return sk_load_digits()


def test_variants_are_the_raw_pixels_rescaled(raw):
  pixels, unit, signed = (digits.load_digits(v) for v in ("pixels", "unit_images", "signed"))
  assert pixels.x.shape == signed.x.shape == (1797, 64) and unit.x.shape == (1797, 8, 8)
  for d in (pixels, unit, signed):
    assert d.x.dtype == np.float32 and d.y.dtype == np.int32
    np.testing.assert_array_equal(d.y, raw.target)
  # exact values: the stored integers 0..16, then /16 and /8 - 1 (computed in float64)
  np.testing.assert_array_equal(pixels.x, raw.data)
  assert set(np.unique(pixels.x)) <= set(range(17))
  np.testing.assert_array_equal(unit.x, (raw.images / 16).astype(np.float32))
  np.testing.assert_array_equal(unit.x.reshape(-1, 64) * 16, raw.data)  # /16 is exact
  np.testing.assert_array_equal(signed.x, (raw.data / 8 - 1).astype(np.float32))
  np.testing.assert_array_equal((signed.x + 1) * 8, raw.data)  # and so is /8 - 1
  assert (unit.x.min(), unit.x.max()) == (0.0, 1.0)
  assert (signed.x.min(), signed.x.max()) == (-1.0, 1.0)
  assert np.bincount(pixels.y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_loaded_once_and_read_only():
  a, b = digits.load_digits("signed"), digits.load_digits("signed")
  assert a.x is b.x and a.y is b.y  # cached: the same arrays
  assert digits.load_digits() is digits.load_digits("pixels")
  with pytest.raises(ValueError, match="read-only"):
    a.x[0, 0] = 5.0
  with pytest.raises(ValueError, match="variant must be one of"):
    digits.load_digits("mnist")
