r"""Decode-time page scoring and attention over selected KV pages as Pallas kernels, with
their jnp references (FreeKV / Quest retrieval).

One query per (batch, head) at a decode step; the KV cache head-major ``(B, H, S, D)`` in
pages of ``page_size`` tokens (page ``j`` holds positions ``j p .. j p + p - 1``).

**Page scores** (Quest's bound, FreeKV's page summaries): with the elementwise maximum and
minimum key of each page, ``kmax, kmin (B, H, P, D)``,

.. math::
  s_{bhj} = \sum_d \max(q_{bhd}\, k^{\max}_{bhjd},\ q_{bhd}\, k^{\min}_{bhjd})
  \;\ge\; \max_{s \in \text{page } j} q_{bh} \cdot k_{bhs},

an upper bound of every score in the page.

**Page attention**: attention of ``q`` over the tokens of the selected pages only,

.. math::
  o_{bh} = \sum_{s \in V_{bh}} \frac{e^{c\, q_{bh} \cdot k_{bhs}}}{\sum_{s' \in V_{bh}}
  e^{c\, q_{bh} \cdot k_{bhs'}}}\, v_{bhs}, \qquad
  V_{bh} = \{ j p + i : j \in \text{pages}_{bh}[:\text{count}_{bh}],\ 0 \le i < p,\
  j p + i < \text{length} \},

``c = scale`` (default ``1/sqrt(D)``), ``o = 0`` when ``V`` is empty. ``pages (B, H, n)``
lists page indices (no repeats among the first ``count``); entries past ``count`` are
ignored. With every filled page selected it is full attention over the ``length``
filled tokens (tested). The references gather the selected pages (``n p`` tokens, not
``S``) and run a float32 softmax.

Kernels (picked by the platform lowered for, ``lax.platform_dependent``, as in
:mod:`kernels_pallas.block_sparse_attention`):

* GPU (Triton): grid ``(B, H)``, one program per query. Scores: the program reads the
  ``(P, D)`` summaries of its head (``P`` and ``D`` zero-padded to powers of two, Triton's
  sizes; padded pages are sliced off) and reduces over ``D``. Attention: the program loops
  (``lax.fori_loop`` to ``count``) over its live pages, reading ``(p, D)`` at a time, with
  the online softmax of FlashAttention in float32. One query row is below ``tl.dot``'s 16,
  so the products are elementwise multiply-and-sum. Each output block is written by one
  program (no races between concurrent programs).
* TPU (Mosaic): scores: grid ``(B, H)``, blocks ``(1, D)`` (query) and ``(P, D)``
  (summaries) — full array dimensions, which Mosaic accepts for any size — and an output
  laid out ``(B, H, P, 1)``. Attention: grid ``(B, H, n)`` with the page axis
  ``"arbitrary"`` (sequential), ``m, l, acc`` in VMEM scratch; the page lists, counts and
  ``length`` are scalar-prefetched into SMEM (``pltpu.PrefetchScalarGridSpec``) and the
  key/value index maps read step ``j``'s page from them, so only selected pages are copied
  in; steps past ``count`` repeat the last live page (no new copy) and skip the compute,
  as splash attention does. Blocks ``(p, D)``: ``D`` is the full dimension and ``page_size``
  a multiple of 16 (Mosaic's float32 and bfloat16 row tiles); the query block ``(1, D)``
  is a full-dimension block. SMEM holds ``B H n + B H + 1`` int32 words.

What the tests prove: interpret mode checks the kernels' arithmetic and indexing against
the references on CPU; ``jax.export`` for ``cuda`` and ``tpu`` checks that they lower
(block shapes, ops, scalar prefetch), not that they compile or run fast on a device.

References:
  Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference",
  arXiv:2406.10774, 2024 (min/max page summaries and the score bound).
  Liu et al., "FreeKV: Boosting KV Cache Retrieval for Efficient LLM Inference",
  arXiv:2505.13109, 2025.
  Dao et al., "FlashAttention", arXiv:2205.14135, 2022 (online softmax, Alg. 1).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from kernels_pallas import _checks

MASK = float(-0.7 * np.finfo(np.float32).max)  # a hidden score: finite, so exp stays finite
MIN_PAGE = 16  # Mosaic's bfloat16 row tile (float32: 8); Triton sizes are powers of two
DTYPES = _checks.ATTENTION_DTYPES


# ----------------------------------------------------------------------------
# Argument checks (static: shapes, dtypes, Python values).


def _check_scores_args(q, kmax, kmin) -> None:
  _checks.check_arrays(q=q, kmax=kmax, kmin=kmin)
  _checks.check_keys_values(q, kmax, kmin, "(B, H, D)", k_name="kmax", v_name="kmin")


def _check_attention_args(q, k, v, pages, count, length, page_size, scale, *,
                          kernel: bool) -> None:
  _checks.check_arrays(q=q, k=k, v=v, pages=pages, count=count, length=length)
  b, h, _ = _checks.check_keys_values(q, k, v, "(B, H, D)")
  if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)):
    raise TypeError(f"page_size must be an int, got {page_size!r}")
  s = k.shape[2]
  if page_size < 1 or s % page_size:
    raise ValueError(f"page_size must be a positive divisor of S = {s}, got {page_size}")
  if kernel and (page_size < MIN_PAGE or page_size & (page_size - 1)):
    raise ValueError(f"page_size must be a power of two >= {MIN_PAGE} for the kernel, got "
                     f"{page_size}")
  if pages.ndim != 3 or pages.shape[:2] != (b, h) or not jnp.issubdtype(pages.dtype,
                                                                         jnp.integer):
    raise ValueError(f"pages must be an int array of shape ({b}, {h}, n), got {pages.dtype} "
                     f"{tuple(pages.shape)}")
  if tuple(count.shape) != (b, h) or not jnp.issubdtype(count.dtype, jnp.integer):
    raise ValueError(f"count must be an int array of shape ({b}, {h}), got {count.dtype} "
                     f"{tuple(count.shape)}")
  if tuple(length.shape) != () or not jnp.issubdtype(length.dtype, jnp.integer):
    raise ValueError(f"length must be an int scalar array, got {length.dtype} "
                     f"{tuple(length.shape)}")
  _checks.check_scale(scale)


def _check_use_kernel(use_kernel: Any) -> None:
  if use_kernel is not None and not isinstance(use_kernel, bool):
    raise TypeError(f"use_kernel must be a bool or None, got {use_kernel!r}")




def _pow2(n: int, least: int = 1) -> int:
  return max(least, 1 << (n - 1).bit_length())


# ----------------------------------------------------------------------------
# Page scores.


@jax.jit
def _scores_reference(q, kmax, kmin):
  qf = q.astype(jnp.float32)[:, :, None, :]
  return jnp.sum(jnp.maximum(qf * kmax.astype(jnp.float32), qf * kmin.astype(jnp.float32)),
                 axis=-1)


def page_scores_reference(q, kmax, kmin):
  """Quest's page score bound ``s[b, h, j] = sum_d max(q_d kmax_jd, q_d kmin_jd)``.

  Args:
    q: ``(B, H, D)`` queries, float32 or bfloat16.
    kmax, kmin: ``(B, H, P, D)`` elementwise maximum / minimum key of each page, the dtype
      of ``q``.

  Returns:
    ``(B, H, P)`` float32 scores.

  Example:
    >>> s = page_scores_reference(q, kmax, kmin)      # then top-k pages per head
  """
  _check_scores_args(q, kmax, kmin)
  return _scores_reference(q, kmax, kmin)


def _scores_kernel_gpu(q_ref, kmax_ref, kmin_ref, o_ref):
  q = q_ref[...].astype(jnp.float32)[None, :]  # (1, D)
  s = jnp.maximum(q * kmax_ref[...].astype(jnp.float32), q * kmin_ref[...].astype(jnp.float32))
  o_ref[...] = jnp.sum(s, axis=1)


def _scores_kernel_tpu(q_ref, kmax_ref, kmin_ref, o_ref):
  q = q_ref[...].astype(jnp.float32)  # (1, D)
  s = jnp.maximum(q * kmax_ref[...].astype(jnp.float32), q * kmin_ref[...].astype(jnp.float32))
  o_ref[...] = jnp.sum(s, axis=1, keepdims=True)  # (P, 1)


def _scores_gpu(q, kmax, kmin, interpret):
  b, h, d = q.shape
  p = kmax.shape[2]
  dp, pp = _pow2(d, MIN_PAGE), _pow2(p, MIN_PAGE)  # zero padding: adds 0 to every score
  qp = jnp.pad(q, ((0, 0), (0, 0), (0, dp - d)))
  pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, pp - p), (0, dp - d)))
  out = pl.pallas_call(
      _scores_kernel_gpu,
      grid=(b, h),
      in_specs=[pl.BlockSpec((None, None, dp), lambda b, h: (b, h, 0)),
                pl.BlockSpec((None, None, pp, dp), lambda b, h: (b, h, 0, 0)),
                pl.BlockSpec((None, None, pp, dp), lambda b, h: (b, h, 0, 0))],
      out_specs=pl.BlockSpec((None, None, pp), lambda b, h: (b, h, 0)),
      out_shape=jax.ShapeDtypeStruct((b, h, pp), jnp.float32),
      compiler_params=None if interpret else plt.CompilerParams(num_warps=4, num_stages=1),
      interpret=interpret,
      name="page_scores",
  )(qp, pad(kmax), pad(kmin))
  return out[..., :p]


def _scores_tpu(q, kmax, kmin, interpret):
  b, h, d = q.shape
  p = kmax.shape[2]
  summary = pl.BlockSpec((None, None, p, d), lambda b, h: (b, h, 0, 0))
  out = pl.pallas_call(
      _scores_kernel_tpu,
      grid=(b, h),
      in_specs=[pl.BlockSpec((None, None, 1, d), lambda b, h: (b, h, 0, 0)), summary, summary],
      out_specs=pl.BlockSpec((None, None, p, 1), lambda b, h: (b, h, 0, 0)),
      out_shape=jax.ShapeDtypeStruct((b, h, p, 1), jnp.float32),
      compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
      interpret=interpret,
      name="page_scores",
  )(q[:, :, None, :], kmax, kmin)
  return out[..., 0]


@functools.partial(jax.jit, static_argnames=("interpret",))
def _scores_pallas(q, kmax, kmin, *, interpret):
  if isinstance(interpret, pltpu.InterpretParams):
    return _scores_tpu(q, kmax, kmin, interpret)
  if interpret:
    return _scores_gpu(q, kmax, kmin, interpret)
  return lax.platform_dependent(q, kmax, kmin, tpu=lambda *a: _scores_tpu(*a, False),
                                default=lambda *a: _scores_gpu(*a, False))


def page_scores_pallas(q, kmax, kmin, *, interpret: bool | pltpu.InterpretParams = False):
  """The Pallas kernel of :func:`page_scores_reference` (same arguments and output).

  ``interpret``: False compiles the variant of the platform lowered for; True runs the GPU
  variant in Pallas' interpreter, a ``pltpu.InterpretParams`` the TPU variant.
  """
  _check_scores_args(q, kmax, kmin)
  _checks.check_interpret(interpret)
  return _scores_pallas(q, kmax, kmin, interpret=interpret)


def page_scores(q, kmax, kmin, *, use_kernel: bool | None = None):
  """Dispatcher: the kernel when lowered for GPU/TPU, the reference elsewhere (``None``;
  decided by ``lax.platform_dependent``, not ``jax.default_backend()``); True / False force
  one path."""
  _check_scores_args(q, kmax, kmin)
  _check_use_kernel(use_kernel)
  if use_kernel is None:
    kernel = lambda *a: _scores_pallas(*a, interpret=False)
    return lax.platform_dependent(q, kmax, kmin, cuda=kernel, rocm=kernel, tpu=kernel,
                                  default=_scores_reference)
  return (_scores_pallas(q, kmax, kmin, interpret=False) if use_kernel
          else _scores_reference(q, kmax, kmin))


# ----------------------------------------------------------------------------
# Attention over selected pages.


def _gather_pages(x, pages, page_size, layout):
  """The selected pages of ``x`` as ``(B, H, n, p, D)``, read in place from either layout."""
  if layout == "bhsd":
    b, h, s, d = x.shape
    idx = jnp.clip(pages, 0, s // page_size - 1)[..., None, None]
    return jnp.take_along_axis(x.reshape(b, h, s // page_size, page_size, d), idx, axis=2)
  b, s, h, d = x.shape
  idx = jnp.clip(pages, 0, s // page_size - 1)
  paged = x.reshape(b, s // page_size, page_size, h, d)
  return paged[jnp.arange(b)[:, None, None], idx, :, jnp.arange(h)[None, :, None], :]


@functools.partial(jax.jit, static_argnames=("page_size", "scale", "layout"))
def _attention_reference(q, k, v, pages, count, length, *, page_size, scale, layout="bhsd"):
  n = pages.shape[2]
  kg = _gather_pages(k, pages, page_size, layout)  # (B, H, n, p, D)
  vg = _gather_pages(v, pages, page_size, layout)
  pos = pages[..., None] * page_size + jnp.arange(page_size)  # (B, H, n, p)
  live = (jnp.arange(n) < count[..., None])[..., None] & (pos < length)
  z = jnp.einsum("bhd,bhnpd->bhnp", q.astype(jnp.float32), kg.astype(jnp.float32),
                 precision=lax.Precision.HIGHEST) * scale
  z = jnp.where(live, z, -jnp.inf)
  m = jnp.max(z, axis=(2, 3), keepdims=True)
  w = jnp.where(live, jnp.exp(z - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
  total = jnp.sum(w, axis=(2, 3))
  o = jnp.einsum("bhnp,bhnpd->bhd", w, vg.astype(jnp.float32),
                 precision=lax.Precision.HIGHEST)
  return (o / jnp.where(total > 0, total, 1.0)[..., None]).astype(q.dtype)


def page_attention_reference(q, k, v, pages, count, length, *, page_size: int,
                             scale: float | None = None):
  """Softmax attention of one query per head over the tokens of its selected pages.

  Args:
    q: ``(B, H, D)`` queries, float32 or bfloat16.
    k, v: ``(B, H, S, D)`` head-major cache, the dtype of ``q``.
    pages: int ``(B, H, n)`` page indices (``0 .. S / page_size - 1``); the first
      ``count[b, h]`` are attended and must not repeat, the rest are ignored.
    count: int ``(B, H)``, live entries of ``pages`` (``0 .. n``).
    length: int32 scalar: tokens filled; positions ``>= length`` are hidden.
    page_size: tokens per page (static), dividing ``S``.
    scale: score scale (static); None is ``1 / sqrt(D)``.

  Returns:
    ``(B, H, D)`` in the dtype of ``q``; zero where nothing is visible.

  Example:
    >>> all_pages = jnp.broadcast_to(jnp.arange(S // 16), (B, H, S // 16))
    >>> o = page_attention_reference(q, k, v, all_pages, jnp.full((B, H), S // 16), length,
    ...                              page_size=16)             # = full attention
  """
  _check_attention_args(q, k, v, pages, count, length, page_size, scale, kernel=False)
  return _attention_reference(q, k, v, pages.astype(jnp.int32), count.astype(jnp.int32),
                              length.astype(jnp.int32), page_size=int(page_size),
                              scale=_checks.attention_scale(scale, q.shape[2]))


class _Carry(NamedTuple):
  """Online-softmax state of one query (FlashAttention Alg. 1)."""
  m: jax.Array    # running max of the visible scores
  l: jax.Array    # running sum of exp(score - m)
  acc: jax.Array  # running sum of exp(score - m) v


def _fold(c: _Carry, s, v, visible) -> _Carry:
  """Folds one page's scores ``s`` (visible where ``visible``) and values into ``c``.

  Shapes: ``s`` and ``visible`` ``(p, 1)``, ``v`` ``(p, D)``; ``m, l`` ``(1, 1)``, ``acc``
  ``(1, D)``.
  """
  s = jnp.where(visible, s, MASK)
  m = jnp.maximum(c.m, jnp.max(s, axis=0, keepdims=True))
  w = jnp.where(visible, jnp.exp(s - m), 0.0)  # nothing visible yet: exp(MASK - MASK) = 1
  alpha = jnp.exp(c.m - m)
  pv = jnp.sum(w * v.astype(jnp.float32), axis=0, keepdims=True)
  return _Carry(m, alpha * c.l + jnp.sum(w, axis=0, keepdims=True), alpha * c.acc + pv)


def _page_scores_of(q, k, scale):
  """``(p, 1)`` scaled scores of one query ``(1, D)`` against a page's keys ``(p, D)``."""
  return jnp.sum(q.astype(jnp.float32) * k.astype(jnp.float32), axis=1, keepdims=True) * scale


def _attention_kernel_gpu(pages_ref, count_ref, length_ref, q_ref, k_ref, v_ref, o_ref, *,
                          page_size, n, heads, scale):
  b, h = pl.program_id(0), pl.program_id(1)
  row = b * heads + h
  q = q_ref[...]  # (1, D)
  length = length_ref[0]

  def body(j, c):
    page = pages_ref[row * n + j]
    t0 = pl.multiple_of(page * page_size, page_size)
    keys = pl.ds(t0, page_size)
    pos = t0 + lax.broadcasted_iota(jnp.int32, (page_size, 1), 0)
    return _fold(c, _page_scores_of(q, k_ref[keys, :], scale), v_ref[keys, :], pos < length)

  d = q.shape[1]
  c = _Carry(jnp.full((1, 1), MASK, jnp.float32), jnp.zeros((1, 1), jnp.float32),
             jnp.zeros((1, d), jnp.float32))
  c = lax.fori_loop(0, count_ref[row], body, c)
  o_ref[...] = (c.acc / jnp.where(c.l > 0, c.l, 1.0)).astype(o_ref.dtype)


def _attention_kernel_tpu(pages_ref, count_ref, length_ref, q_ref, k_ref, v_ref, o_ref, m_ref,
                          l_ref, acc_ref, *, page_size, n, heads, scale):
  b, h, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  row = b * heads + h

  @pl.when(j == 0)
  def _():
    m_ref[...] = jnp.full(m_ref.shape, MASK, jnp.float32)
    l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

  @pl.when(j < count_ref[row])
  def _():
    t0 = pages_ref[row * n + j] * page_size
    pos = t0 + lax.broadcasted_iota(jnp.int32, (page_size, 1), 0)
    c = _fold(_Carry(m_ref[...], l_ref[...], acc_ref[...]),
              _page_scores_of(q_ref[...], k_ref[...], scale), v_ref[...], pos < length_ref[0])
    m_ref[...], l_ref[...], acc_ref[...] = c.m, c.l, c.acc

  @pl.when(j == n - 1)
  def _():
    l = l_ref[...]
    o_ref[...] = (acc_ref[...] / jnp.where(l > 0, l, 1.0)).astype(o_ref.dtype)


def _attention_gpu(q, k, v, pages, count, length, n, page_size, scale, interpret):
  b, h, s, d = k.shape
  dp = _pow2(d, MIN_PAGE)  # zero columns change no score; sliced off the output
  padq = jnp.pad(q, ((0, 0), (0, 0), (0, dp - d)))[:, :, None, :]
  pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, dp - d)))
  whole = lambda x: pl.BlockSpec(x.shape, lambda *_: (0,))
  q_spec = pl.BlockSpec((None, None, 1, dp), lambda b, h: (b, h, 0, 0))
  kv_spec = pl.BlockSpec((None, None, s, dp), lambda b, h: (b, h, 0, 0))
  out = pl.pallas_call(
      functools.partial(_attention_kernel_gpu, page_size=page_size, n=n, heads=h, scale=scale),
      grid=(b, h),
      in_specs=[whole(pages), whole(count), whole(length), q_spec, kv_spec, kv_spec],
      out_specs=q_spec,
      out_shape=jax.ShapeDtypeStruct((b, h, 1, dp), q.dtype),
      compiler_params=None if interpret else plt.CompilerParams(num_warps=4, num_stages=2),
      interpret=interpret,
      name="page_attention",
  )(pages, count, length, padq, pad(k), pad(v))
  return out[:, :, 0, :d]


