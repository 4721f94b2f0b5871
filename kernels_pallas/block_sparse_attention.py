r"""Block-sparse attention as a Pallas kernel, with its dense jnp reference.

Softmax attention where a boolean ``block_mask`` says which ``(block_q,
block_k)`` tiles of the ``T x S`` score matrix exist: planned diffusion's
spans, video frames, selected KV pages. For query row ``t`` the visible keys
are ``V(t) = {s : block_mask[t // block_q, s // block_k]}`` (and ``s <= t``
when ``causal``), and

.. math::
  o_t = \sum_{s \in V(t)} \frac{e^{c\, q_t \cdot k_s}}{\sum_{s' \in V(t)}
  e^{c\, q_t \cdot k_{s'}}}\, v_s, \qquad c = \texttt{scale}
  \;(\text{default } 1/\sqrt{D}),

with ``o_t = 0`` when ``V(t)`` is empty (a query block without a live tile,
or a causal row whose live tiles all lie to its right). The reference builds
the token mask and calls ``jax.nn.dot_product_attention``, then zeroes those
rows (``dot_product_attention`` alone would average over every key there).

The kernel skips dead tiles entirely: the wrapper turns each query block's
row of the mask into the list of its live key blocks (ascending) and their
count, and a program only reads and multiplies those, so the work is
proportional to the number of live tiles. Each query block runs the online
softmax of FlashAttention (Dao et al., Alg. 1; running row max ``m``, sum
``l`` and unnormalized output ``acc``) over its live tiles, in float32.

Two variants, picked by the platform the call is lowered for
(``lax.platform_dependent``, so an export for TPU from a CPU host takes the
TPU one):

* GPU (Triton): grid (batch, heads, query blocks); each program loops over its
  live key tiles itself (``lax.fori_loop`` to the live count), so every output
  block is written by exactly one program (GPU grid points are concurrent).
  The head dimension is zero-padded to a power of two >= 16 (Triton's tensor
  sizes and ``tl.dot``'s minimum); zero columns change no score and are
  sliced off the output. float32 dots run in IEEE precision (``HIGHEST``),
  not TF32.
* TPU (Mosaic): grid (batch, heads, query blocks, key steps) with the key axis
  ``"arbitrary"`` (sequential) and ``m, l, acc`` in VMEM scratch. The live
  lists and counts are scalar-prefetched into SMEM
  (``pltpu.PrefetchScalarGridSpec``) and the key/value index maps read the
  step's live block from them, so only live tiles are copied in; steps past
  the count repeat the last live block (no new copy) and skip the compute,
  the pattern of JAX's splash attention. The mask is kept unbroadcast
  (``(1 or B, 1 or H, ...)``) so SMEM holds one copy per distinct mask:
  ``Bm * Hm * nq * (nk + 1)`` int32 words, which must fit in SMEM (a mask per
  batch element and head at long sequences may not). Blocks are ``(block_q,
  D)`` and ``(block_k, D)``: ``D`` is the full dimension and the block sizes
  are multiples of 16, as Mosaic's float32 and bfloat16 tiles require.

Gradients: the kernel is forward-only; ``jax.grad`` through it (and through
the dispatcher) uses the reference's backward pass (a ``jax.custom_vjp``),
which is exact but dense in memory and compute.

References:
  Dao, Fu, Ermon, Rudra, Re, "FlashAttention: Fast and Memory-Efficient Exact
  Attention with IO-Awareness", arXiv:2205.14135, 2022 (online softmax,
  Alg. 1).
  JAX's Pallas ops ``ops/gpu/attention.py`` (Triton program layout) and
  ``ops/tpu/splash_attention`` (block-sparse TPU layout with scalar-prefetched
  block lists).
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

# Score of a hidden key: finite, so a row with nothing visible yet keeps m = MASK and every
# exp stays finite (exp(MASK - MASK) = 1 is then zeroed by the visibility mask).
MASK = float(-0.7 * np.finfo(np.float32).max)
MIN_BLOCK = 16  # Triton's tl.dot needs >= 16 rows/columns; Mosaic tiles bf16 by 16 rows
DTYPES = _checks.ATTENTION_DTYPES


class SoftmaxCarry(NamedTuple):
  """Online-softmax state of one query block (FlashAttention Alg. 1)."""
  m: jax.Array    # (block_q, 1) running row max of the visible scores
  l: jax.Array    # (block_q, 1) running sum of exp(score - m) over visible keys
  acc: jax.Array  # (block_q, D) running sum of exp(score - m) v


def _init_carry(block_q: int, d: int) -> SoftmaxCarry:
  return SoftmaxCarry(jnp.full((block_q, 1), MASK, jnp.float32),
                      jnp.zeros((block_q, 1), jnp.float32),
                      jnp.zeros((block_q, d), jnp.float32))


def _online_step(c: SoftmaxCarry, q, k, v, q0, k0, *, scale, causal) -> SoftmaxCarry:
  """Folds one live ``(block_q, block_k)`` tile into the running softmax.

  ``q0`` and ``k0`` are the tile's first query and key positions (for ``causal``).
  """
  precision = lax.Precision.HIGHEST if q.dtype == jnp.float32 else None
  s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision,
                      preferred_element_type=jnp.float32) * scale
  if causal:
    rows = q0 + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = k0 + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    visible = rows >= cols
    s = jnp.where(visible, s, MASK)
  m = jnp.maximum(c.m, jnp.max(s, axis=1, keepdims=True))
  p = jnp.exp(s - m)
  if causal:
    p = jnp.where(visible, p, 0.0)  # rows with no visible key yet: exp(MASK - MASK) = 1
  alpha = jnp.exp(c.m - m)
  pv = lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=jnp.float32)
  return SoftmaxCarry(m, alpha * c.l + jnp.sum(p, axis=1, keepdims=True), alpha * c.acc + pv)


def _finish(c: SoftmaxCarry) -> jax.Array:
  """``acc / l``; a row with no visible key (l = 0, acc = 0) gives zeros."""
  return c.acc / jnp.where(c.l > 0, c.l, 1.0)


# ----------------------------------------------------------------------------
# Argument checks (static: shapes, dtypes, Python values).


def _check_block(name: str, b: Any, n: int, n_name: str, kernel: bool) -> None:
  if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
    raise TypeError(f"{name} must be an int, got {b!r}")
  if kernel and (b < MIN_BLOCK or b & (b - 1)):
    raise ValueError(f"{name} must be a power of two >= {MIN_BLOCK} for the kernel, got {b}")
  if b <= 0 or n % b:
    raise ValueError(f"{name} must be a positive divisor of {n_name} = {n}, got {b}")


def _check_args(q, k, v, block_mask, block_q, block_k, causal, scale, *, kernel: bool) -> None:
  _checks.check_arrays(q=q, k=k, v=v, block_mask=block_mask)
  b, h, _ = _checks.check_keys_values(q, k, v, "(B, H, T, D)")
  t, s = q.shape[2], k.shape[2]
  _check_block("block_q", block_q, t, "T", kernel)
  _check_block("block_k", block_k, s, "S", kernel)
  if block_mask.dtype != jnp.bool_:
    raise TypeError(f"block_mask must be a bool array, got {block_mask.dtype}")
  nq, nk = t // block_q, s // block_k
  ms = tuple(block_mask.shape)
  if len(ms) != 4 or ms[0] not in (1, b) or ms[1] not in (1, h) or ms[2:] != (nq, nk):
    raise ValueError(f"block_mask must have shape (1 or {b}, 1 or {h}, T // block_q = {nq}, "
                     f"S // block_k = {nk}), got {ms}")
  if not isinstance(causal, bool):
    raise TypeError(f"causal must be a bool, got {causal!r}")
  _checks.check_scale(scale)


# ----------------------------------------------------------------------------
# Reference.


@functools.partial(jax.jit, static_argnames=("block_q", "block_k", "causal", "scale"))
def _reference(q, k, v, block_mask, *, block_q, block_k, causal, scale):
  t, s = q.shape[2], k.shape[2]
  token = jnp.repeat(jnp.repeat(block_mask, block_q, axis=2), block_k, axis=3)  # (., ., T, S)
  if causal:
    token = token & (jnp.arange(t)[:, None] >= jnp.arange(s)[None, :])
  bthd = lambda x: x.swapaxes(1, 2)  # dot_product_attention takes (B, T, heads, D)
  out = jax.nn.dot_product_attention(bthd(q), bthd(k), bthd(v), mask=token, scale=scale,
                                     implementation="xla")
  seen = jnp.any(token, axis=3)[..., None]  # (., ., T, 1)
  return jnp.where(seen, bthd(out), 0).astype(q.dtype)


def block_sparse_attention_reference(q, k, v, block_mask, *, block_q: int, block_k: int,
                                     causal: bool = False, scale: float | None = None):
  """Dense masked softmax attention: the block mask expanded to a token mask.

  Args:
    q: ``(B, H, T, D)`` queries, float32 or bfloat16.
    k, v: ``(B, H, S, D)`` keys and values, the dtype of ``q``.
    block_mask: bool ``(1 or B, 1 or H, T // block_q, S // block_k)``: True where
      the (query block, key block) tile is attended.
    block_q, block_k: tile sizes (static), dividing ``T`` and ``S``.
    causal: inside a live tile, query position ``t`` sees key position ``s``
      only if ``t >= s`` (positions counted from 0 in both sequences).
    scale: score scale (static); None is ``1 / sqrt(D)``.

  Returns:
    ``(B, H, T, D)`` in the dtype of ``q``; rows with no visible key are zero.

  Example:
    >>> mask = jnp.array([[[[True, False], [True, True]]]])  # block-causal, 2 x 2 tiles
    >>> o = block_sparse_attention_reference(q, k, v, mask, block_q=16, block_k=16)
  """
  _check_args(q, k, v, block_mask, block_q, block_k, causal, scale, kernel=False)
  return _reference(q, k, v, block_mask, block_q=int(block_q), block_k=int(block_k),
                    causal=causal, scale=_checks.attention_scale(scale, q.shape[3]))


# ----------------------------------------------------------------------------
# Kernels.


class _Layout(NamedTuple):
  """Static facts shared by both variants."""
  block_q: int
  block_k: int
  nq: int       # query blocks
  nk: int       # key blocks
  mb: bool      # block_mask has a batch axis (else shared over the batch)
  mh: bool      # block_mask has a head axis
  heads_m: int  # size of block_mask's head axis
  scale: float
  causal: bool


def _row(lay: _Layout, b, h, i):
  """Flat index of query block ``i``'s live list in the (unbroadcast) mask."""
  bm = b if lay.mb else 0
  hm = h if lay.mh else 0
  return (bm * lay.heads_m + hm) * lay.nq + i


def _live_lists(block_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per query block: live key blocks first, ascending, then the last one repeated; counts.

  Returns ``(idx, count)``, flat int32 arrays of ``Bm * Hm * nq * nk`` and ``Bm * Hm * nq``.
  """
  nk = block_mask.shape[3]
  order = jnp.argsort(~block_mask, axis=3, stable=True).astype(jnp.int32)
  count = jnp.sum(block_mask, axis=3, dtype=jnp.int32)
  last = jnp.maximum(count - 1, 0)[..., None]
  idx = jnp.take_along_axis(order, jnp.minimum(jnp.arange(nk, dtype=jnp.int32), last), axis=3)
  return idx.reshape(-1), count.reshape(-1)


def _kernel_gpu(idx_ref, cnt_ref, q_ref, k_ref, v_ref, o_ref, *, lay: _Layout):
  """One (batch, head, query block): loops over its live key tiles."""
  b, h, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  row = _row(lay, b, h, i)
  q = q_ref[...]

  def body(j, c):
    kb = idx_ref[row * lay.nk + j]
    k0 = pl.multiple_of(kb * lay.block_k, lay.block_k)
    keys = pl.ds(k0, lay.block_k)
    return _online_step(c, q, k_ref[keys, :], v_ref[keys, :], i * lay.block_q, k0,
                        scale=lay.scale, causal=lay.causal)

  c = lax.fori_loop(0, cnt_ref[row], body, _init_carry(lay.block_q, q.shape[1]))
  o_ref[...] = _finish(c).astype(o_ref.dtype)


def _kernel_tpu(idx_ref, cnt_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *,
                lay: _Layout):
  """One (batch, head, query block, key step): step ``j`` holds the ``j``-th live tile."""
  b, h, i, j = (pl.program_id(a) for a in range(4))
  row = _row(lay, b, h, i)

  @pl.when(j == 0)
  def _():
    c = _init_carry(lay.block_q, acc_ref.shape[1])
    m_ref[...], l_ref[...], acc_ref[...] = c.m, c.l, c.acc

  @pl.when(j < cnt_ref[row])
  def _():
    kb = idx_ref[row * lay.nk + j]
    c = _online_step(SoftmaxCarry(m_ref[...], l_ref[...], acc_ref[...]), q_ref[...], k_ref[...],
                     v_ref[...], i * lay.block_q, kb * lay.block_k, scale=lay.scale,
                     causal=lay.causal)
    m_ref[...], l_ref[...], acc_ref[...] = c.m, c.l, c.acc

  @pl.when(j == lay.nk - 1)
  def _():
    c = SoftmaxCarry(m_ref[...], l_ref[...], acc_ref[...])
    o_ref[...] = _finish(c).astype(o_ref.dtype)


def _call_gpu(q, k, v, idx, cnt, lay: _Layout, interpret: Any):
  b, h, t, d = q.shape
  s = k.shape[2]
  dp = max(MIN_BLOCK, 1 << (d - 1).bit_length())  # power of two >= 16; zeros change no score
  pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, dp - d)))
  whole = lambda x: pl.BlockSpec(x.shape, lambda *_: (0,))
  q_spec = pl.BlockSpec((None, None, lay.block_q, dp), lambda b, h, i: (b, h, i, 0))
  kv_spec = pl.BlockSpec((None, None, s, dp), lambda b, h, i: (b, h, 0, 0))
  out = pl.pallas_call(
      functools.partial(_kernel_gpu, lay=lay),
      grid=(b, h, lay.nq),
      in_specs=[whole(idx), whole(cnt), q_spec, kv_spec, kv_spec],
      out_specs=q_spec,
      out_shape=jax.ShapeDtypeStruct((b, h, t, dp), q.dtype),
      compiler_params=None if interpret else plt.CompilerParams(num_warps=4, num_stages=2),
      interpret=interpret,
      name="block_sparse_attention",
  )(idx, cnt, pad(q), pad(k), pad(v))
  return out[..., :d]


def _call_tpu(q, k, v, idx, cnt, lay: _Layout, interpret: Any):
  b, h, t, d = q.shape

  def kv_map(b, h, i, j, idx_ref, cnt_ref):
    del cnt_ref
    return b, h, idx_ref[_row(lay, b, h, i) * lay.nk + j], 0

  q_spec = pl.BlockSpec((None, None, lay.block_q, d), lambda b, h, i, j, *_: (b, h, i, 0))
  kv_spec = pl.BlockSpec((None, None, lay.block_k, d), kv_map)
  return pl.pallas_call(
      functools.partial(_kernel_tpu, lay=lay),
      grid_spec=pltpu.PrefetchScalarGridSpec(
          num_scalar_prefetch=2,
          grid=(b, h, lay.nq, lay.nk),
          in_specs=[q_spec, kv_spec, kv_spec],
          out_specs=q_spec,
          scratch_shapes=[pltpu.VMEM((lay.block_q, 1), jnp.float32),
                          pltpu.VMEM((lay.block_q, 1), jnp.float32),
                          pltpu.VMEM((lay.block_q, d), jnp.float32)]),
      out_shape=jax.ShapeDtypeStruct((b, h, t, d), q.dtype),
      # Query blocks are independent; key steps accumulate in order on one core.
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
      interpret=interpret,
      name="block_sparse_attention",
  )(idx, cnt, q, k, v)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k", "causal", "scale",
                                             "interpret"))
def _pallas(q, k, v, block_mask, *, block_q, block_k, causal, scale, interpret):
  b, h, t, _ = q.shape
  lay = _Layout(block_q, block_k, t // block_q, k.shape[2] // block_k,
                mb=block_mask.shape[0] == b and b > 1, mh=block_mask.shape[1] == h and h > 1,
                heads_m=block_mask.shape[1], scale=scale, causal=causal)
  idx, cnt = _live_lists(block_mask)
  args = (q, k, v, idx, cnt)
  if isinstance(interpret, pltpu.InterpretParams):
    return _call_tpu(*args, lay, interpret)
  if interpret:
    return _call_gpu(*args, lay, interpret)
  # The platform lowered for picks the variant (an export for TPU from a CPU host too);
  # on CPU the default branch's pallas_call says that only interpret mode runs there.
  return lax.platform_dependent(*args, tpu=lambda *a: _call_tpu(*a, lay, False),
                                default=lambda *a: _call_gpu(*a, lay, False))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def _pallas_vjp(q, k, v, block_mask, block_q, block_k, causal, scale, interpret):
  return _pallas(q, k, v, block_mask, block_q=block_q, block_k=block_k, causal=causal,
                 scale=scale, interpret=interpret)


def _pallas_fwd(q, k, v, block_mask, block_q, block_k, causal, scale, interpret):
  out = _pallas_vjp(q, k, v, block_mask, block_q, block_k, causal, scale, interpret)
  return out, (q, k, v, block_mask)


def _pallas_bwd(block_q, block_k, causal, scale, interpret, res, g):
  del interpret
  q, k, v, block_mask = res
  _, pullback = jax.vjp(lambda q, k, v: _reference(q, k, v, block_mask, block_q=block_q,
                                                   block_k=block_k, causal=causal, scale=scale),
                        q, k, v)
  return (*pullback(g), None)


_pallas_vjp.defvjp(_pallas_fwd, _pallas_bwd)


def block_sparse_attention_pallas(q, k, v, block_mask, *, block_q: int, block_k: int,
                                  causal: bool = False, scale: float | None = None,
                                  interpret: bool | pltpu.InterpretParams = False):
  """The Pallas kernel: same output as :func:`block_sparse_attention_reference`.

  Work per query block is proportional to its number of live tiles; dead tiles
  are neither read nor multiplied.

  Args:
    q, k, v, block_mask, causal, scale: as in :func:`block_sparse_attention_reference`.
    block_q, block_k: tile sizes (static), powers of two >= 16 dividing ``T`` and ``S``.
    interpret: False compiles the variant of the platform the call is lowered
      for (GPU: Triton, a loop over live tiles per program; TPU: Mosaic, live
      tiles on a sequential grid axis with scalar-prefetched block lists). True
      runs the GPU variant in Pallas' generic interpreter; a
      ``pltpu.InterpretParams`` runs the TPU variant in the TPU interpreter
      (which can detect races between cores). Interpreters run the grid in
      order: they cannot show a GPU race.

  Returns:
    ``(B, H, T, D)`` in the dtype of ``q``; rows with no visible key are zero.
    ``jax.grad`` differentiates it through the reference (dense) backward pass.
  """
  _check_args(q, k, v, block_mask, block_q, block_k, causal, scale, kernel=True)
  _checks.check_interpret(interpret)
  return _pallas_vjp(q, k, v, block_mask, int(block_q), int(block_k), causal,
                     _checks.attention_scale(scale, q.shape[3]), interpret)


def block_sparse_attention(q, k, v, block_mask, *, block_q: int, block_k: int,
                           causal: bool = False, scale: float | None = None,
                           use_kernel: bool | None = None):
  """Dispatcher: the Pallas kernel on GPU/TPU, the jnp reference elsewhere.

  ``use_kernel=None`` decides by the platform the computation is lowered for
  (``lax.platform_dependent``), not by ``jax.default_backend()``: an export for
  CUDA or TPU from a CPU host gets the kernel. True / False force one path.
  Arguments as :func:`block_sparse_attention_pallas`; with ``use_kernel=None``
  the blocks must suit the kernel (powers of two >= 16).
  """
  kw = dict(block_q=block_q, block_k=block_k, causal=causal, scale=scale)
  if use_kernel is None:
    _check_args(q, k, v, block_mask, block_q, block_k, causal, scale, kernel=True)
    kernel = lambda *a: block_sparse_attention_pallas(*a, **kw)
    reference = lambda *a: block_sparse_attention_reference(*a, **kw)
    return lax.platform_dependent(q, k, v, block_mask, cuda=kernel, rocm=kernel, tpu=kernel,
                                  default=reference)
  if not isinstance(use_kernel, bool):
    raise TypeError(f"use_kernel must be a bool or None, got {use_kernel!r}")
  fn = block_sparse_attention_pallas if use_kernel else block_sparse_attention_reference
  return fn(q, k, v, block_mask, **kw)
