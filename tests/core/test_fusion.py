"""materialize: the same bits as its input, for every kind of float value."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxlab.core import materialize


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_materialize_returns_the_same_bits(dtype):
  info = ml_dtypes.finfo(dtype)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, float(info.max),
                      -float(info.max), float(info.smallest_subnormal), 1.0, -3.5], np.float32)
  x = jnp.concatenate([jnp.asarray(special, dtype),
                       jax.random.normal(jax.random.key(0), (1000,), dtype) * 1e3])
  for fn in (materialize, jax.jit(materialize)):
    y = fn(x)
    assert y.dtype == x.dtype
    bits = lambda a: np.asarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)
    same = bits(y) == bits(x)
    xf = np.asarray(x, np.float32)
    # NaN payloads may be quieted, and subnormals flushed to a zero of their sign where
    # the backend flushes them in arithmetic (XLA:CPU does); every other value keeps its
    # exact bits (the sign of zero too)
    sub = (xf != 0) & (np.abs(xf) < float(info.tiny))
    flushed = sub & (np.asarray(y, np.float32) == 0) & (np.signbit(y) == np.signbit(xf))
    assert np.all(same | np.isnan(xf) | flushed), np.asarray(x)[~same]
    assert np.array_equal(np.isnan(np.asarray(y, np.float32)), np.isnan(np.asarray(x, np.float32)))


def test_materialize_passes_non_floats_through():
  x = jnp.arange(-5, 5, dtype=jnp.int8)
  assert materialize(x) is x
