"""Block-wise compact moment storage: codecs and memory/accuracy targets."""

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
