"""Block-wise compact moment storage: codecs and memory/accuracy targets."""

from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest

from jaxlab.optim import moment_storage as ms
from jaxlab.optim import quantized_adam


def test_int8_roundtrip_error_bounded_by_half_step_per_block():
  x = jax.random.normal(jax.random.key(0), (1000,)) * jnp.linspace(0.01, 10, 1000)
  codes, scales = ms.encode(x, "int8", "nearest", None, second_moment=False)
  assert codes.dtype == jnp.int8 and codes.shape == x.shape and scales.shape == (4,)
  y = ms.decode(codes, scales, "int8", False, jnp.float32)
  step = np.repeat(np.asarray(scales), 256)[:1000]
  assert np.all(np.abs(np.asarray(y - x)) <= step / 2 + 1e-7)


def test_float8_codes_are_ml_dtypes_casts_of_scaled_blocks():
  x = jax.random.normal(jax.random.key(1), (300,))
  codes, scales = ms.encode(x, "float8_e4m3fn", "nearest", None, second_moment=False)
  xs = np.asarray(x).reshape(-1)
  scale = np.repeat(np.asarray(scales), 256)[:300]
  expected = (xs / scale).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
  np.testing.assert_array_equal(np.asarray(codes).view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("storage", ["int8", "float8_e4m3fn"])
def test_second_moment_never_decodes_to_zero(storage):
  v = jnp.concatenate([jnp.array([1.0]), jnp.full((255,), 1e-14), jnp.zeros(4)])
  codes, scales = ms.encode(v, storage, "nearest", None, second_moment=True)
  back = np.asarray(ms.decode(codes, scales, storage, True, jnp.float32))
  assert np.all(back[:256] > 0) and np.all(back[256:] == 0)
  assert abs(back[0] - 1.0) < 1e-6


def _state_bytes(state):
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


@pytest.mark.parametrize("storage", ["int8", "float8_e4m3fn"])
def test_state_bytes_at_most_030_of_optax_adam(storage):
  params = {"w1": jnp.zeros((784, 1024)), "b1": jnp.zeros(1024),
            "w2": jnp.zeros((1024, 256)), "b2": jnp.zeros(256)}
  ours = jax.eval_shape(quantized_adam(1e-3, moment_storage=storage).init, params)
  ref = jax.eval_shape(optax.adam(1e-3).init, params)
  ratio = _state_bytes(ours) / _state_bytes(ref)
  assert ratio <= 0.3, ratio


@pytest.mark.parametrize("eps_root", [0.0, "array"])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("storage", ["bfloat16", "float8_e4m3fn", "int8"])
def test_update_is_adam_on_the_decoded_moments(storage, nesterov, eps_root, monkeypatch):
  """The step's update from the moments its state decodes to, by Adam's formula.

  int8 / float8 with a literal eps_root 0 form the denominator from the coded root with
  scalar bias corrections; the others the formula itself: both within float32 rounding.
  """
  from jaxlab.optim import scale_by_quantized_adam

  b1, b2, eps = 0.9, 0.999, 1e-3  # an eps that matters next to the smallest sqrt(v_hat)
  literal = eps_root != "array"
  eps_root = eps_root if literal else jnp.float32(0.0)
  roots = []  # the root argument of every encode the step traces
  codec = ms.encode_and_decode
  monkeypatch.setattr(ms, "encode_and_decode", lambda *a, root=False, **k: (
      roots.append(root), codec(*a, root=root, **k))[1])
  rule = scale_by_quantized_adam(b1, b2, eps, eps_root, nesterov=nesterov,
                                 moment_storage=storage)
  ks = jax.random.split(jax.random.key(3), 3)
  params = {"w": jnp.zeros((40, 30)), "b": jnp.zeros(7)}
  grads = [jax.tree.map(lambda p, k=k: jax.random.normal(k, p.shape)
                        * jnp.exp(jax.random.uniform(k, p.shape, minval=-4.0, maxval=4.0)),
                        params) for k in ks]
  state = rule.init(params)
  for g in grads:
    u, state = jax.jit(rule.update)(g, state)
  t = len(grads)
  # the root path runs exactly where documented: int8 / float8 with a literal eps_root 0
  assert any(roots) == (literal and storage != "bfloat16"), roots

  def dec(codes, scales, second):
    return jax.tree.map(lambda c, s: ms.decode(c, s, storage, second, jnp.float32), codes,
                        scales if scales is not None else jax.tree.map(lambda _: None, codes),
                        is_leaf=lambda x: x is None)

  m, v = dec(state.mu, state.mu_scale, False), dec(state.nu, state.nu_scale, True)
  g = grads[-1]
  # float32 bias corrections as the jitted step forms them (1 - b^t cancels, so an ulp of
  # b^t is many ulps of the difference), then the formula in float64
  bc = lambda b, t: np.float64(jax.jit(lambda c: 1 - b ** c)(jnp.int32(t)))
  for name in params:
    mm, vv, gg = (np.asarray(x[name], np.float64) for x in (m, v, g))
    if nesterov:
      m_hat = b1 * mm / bc(b1, t + 1) + (1 - b1) * gg / bc(b1, t)
    else:
      m_hat = mm / bc(b1, t)
    ref = m_hat / (np.sqrt(vv / bc(b2, t)) + eps)
    np.testing.assert_allclose(u[name], ref, rtol=2e-6, atol=0)  # a few float32 roundings


@pytest.mark.parametrize("storage", ["bfloat16", "float8_e4m3fn", "int8"])
def test_least_squares_final_loss_within_5_percent_of_fp32(storage):
  k1, k2, k3 = jax.random.split(jax.random.key(2), 3)
  a = jax.random.normal(k1, (256, 64))
  w_true = jax.random.normal(k2, (64, 8))
  b = a @ w_true + 0.1 * jax.random.normal(k3, (256, 8))
  loss = lambda w: 0.5 * jnp.mean((a @ w - b) ** 2)

  def final_loss(opt):
    def body(carry, _):
      w, s = carry
      u, s = opt.update(jax.grad(loss)(w), s, w)
      return (optax.apply_updates(w, u), s), None
    w0 = jnp.zeros((64, 8))
    (w, _), _ = jax.lax.scan(body, (w0, opt.init(w0)), length=600)
    return loss(w)

  fp32 = float(jax.jit(lambda: final_loss(optax.adam(3e-2)))())
  ours = float(jax.jit(lambda: final_loss(quantized_adam(3e-2, moment_storage=storage)))())
  assert abs(ours - fp32) <= 0.05 * fp32, (ours, fp32)


def _stream_bits_np(n, key):
  """random_bits(key, (n,)) written out in numpy: lowbias32((i * phi + k0) ^ k1)."""
  k0, k1 = (int(w) for w in np.asarray(jax.random.key_data(key)).reshape(-1)[[0, -1]])

  def lowbias32(x):
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)

  i = np.arange(n, dtype=np.uint64)
  return lowbias32(((i * 0x9E3779B9 + k0) & 0xFFFFFFFF) ^ k1)


