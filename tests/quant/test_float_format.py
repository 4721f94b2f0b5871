"""Tests for jaxlab.quant: bit-exact agreement with ml_dtypes, rounding modes."""

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxlab.quant import FloatFormat, quantize, quantize_bits, quantize_tree

TINY32 = np.finfo(np.float32).tiny

ML_DTYPE_CASES = [
    ("BF16", ml_dtypes.bfloat16),
    ("FP16", np.float16),
    ("E5M2", ml_dtypes.float8_e5m2),
    ("E4M3", ml_dtypes.float8_e4m3),
    ("E3M4", ml_dtypes.float8_e3m4),
    ("E4M3FN", ml_dtypes.float8_e4m3fn),
]


def _all_values(dtype):
  """Every finite value of a 8- or 16-bit dtype, as float32."""
  width = np.dtype(dtype).itemsize
  raw = np.arange(2 ** (8 * width), dtype=np.uint8 if width == 1 else np.uint16)
  v = raw.view(dtype).astype(np.float32)
  return v[np.isfinite(v)]


def _inputs(fmt, dtype, rng):
  """Log-uniform values over the whole range, every representable value, every
  midpoint between neighbours (ties) and their float32 neighbours."""
  lo = np.log2(fmt.min_subnormal) - 3
  mag = 2.0 ** rng.uniform(lo, np.log2(fmt.max_finite), 50_000)
  x = (mag * rng.choice([-1, 1], mag.size)).astype(np.float32)
  vals = np.unique(_all_values(dtype))
  mids = ((vals[1:].astype(np.float64) + vals[:-1]) / 2).astype(np.float32)
  x = np.concatenate([x, vals, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
  # Finite, in range; float32 subnormal inputs are exempt (XLA CPU flushes them).
  keep = (np.abs(x) <= fmt.max_finite) & ((np.abs(x) >= TINY32) | (x == 0))
  return x[keep]


@pytest.mark.parametrize("name,dtype", ML_DTYPE_CASES)
def test_nearest_matches_ml_dtypes_bit_for_bit(name, dtype):
  fmt = getattr(FloatFormat, name)
  x = _inputs(fmt, dtype, np.random.default_rng(0))
  ours = np.asarray(jax.jit(lambda v: quantize(v, fmt))(x))
  ref = x.astype(dtype).astype(np.float32)
  mismatch = ours.view(np.uint32) != ref.view(np.uint32)
  assert not mismatch.any(), (x[mismatch][:5], ours[mismatch][:5], ref[mismatch][:5])


# bfloat16's subnormals are float32 subnormals, exempt on CPU (see module docstring).
@pytest.mark.parametrize("name,dtype", [c for c in ML_DTYPE_CASES if c[0] != "BF16"])
def test_subnormals_of_target_are_kept(name, dtype):
  fmt = getattr(FloatFormat, name)
  sub = np.float32(fmt.min_subnormal * 3)  # 3 smallest subnormals, below min normal
  assert sub < fmt.min_normal and sub >= TINY32
  out = np.asarray(quantize(jnp.float32(sub), fmt))
  assert out == sub == np.float32(np.float32(sub).astype(dtype))


def test_fp32_format_is_identity_on_normals():
  x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32) * 1e3
  x = np.concatenate([x, [np.finfo(np.float32).max, TINY32, -TINY32]]).astype(np.float32)
  out = np.asarray(quantize(x, FloatFormat(8, 23)))
  np.testing.assert_array_equal(out.view(np.uint32), x.view(np.uint32))


def test_hand_computed_values():
  # E4M3: 0.1 = 1.6 * 2^-4 -> mantissa 1.625 (3 bits) -> 0.1015625.
  assert float(quantize(jnp.float32(0.1), FloatFormat.E4M3)) == 0.1015625
  # ties to even: 1 + 1/16 halfway between 1 and 1.125 -> 1.0; 1 + 3/16 -> 1.25.
  assert float(quantize(jnp.float32(1.0625), FloatFormat.E4M3)) == 1.0
  assert float(quantize(jnp.float32(1.1875), FloatFormat.E4M3)) == 1.25
  # truncate toward zero.
  assert float(quantize(jnp.float32(-1.2), FloatFormat.E4M3, rounding="truncate")) == -1.125
  # M = 0: only powers of two.
  assert float(quantize(jnp.float32(2.9), FloatFormat(4, 0))) == 2.0
  assert float(quantize(jnp.float32(3.1), FloatFormat(4, 0))) == 4.0


def test_saturation_and_specials():
  fmt = FloatFormat.E4M3
  x = jnp.array([1e4, -1e4, 250.0, jnp.inf, -jnp.inf, jnp.nan, 0.0, -0.0], jnp.float32)
  out = np.asarray(quantize(x, fmt))
  np.testing.assert_array_equal(out[:3], [240.0, -240.0, 240.0])
  assert out[3] == np.inf and out[4] == -np.inf and np.isnan(out[5])
  assert out[6] == 0.0 and np.signbit(out[7])
  assert float(quantize(jnp.float32(1e6), FloatFormat.E4M3FN)) == 448.0
  assert float(quantize(jnp.float32(1e6), FloatFormat.E4M3FN, rounding="stochastic",
                        key=jax.random.key(0))) == 448.0


def test_stochastic_rounding_is_unbiased_and_on_grid():
  fmt = FloatFormat(5, 2)
  x = jnp.full((200_000,), 1.1, jnp.float32)  # between 1.0 and 1.25
  q = np.asarray(quantize(x, fmt, rounding="stochastic", key=jax.random.key(3)))
  assert set(np.unique(q)) == {1.0, 1.25}
  # P(up) = 0.4; standard error of the mean is 0.25 * sqrt(.24 / 2e5) ~ 2.7e-4.
  assert abs(q.mean() - 1.1) < 1.5e-3
  # Below the smallest subnormal too.
  tiny = fmt.min_subnormal
  y = jnp.full((200_000,), 0.3 * tiny, jnp.float32)
  qy = np.asarray(quantize(y, fmt, rounding="stochastic", key=jax.random.key(4)))
  assert set(np.unique(qy)) <= {0.0, np.float32(tiny)}
  assert abs(qy.mean() / tiny - 0.3) < 5e-3


def test_stochastic_is_deterministic_per_key():
  x = jax.random.normal(jax.random.key(0), (1000,))
  a = quantize(x, FloatFormat.E5M2, rounding="stochastic", key=jax.random.key(1))
  b = quantize(x, FloatFormat.E5M2, rounding="stochastic", key=jax.random.key(1))
  c = quantize(x, FloatFormat.E5M2, rounding="stochastic", key=jax.random.key(2))
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_traced_bit_widths_one_compilation_matches_static():
  x = jax.random.normal(jax.random.key(0), (512,)) * 10
  chex.clear_trace_counter()
  sweep = jax.jit(jax.vmap(chex.assert_max_traces(lambda m: quantize_bits(x, 8, m), n=1)))
  out = sweep(jnp.arange(0, 24))
  for m in (0, 3, 7, 23):
    np.testing.assert_array_equal(out[m], quantize(x, FloatFormat(8, m)))
  ex = jax.jit(jax.vmap(lambda e: quantize_bits(x, e, 3)))(jnp.array([4, 5]))
  e4m3 = np.asarray(x).astype(ml_dtypes.float8_e4m3).astype(np.float32)
  np.testing.assert_array_equal(ex[0], e4m3)
  np.testing.assert_array_equal(ex[1], quantize(x, FloatFormat(5, 3)))
  sweep(jnp.arange(1, 25))  # new mantissa widths, same shape: no second trace


def test_dtype_and_shape_preserved():
  x = jnp.linspace(-3, 3, 12, dtype=jnp.bfloat16).reshape(3, 4)
  y = quantize(x, FloatFormat.E4M3)
  assert y.dtype == jnp.bfloat16 and y.shape == (3, 4)
  np.testing.assert_array_equal(
      np.asarray(y, np.float32),
      np.asarray(x, np.float32).astype(ml_dtypes.float8_e4m3).astype(np.float32))


def test_bad_input_raises_clear_errors():
  with pytest.raises(ValueError, match="exp_bits"):
    FloatFormat(9, 3)
  with pytest.raises(ValueError, match="exp_bits"):
    FloatFormat(1, 3)
  with pytest.raises(ValueError, match="man_bits"):
    FloatFormat(5, 24)
  with pytest.raises(ValueError, match="max_value"):
    FloatFormat(4, 3, max_value=449.0)
  with pytest.raises(TypeError, match="exp_bits"):
    FloatFormat(4.0, 3)
  with pytest.raises(ValueError, match="rounding"):
    quantize(jnp.ones(3), FloatFormat.BF16, rounding="up")
  with pytest.raises(ValueError, match="key"):
    quantize(jnp.ones(3), FloatFormat.BF16, rounding="stochastic")
  with pytest.raises(TypeError, match="floating"):
    quantize(jnp.ones(3, jnp.int32), FloatFormat.BF16)


def test_presets():
  assert FloatFormat.E4M3.max_finite == 240.0
  assert FloatFormat.E4M3FN.max_finite == 448.0
  assert FloatFormat.E5M2.max_finite == float(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max)
  assert FloatFormat.E3M4.max_finite == float(ml_dtypes.finfo(ml_dtypes.float8_e3m4).max)
  assert FloatFormat.FP16.min_subnormal == float(ml_dtypes.finfo(np.float16).smallest_subnormal)


def test_quantize_tree_per_leaf_keys():
  tree = {"a": jnp.full((1000,), 1.1), "b": jnp.full((1000,), 1.1)}
  out = quantize_tree(tree, FloatFormat(5, 2), rounding="stochastic", key=jax.random.key(0))
  assert not np.array_equal(out["a"], out["b"])
  assert quantize_tree(tree, None) is tree


def test_stochastic_is_unbiased_far_below_the_smallest_subnormal():
  x = jnp.full((400_000,), 2.0**-20)  # 2**-11 of E4M3's smallest subnormal 2**-9
  q = np.asarray(quantize(x, FloatFormat.E4M3, rounding="stochastic", key=jax.random.key(5)))
  assert set(np.unique(q)) <= {0.0, 2.0**-9}
  # P(up) = 2**-11: about 195 of 400k, standard deviation 14.
  assert abs(q.mean() / 2.0**-20 - 1) < 0.25


def test_max_value_beyond_the_exponent_range_and_narrow_dtypes():
  with pytest.raises(ValueError, match="max_value"):
    FloatFormat(4, 3, max_value=2.0**20)
  assert FloatFormat(4, 3, max_value=480.0).max_finite == 480.0
  # A finite float16 input never becomes inf through a format wider than float16.
  out = quantize(jnp.float16(65504), FloatFormat.BF16)
  assert np.isfinite(np.asarray(out)) and out.dtype == jnp.float16