def _attention_tpu(q, k, v, pages, count, length, n, page_size, scale, interpret):
  b, h, s, d = k.shape

  def kv_index(bi, hi, j, pages_ref, count_ref, length_ref):
    del count_ref, length_ref
    return bi, hi, pages_ref[(bi * h + hi) * n + j], 0

  q_spec = pl.BlockSpec((None, None, 1, d), lambda bi, hi, j, *_: (bi, hi, 0, 0))
  kv_spec = pl.BlockSpec((None, None, page_size, d), kv_index)
  out = pl.pallas_call(
      functools.partial(_attention_kernel_tpu, page_size=page_size, n=n, heads=h, scale=scale),
      grid_spec=pltpu.PrefetchScalarGridSpec(
          num_scalar_prefetch=3,
          grid=(b, h, n),
          in_specs=[q_spec, kv_spec, kv_spec],
          out_specs=q_spec,
          scratch_shapes=[pltpu.VMEM((1, 1), jnp.float32), pltpu.VMEM((1, 1), jnp.float32),
                          pltpu.VMEM((1, d), jnp.float32)]),
      out_shape=jax.ShapeDtypeStruct((b, h, 1, d), q.dtype),
      # (batch, head) programs are independent; a query's pages accumulate in order.
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "arbitrary")),
      interpret=interpret,
      name="page_attention",
  )(pages, count, length, q[:, :, None, :], k, v)
  return out[:, :, 0]