_E4M3FN_GRID = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
                                .astype(np.float64)))
_E4M3FN_GRID = _E4M3FN_GRID[np.isfinite(_E4M3FN_GRID)]  # 0 .. 448


def _stochastic_e4m3fn_np(y, r):
  """Stochastic rounding of float32 ``y`` to float8_e4m3fn, from the grid and exact fractions.

  Between grid neighbours ``lo <= |y| < hi`` it rounds up iff the low ``k`` random bits
  fall below ``(|y| - lo) / (hi - lo) * 2**k``, ``k`` the number of float32 bits the
  rounding drops (capped at 32), saturating at 448.
  """
  out = np.empty(y.shape, np.float32)
  for i, (v, bits) in enumerate(zip(y.astype(np.float64), r, strict=True)):
    a = abs(v)
    j = np.searchsorted(_E4M3FN_GRID, a, side="right") - 1
    lo = _E4M3FN_GRID[j]
    if a == lo or j + 1 == len(_E4M3FN_GRID):
      q = lo
    else:
      hi = _E4M3FN_GRID[j + 1]
      k = min(32, round(np.log2((hi - lo) / np.spacing(np.float32(a)))))
      frac = Fraction(a - lo) / Fraction(hi - lo)  # exact: all are dyadic
      q = hi if (int(bits) % 2**k) < int(frac * 2**k) else lo
    out[i] = np.copysign(q, v)
  return out


