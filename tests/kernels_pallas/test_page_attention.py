"""The page-scoring and page-attention kernels against their references, the references by
hand, and the lowering for CUDA (Triton) and TPU (Mosaic) via ``jax.export`` on this host.

``interpret=True`` runs the GPU variants, ``pltpu.InterpretParams`` the TPU variants
(in order: an interpreter cannot show a GPU race; the lowering test checks that no Triton
program writes another's output block). Lowering proves the kernels lower for that
platform (block shapes, ops, scalar prefetch), not that they compile or run on a device
(see ``test_lowering.py``).
"""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.page_attention import (
  page_attention,
  page_attention_pallas,
  page_attention_reference,
  page_scores,
  page_scores_pallas,
  page_scores_reference,
)


def _lowering_helpers():
  """``test_lowering.py``'s export helpers (loaded by path: tests is no package)."""
  path = pathlib.Path(__file__).with_name("test_lowering.py")
  spec = importlib.util.spec_from_file_location("_page_attention_lowering", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_LOWERING = _lowering_helpers()
_kernels_in, _lower, _triton_revisits = (_LOWERING._kernels_in, _LOWERING._lower,
                                         _LOWERING._triton_revisits)

P = 16  # page size


def _inputs(seed, b, h, s, d, dtype=np.float32):
  rng = np.random.default_rng(seed)
  return tuple(rng.normal(size=shape).astype(dtype)
               for shape in ((b, h, d), (b, h, s, d), (b, h, s, d)))


def _summaries(k, page=P):
  b, h, s, d = k.shape
  paged = k.reshape(b, h, s // page, page, d)
  return paged.max(3), paged.min(3)


def _dense(q, k, v, length):
  """Full attention of one query per head over the first ``length`` keys (NumPy, float64)."""
  z = np.einsum("bhd,bhsd->bhs", q, k).astype(np.float64) / np.sqrt(q.shape[-1])
  z[..., length:] = -np.inf
  w = np.exp(z - z.max(-1, keepdims=True))
  return np.einsum("bhs,bhsd->bhd", w / w.sum(-1, keepdims=True), v)


def _selection(seed, b, h, num_pages, n):
  rng = np.random.default_rng(seed)
  pages = np.stack([rng.permutation(num_pages)[:n] for _ in range(b * h)]).reshape(b, h, n)
  count = rng.integers(0, n + 1, (b, h))
  count[0, 0] = n  # a full list and an empty one
  count[-1, -1] = 0
  return pages.astype(np.int32), count.astype(np.int32)


def _by_hand(q, k, v, pages, count, length):
  """Per (batch, head): softmax over the listed pages' filled tokens (NumPy)."""
  b, h, d = q.shape
  out = np.zeros((b, h, d))
  for bi in range(b):
    for hi in range(h):
      keys = [j * P + i for j in pages[bi, hi, :count[bi, hi]] for i in range(P)
              if j * P + i < length]
      if keys:
        z = np.array([q[bi, hi] @ k[bi, hi, s] for s in keys], np.float64) / np.sqrt(d)
        w = np.exp(z - z.max())
        out[bi, hi] = (w / w.sum()) @ v[bi, hi, keys]
  return out


def test_full_budget_equals_full_attention():
  # every filled page selected (in any order, the unfilled last page too): full attention
  q, k, v = _inputs(0, 2, 3, 80, 8)
  length = 70
  order = np.stack([np.random.default_rng(i).permutation(5) for i in range(6)])
  pages = order.reshape(2, 3, 5).astype(np.int32)
  count = np.full((2, 3), 5, np.int32)
  want = _dense(q, k, v, length)
  ref = page_attention_reference(q, k, v, pages, count, jnp.int32(length), page_size=P)
  np.testing.assert_allclose(ref, want, atol=2e-6)
  for interpret in (True, pltpu.InterpretParams()):
    out = page_attention_pallas(q, k, v, pages, count, jnp.int32(length), page_size=P,
                                interpret=interpret)
    np.testing.assert_allclose(out, want, atol=2e-6)


def test_reference_by_hand_and_kernels_match_it():
  q, k, v = _inputs(1, 2, 2, 96, 8)
  pages, count = _selection(2, 2, 2, 6, 3)
  length = jnp.int32(90)  # the last page half filled
  want = _by_hand(q, k, v, pages, count, 90)
  ref = page_attention_reference(q, k, v, pages, count, length, page_size=P)
  np.testing.assert_allclose(ref, want, atol=2e-6)
  assert np.all(np.asarray(ref)[-1, -1] == 0)  # nothing selected: zeros
  # the (B, S, H, D) layout reads the same pages
  bshd = page_attention(q, k.swapaxes(1, 2), v.swapaxes(1, 2), pages, count, length,
                        page_size=P, kv_layout="bshd")
  np.testing.assert_allclose(bshd, ref, atol=1e-7)
  # pages not selected are never read: NaN there changes nothing
  kp, vp = k.copy(), v.copy()
  for bi in range(2):
    for hi in range(2):
      for j in set(range(6)) - set(pages[bi, hi, :count[bi, hi]]):
        kp[bi, hi, j * P:(j + 1) * P] = np.nan
        vp[bi, hi, j * P:(j + 1) * P] = np.nan
  params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
  for interpret in (True, params):
    out = page_attention_pallas(q, kp, vp, pages, count, length, page_size=P,
                                interpret=interpret)
    np.testing.assert_allclose(out, want, atol=2e-6)


def test_bfloat16_within_tolerance():
  q, k, v = (x.astype(jnp.bfloat16) for x in _inputs(3, 1, 2, 64, 32))
  pages, count = _selection(4, 1, 2, 4, 3)
  ref = page_attention_reference(q, k, v, pages, count, jnp.int32(64), page_size=P)
  out = page_attention_pallas(q, k, v, pages, count, jnp.int32(64), page_size=P,
                              interpret=True)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.float32(out), np.float32(ref), atol=2e-2, rtol=2e-2)


def test_page_scores_bound_and_kernels():
  q, k, _ = _inputs(5, 2, 3, 64, 8)
  kmax, kmin = _summaries(k)
  ref = np.asarray(page_scores_reference(q, kmax, kmin))
  # by hand: sum_d max(q_d kmax_d, q_d kmin_d), an upper bound of every q . k in the page
  want = np.maximum(q[:, :, None] * kmax, q[:, :, None] * kmin).sum(-1)
  np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
  dots = np.einsum("bhd,bhjpd->bhjp", q, k.reshape(2, 3, 4, P, 8)).max(-1)
  assert np.all(ref >= dots - 1e-5) and np.any(ref > dots + 1e-3)
  # a one-token page: the bound is the dot product itself
  np.testing.assert_allclose(page_scores_reference(q, k, k), np.einsum("bhd,bhsd->bhs", q, k),
                             rtol=1e-5, atol=1e-5)
  for interpret in (True, pltpu.InterpretParams()):
    np.testing.assert_allclose(page_scores_pallas(q, kmax, kmin, interpret=interpret), ref,
                               rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(page_scores(q, kmax, kmin), ref)  # CPU: the reference


def test_bad_arguments_raise_before_tracing():
  q, k, v = (jnp.zeros(s) for s in ((1, 2, 8), (1, 2, 64, 8), (1, 2, 64, 8)))
  pages, count, length = jnp.zeros((1, 2, 3), jnp.int32), jnp.ones((1, 2), jnp.int32), \
      jnp.int32(64)
  fns = (page_attention, page_attention_pallas, page_attention_reference)
  cases = [
      ((q[0], k, v, pages, count, length), {}, ValueError, r"q must have shape \(B, H, D\)"),
      ((q, k[..., :4], v, pages, count, length), {}, ValueError, r"k must have shape"),
      ((q, k, v[:, :, :32], pages, count, length), {}, ValueError, "v must have the shape"),
      ((q, k, v.astype(jnp.bfloat16), pages, count, length), {}, TypeError, "float32 or bf"),
      ((q, k, v, pages[0], count, length), {}, ValueError, r"pages must be an int array"),
      ((q, k, v, pages, count[0], length), {}, ValueError, r"count must be an int array"),
      ((q, k, v, pages, count, jnp.ones(2, jnp.int32)), {}, ValueError, "length must be"),
      ((q, k, v, pages, count, length), dict(page_size=24), ValueError, "positive divisor"),
      ((q, k, v, pages, count, length), dict(page_size=16.0), TypeError, "page_size must be"),
      ((q, k, v, pages, count, length), dict(scale=jnp.float32(1)), TypeError, "scale must"),
  ]
  for args, kwargs, error, match in cases:
    for fn in fns:
      with pytest.raises(error, match=match):
        fn(*args, **{"page_size": P, **kwargs})
  with pytest.raises(ValueError, match="power of two >= 16 for the kernel"):
    page_attention_pallas(q, k, v, pages, count, length, page_size=8)
  with pytest.raises(TypeError, match="interpret must be"):
    page_attention_pallas(q, k, v, pages, count, length, page_size=P, interpret="yes")
  with pytest.raises(ValueError, match="kv_layout must be"):
    page_attention(q, k, v, pages, count, length, page_size=P, kv_layout="sbhd")
  with pytest.raises(ValueError, match=r"kmax must have shape \(1, 2, P, 8\)"):
    page_scores(q, k[..., :4], k[..., :4])
  with pytest.raises(TypeError, match="use_kernel must be"):
    page_scores(q, k, k, use_kernel="yes")


# -- lowering for CUDA and TPU on this CPU host ------------------------------------------------
def _attention_args(dtype):
  # batch 2, 3 heads, D = 40 (padded to 64 for Triton; the full dimension on TPU),
  # 8 pages of 16, 3 selected
  q, kv = jnp.zeros((2, 3, 40), dtype), jnp.zeros((2, 3, 128, 40), dtype)
  return q, kv, kv, jnp.zeros((2, 3, 3), jnp.int32), jnp.ones((2, 3), jnp.int32), jnp.int32(9)


def _attn(fn):
  return lambda *a: fn(*a, page_size=P)


def _scores_args(dtype):
  return jnp.zeros((2, 3, 40), dtype), jnp.zeros((2, 3, 24, 40), dtype), \
      jnp.zeros((2, 3, 24, 40), dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_kernels_lower(platform, dtype):
  assert _kernels_in(_lower(_attn(page_attention_pallas), platform,
                            *_attention_args(dtype))) == {platform}
  assert _kernels_in(_lower(page_scores_pallas, platform, *_scores_args(dtype))) == {platform}


def test_gpu_kernels_write_each_block_once():
  assert _triton_revisits(_attn(page_attention_pallas), *_attention_args("float32")) == (1, [])
  assert _triton_revisits(page_scores_pallas, *_scores_args("float32")) == (1, [])


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
def test_dispatchers_pick_by_lowering_platform(platform):
  want = {platform} - {"cpu"}
  assert _kernels_in(_lower(_attn(page_attention), platform, *_attention_args("float32"))) == want
  assert _kernels_in(_lower(page_scores, platform, *_scores_args("float32"))) == want
  # the cache layout (B, S, H, D) goes through the same dispatch
  q, k, v, pages, count, length = _attention_args("float32")
  fn = lambda q, k, v, p, c, n: page_attention(q, k, v, p, c, n, page_size=P,  # noqa: E731
                                               kv_layout="bshd")
  args = (q, k.swapaxes(1, 2), v.swapaxes(1, 2), pages, count, length)
  assert _kernels_in(_lower(fn, platform, *args)) == want


def test_dispatcher_runs_reference_on_cpu():
  q, k, v = _inputs(6, 1, 2, 64, 8)
  pages, count = _selection(7, 1, 2, 4, 2)
  args = (q, k, v, pages, count, jnp.int32(60))
  np.testing.assert_array_equal(jax.jit(_attn(page_attention))(*args),
                                page_attention_reference(*args, page_size=P))
