"""The block-sparse attention kernel against its dense reference, and the reference by hand.

``interpret=True`` runs the GPU variant (each program loops over its live key
tiles); ``pltpu.InterpretParams`` runs the TPU variant (live tiles on a
sequential grid axis, block lists scalar-prefetched). Interpreters run the
grid in order: they cannot show a GPU race (``test_lowering.py`` checks that
no Triton kernel revisits an output block). Shapes are tiny: interpret mode
is slow.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret  # races
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.block_sparse_attention import (
  block_sparse_attention,
  block_sparse_attention_pallas,
  block_sparse_attention_reference,
)

BQ = BK = 16


def _inputs(seed, b, h, t, s, d, dtype=np.float32):
  """q, k, v in NumPy (eager jnp ops would each compile per shape)."""
  rng = np.random.default_rng(seed)
  return tuple(rng.normal(size=shape).astype(dtype)
               for shape in ((b, h, t, d), (b, h, s, d), (b, h, s, d)))


def _mask(seed, shape, dead_row=(0, 0, 1), dead_col=2):
  """Random block mask with one all-dead query block and one key block dead everywhere."""
  m = np.random.default_rng(seed).random(shape) < 0.6
  m[dead_row] = False
  m[..., dead_col] = False
  return m


def _poison(k, v, dead_col):
  """NaN in the key block no query attends: a kernel that read it would return NaN."""
  k, v = k.copy(), v.copy()
  k[:, :, dead_col * BK:(dead_col + 1) * BK] = np.nan
  v[:, :, dead_col * BK:(dead_col + 1) * BK] = np.nan
  return k, v


def _clean(x, dead_col):
  x = x.copy()
  x[:, :, dead_col * BK:(dead_col + 1) * BK] = 0
  return x


@pytest.mark.parametrize("causal,mask_bh", [(False, (2, 1)), (True, (1, 2)), (True, (2, 2))])
def test_gpu_variant_matches_reference(causal, mask_bh):
  # B = H = 2 with a mask per batch element, per head or both; 4 x 3 tiles (T != S).
  q, k, v = _inputs(0, 2, 2, 64, 48, 16)
  mask = _mask(1, (*mask_bh, 4, 3))
  kp, vp = _poison(k, v, 2)
  out = block_sparse_attention_pallas(q, kp, vp, mask, block_q=BQ, block_k=BK, causal=causal,
                                      interpret=True)
  ref = block_sparse_attention_reference(q, _clean(k, 2), _clean(v, 2), mask, block_q=BQ,
                                         block_k=BK, causal=causal)
  np.testing.assert_allclose(out, ref, atol=2e-6, rtol=1e-5)
  out = np.asarray(out)
  assert np.all(out[0, 0, BQ:2 * BQ] == 0)  # the all-dead query block
  assert np.abs(out).max() > 0.1


def test_bfloat16_within_tolerance():
  # bf16 inputs, float32 scores and accumulation; the kernel rounds p to bf16 for p @ v.
  q, k, v = (x.astype(jnp.bfloat16) for x in _inputs(2, 1, 2, 32, 64, 32))
  mask = _mask(3, (1, 2, 2, 4), dead_row=(0, 1, 0), dead_col=3)
  out = block_sparse_attention_pallas(q, k, v, mask, block_q=BQ, block_k=BK, causal=True,
                                      interpret=True)
  ref = block_sparse_attention_reference(q, k, v, mask, block_q=BQ, block_k=BK, causal=True)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.float32(out), np.float32(ref), atol=3e-2, rtol=3e-2)


def test_tpu_variant_matches_reference_without_races():
  """Two simulated cores; the key steps ("arbitrary") run in order on one core.

  NaN in the dead key block checks that its tiles are never copied in nor used.
  """
  q, k, v = _inputs(4, 1, 2, 32, 32, 16)
  mask = _mask(5, (1, 2, 2, 2), dead_row=(0, 1, 1), dead_col=1)
  kp, vp = _poison(k, v, 1)
  params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
  out = block_sparse_attention_pallas(q, kp, vp, mask, block_q=BQ, block_k=BK, causal=True,
                                      interpret=params)
  assert not tpu_interpret.races.races_found
  ref = block_sparse_attention_reference(q, _clean(k, 1), _clean(v, 1), mask, block_q=BQ,
                                         block_k=BK, causal=True)
  np.testing.assert_allclose(out, ref, atol=2e-6, rtol=1e-5)
  assert np.all(np.asarray(out)[0, 1, BQ:] == 0)


def _numpy_attention(q, k, v, visible, scale):
  """Per query row: softmax over the listed visible keys, zeros when there are none."""
  b, h, t, d = q.shape
  out = np.zeros((b, h, t, d))
  for bi in range(b):
    for hi in range(h):
      for ti in range(t):
        keys = [s for s in range(k.shape[2]) if visible(bi, hi, ti, s)]
        if not keys:
          continue
        z = np.array([scale * q[bi, hi, ti] @ k[bi, hi, s] for s in keys], np.float64)
        w = np.exp(z - z.max())
        out[bi, hi, ti] = (w / w.sum()) @ v[bi, hi, keys]
  return out


def test_reference_by_hand():
  # Block-causal frames: query block i sees key blocks <= i; block 1 of head 1 sees none.
  q, k, v = _inputs(6, 1, 2, 32, 32, 8)
  mask = np.array([[[[True, False], [True, True]], [[True, False], [False, False]]]])
  for causal in (False, True):
    ref = block_sparse_attention_reference(q, k, v, mask, block_q=BQ, block_k=BK,
                                           causal=causal, scale=0.5)
    want = _numpy_attention(
        q, k, v, lambda b, h, t, s, c=causal: mask[0, h, t // BQ, s // BK] and (not c or t >= s),
        0.5)
    np.testing.assert_allclose(ref, want, atol=1e-5)
  # A known answer: q = 0 gives uniform weights, the mean of the visible values.
  ref = block_sparse_attention_reference(np.zeros_like(q), k, v, mask, block_q=BQ, block_k=BK)
  np.testing.assert_allclose(ref[0, 0, :BQ], np.broadcast_to(v[0, 0, :BK].mean(0), (BQ, 8)),
                             atol=1e-5)
  np.testing.assert_allclose(ref[0, 0, BQ:], np.broadcast_to(v[0, 0].mean(0), (BQ, 8)), atol=1e-5)
  assert np.all(np.asarray(ref[0, 1, BQ:]) == 0)


def test_dispatcher_and_gradients_on_cpu():
  """On CPU the dispatcher is the reference; jax.grad goes through it and through the kernel."""
  q, k, v = _inputs(7, 1, 1, 32, 32, 16)
  mask = np.array([[[[True, False], [True, True]]]])
  kw = dict(block_q=BQ, block_k=BK, causal=True)
  loss = lambda fn: jax.jit(jax.grad(lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v, mask, **kw))),
                                     argnums=(0, 1, 2)))
  auto = loss(block_sparse_attention)(q, k, v)
  ref = loss(block_sparse_attention_reference)(q, k, v)
  ker = loss(lambda *a, **kw: block_sparse_attention_pallas(*a, **kw, interpret=True))(q, k, v)
  for a, r, c in zip(auto, ref, ker, strict=True):
    np.testing.assert_array_equal(a, r)
    np.testing.assert_allclose(c, r, atol=1e-6)
  assert np.abs(np.asarray(ref[1])).max() > 0


def test_bad_arguments_raise_before_tracing():
  q, k, v = (jnp.zeros(s) for s in ((1, 2, 32, 8), (1, 2, 48, 8), (1, 2, 48, 8)))
  mask = jnp.ones((1, 2, 2, 3), bool)
  kw = dict(block_q=BQ, block_k=BK)
  fns = (block_sparse_attention, block_sparse_attention_pallas, block_sparse_attention_reference)
  cases = [
      ((q[0], k, v, mask), kw, ValueError, r"q must have shape \(B, H, T, D\)"),
      ((q, k[..., :4], v, mask), kw, ValueError, r"k must have shape \(1, 2, S, 8\)"),
      ((q, k, v[:, :, :16], mask), kw, ValueError, "v must have the shape of k"),
      ((q, k, v.astype(jnp.bfloat16), mask), kw, TypeError, "float32 or bfloat16"),
      ((q, k, v, mask), dict(block_q=BQ, block_k=32), ValueError, "block_k must be a positive "
       "divisor of S = 48"),
      ((q, k, v, mask), dict(block_q=16.0, block_k=BK), TypeError, "block_q must be an int"),
      ((q, k, v, mask[..., :2]), kw, ValueError, r"block_mask must have shape \(1 or 1, 1 or 2"),
      ((q, k, v, mask.astype(jnp.int32)), kw, TypeError, "block_mask must be a bool array"),
      ((q, k, v, mask), dict(kw, causal=1), TypeError, "causal must be a bool"),
      ((q, k, v, mask), dict(kw, scale=jnp.float32(1)), TypeError, "scale must be None"),
  ]
  for args, kwargs, error, match in cases:
    for fn in fns:
      with pytest.raises(error, match=match):
        fn(*args, **kwargs)
  with pytest.raises(ValueError, match="block_q must be a power of two >= 16"):
    block_sparse_attention_pallas(q, k, v, jnp.ones((1, 2, 4, 3), bool), block_q=8, block_k=BK)
  with pytest.raises(TypeError, match="interpret must be a bool or a pltpu.InterpretParams"):
    block_sparse_attention_pallas(q, k, v, mask, **kw, interpret="yes")
  with pytest.raises(TypeError, match="use_kernel must be a bool or None"):
    block_sparse_attention(q, k, v, mask, **kw, use_kernel="yes")