def _live_first(pages, count):
  """Flat page lists with entries past ``count`` replaced by the last live one (TPU: no new
  copy for skipped steps), flat counts, clipped to ``0 .. n``."""
  n = pages.shape[2]
  count = jnp.clip(count, 0, n)
  j = jnp.minimum(jnp.arange(n, dtype=jnp.int32), jnp.maximum(count - 1, 0)[..., None])
  return jnp.take_along_axis(pages, j, axis=2).reshape(-1), count.reshape(-1)


@functools.partial(jax.jit, static_argnames=("page_size", "scale", "interpret"))
def _attention_pallas(q, k, v, pages, count, length, *, page_size, scale, interpret):
  pages = jnp.clip(pages.astype(jnp.int32), 0, k.shape[2] // page_size - 1)
  n = pages.shape[2]
  flat, cnt = _live_first(pages, count.astype(jnp.int32))
  args = (q, k, v, flat, cnt, length.astype(jnp.int32).reshape(1))
  if isinstance(interpret, pltpu.InterpretParams):
    return _attention_tpu(*args, n, page_size, scale, interpret)
  if interpret:
    return _attention_gpu(*args, n, page_size, scale, interpret)
  return lax.platform_dependent(
      *args, tpu=lambda *a: _attention_tpu(*a, n, page_size, scale, False),
      default=lambda *a: _attention_gpu(*a, n, page_size, scale, False))


def page_attention_pallas(q, k, v, pages, count, length, *, page_size: int,
                          scale: float | None = None,
                          interpret: bool | pltpu.InterpretParams = False):
  """The Pallas kernel of :func:`page_attention_reference` (same arguments and output);
  ``page_size`` a power of two >= 16. Only the selected pages are read.

  ``interpret``: False compiles the variant of the platform lowered for; True runs the GPU
  variant in Pallas' interpreter, a ``pltpu.InterpretParams`` the TPU variant.
  """
  _check_attention_args(q, k, v, pages, count, length, page_size, scale, kernel=True)
  _checks.check_interpret(interpret)
  return _attention_pallas(q, k, v, pages, count, length, page_size=int(page_size),
                           scale=_checks.attention_scale(scale, q.shape[2]), interpret=interpret)


def page_attention(q, k, v, pages, count, length, *, page_size: int,
                   scale: float | None = None, use_kernel: bool | None = None,
                   kv_layout: str = "bhsd"):
  """Dispatcher: the kernel when lowered for GPU/TPU, the reference elsewhere (``None``;
  by ``lax.platform_dependent``); True / False force one path.

  ``kv_layout="bshd"`` takes ``k, v`` as ``(B, S, H, D)`` (the layout of
  :class:`jaxlab.models.transformer.KVCache`): the reference gathers the selected pages
  from it directly; the kernel gets a head-major copy (a transpose of the whole cache per
  call, which a cache stored head-major would not need).
  """
  if kv_layout not in ("bhsd", "bshd"):
    raise ValueError(f"kv_layout must be 'bhsd' or 'bshd', got {kv_layout!r}")
  head_major = lambda x: x if kv_layout == "bhsd" else x.swapaxes(1, 2)
  if kv_layout == "bshd" and not all(_checks.is_array(x) and x.ndim == 4 for x in (k, v)):
    raise ValueError("k and v must be (B, S, H, D) arrays for kv_layout='bshd'")
  shape_of = lambda x: jax.ShapeDtypeStruct(head_major(x).shape, x.dtype)
  _check_attention_args(q, shape_of(k), shape_of(v), pages, count, length, page_size, scale,
                        kernel=use_kernel is not False)
  _check_use_kernel(use_kernel)
  kw = dict(page_size=int(page_size), scale=_checks.attention_scale(scale, q.shape[2]))
  args = (q, k, v, pages.astype(jnp.int32), count.astype(jnp.int32), length.astype(jnp.int32))

  def kernel(q, k, v, *rest):
    return _attention_pallas(q, head_major(k), head_major(v), *rest, **kw, interpret=False)

  reference = lambda *a: _attention_reference(*a, **kw, layout=kv_layout)
  if use_kernel is None:
    return lax.platform_dependent(*args, cuda=kernel, rocm=kernel, tpu=kernel,
                                  default=reference)
  return kernel(*args) if use_kernel else reference(*args)