@pytest.mark.parametrize("storage", ["int8", "float8_e4m3fn"])
@pytest.mark.parametrize("second_moment", [False, True])
def test_codec_bit_identical_to_numpy_reference(storage, second_moment):
  """encode / decode against an independent numpy + ml_dtypes statement of the codec.

  Ragged last block, a zero block, NaN / inf / huge entries, tiny entries next to large
  ones (second-moment floor, float8 subnormals) and stochastic rounding; no float32
  subnormals (XLA:CPU flushes them in the absmax).
  """
  rng = np.random.default_rng(5)
  x = (rng.standard_normal(700) * np.exp(rng.uniform(-12, 3, 700))).astype(np.float32)
  x[256:512] = 0.0
  x[20] = -0.0
  if second_moment:
    x = x * x  # v >= 0 (below, -inf: a negative v is clamped to 0)
  x[[3, 10, 600]] = [np.nan, -np.inf, 3e38]
  key = jax.random.key(11)
  codes, scales = ms.encode(jnp.asarray(x), storage, "stochastic", key, second_moment)
  back = ms.decode(codes, scales, storage, second_moment, jnp.float32)

  code_max = {"int8": 127.0, "float8_e4m3fn": 448.0}[storage]
  b = np.sqrt(np.maximum(x, 0), dtype=np.float32) if second_moment else x
  blocks = np.pad(b, (0, 768 - 700)).reshape(3, 256)
  finite = np.isfinite(blocks)
  absmax = np.where(finite, np.abs(blocks), 0).max(axis=1)
  scale = absmax * np.float32(1 / code_max)  # the code's reciprocal multiplications
  y = blocks * (np.float32(1) / np.where(scale > 0, scale, np.float32(1)))[:, None]
  r = _stream_bits_np(768, key).reshape(3, 256)
  if storage == "int8":
    u = (r >> 8).astype(np.float32) * np.float32(2.0**-24)
    q = np.clip(np.floor(y + u), -127, 127)
    smallest = 1.0
  else:
    q = _stochastic_e4m3fn_np(y.reshape(-1), r.reshape(-1)).reshape(y.shape)
    smallest = 2.0**-9
  if second_moment:
    q = np.where((q == 0) & (y > 0), smallest, q)
  q = np.where(finite, q, -128 if storage == "int8" else np.nan).astype(np.float32)
  want_codes = q.reshape(-1)[:700].astype(np.int8 if storage == "int8" else
                                          ml_dtypes.float8_e4m3fn)
  np.testing.assert_array_equal(np.asarray(scales).view(np.uint32), scale.view(np.uint32))
  np.testing.assert_array_equal(np.asarray(codes).view(np.uint8), want_codes.view(np.uint8))

  value = want_codes.astype(np.float32)
  value = np.where(value == -128, np.nan, value) if storage == "int8" else value
  want = value * np.repeat(scale, 256)[:700]
  want = want * want if second_moment else want
  got = np.asarray(back)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)].view(np.uint32),
                                want[~np.isnan(want)].view(np.uint32))


def test_e4m3fn_stochastic_rounding_equals_quantize_f32():
  """The encoder's float8 rounding with its constants worked in, against the generic one.

  Every float32 exponent from subnormal to past 448 (saturation), random, zero and
  tie-making mantissas, random, all-zero and all-one bits.
  """
  from jaxlab.quant.float_format import FloatFormat, quantize_f32

  rng = np.random.default_rng(3)
  n = 1 << 16
  e = rng.integers(0, 136, n).astype(np.uint32)
  m = rng.integers(0, 1 << 23, n).astype(np.uint32)
  m[: n // 4] &= 0x7FF000
  m[n // 4: n // 2] = 0
  y = ((rng.integers(0, 2, n).astype(np.uint32) << 31) | (e << 23) | m).view(np.float32)
  r = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
  r[:: 7] = 0
  r[1:: 7] = 0xFFFFFFFF
  r[2:: 7] = m[2:: 7]  # bits equal to the dropped mantissa bits: the strict comparison
  f = FloatFormat.E4M3FN
  want = jax.jit(lambda y, r: quantize_f32(y, f.exp_bits, f.man_bits, f.max_value,
                                          "stochastic", r))(y, r)
  got = jax.jit(ms._e4m3fn_stochastic)(y, r)
  np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
