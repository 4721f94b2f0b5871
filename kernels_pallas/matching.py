r"""The hot loop of a parallel push-relabel round, as a Pallas kernel.

For each free request ``r`` of a round at level ``l`` (a block of rows of the
distance matrix) the round needs two things, both reductions over servers:

* a uniformly random admissible server: an eligible ``s`` with slack
  ``d_l(r, s) - y_l(r) - y_l(s) = -1``; chosen as the admissible server with the
  largest hash ``hash_bits(r * n + s, k0, k1)`` (a random priority), so the
  choice streams over column tiles with a running maximum;
* the minimum slack over eligible servers (for the dual raise when no free
  request has an admissible edge).

The kernel reads ``(block_rows, block_cols)`` tiles of distances and the duals
and keeps per-row running results: no slack, admissibility or random matrix is
ever materialized. ``round_proposals_reference`` computes the same with whole
rows in ``jnp``. Scaled costs follow :func:`jaxlab.matching.push_relabel.
scaled_costs`: ``d_0 = ceil(2 n d / (eps omega))``, ``d_i = ceil(d_{i-1} / c_{i-1})``.

Two variants, picked by the platform the call is lowered for
(``lax.platform_dependent``, so an export for TPU from a CPU host takes the TPU
one):

* GPU (Triton): one program per row block loops over the column tiles itself
  (``lax.fori_loop``), so each row's running maximum and minimum live in one
  program. Pallas on GPU runs every grid point as a concurrent program, so a
  column grid axis that read-modify-writes the same output block would race.
* TPU (Mosaic): grid (row blocks, column tiles) with the column axis
  ``"arbitrary"`` (sequential on one core): the running results stay in the
  revisited output blocks, the TPU accumulation pattern. Row vectors travel as
  ``(rows, 1)`` and column vectors as ``(1, cols)`` arrays (2-D blocks whose
  last two dimensions Mosaic tiles by (8, 128)); the scalars sit in SMEM.

References:
  "Efficient Algorithms for Incremental Metric Bipartite Matching", ICLR 2026
  (OpenReview wnIanx0r0w), the parallel round of its batch algorithm.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from jaxlab.core.rng import hash_bits
from kernels_pallas import _checks

BIG = np.int32(2**30)
NONE = np.int32(-(2**31))  # the priority key of a row without an admissible server


def scaled_cost(d: jax.Array, level: jax.Array, scale0: jax.Array,
                divisors: tuple[float, ...]) -> jax.Array:
  """Integer cost at ``level`` (traced) from float distances, chained as the paper.

  ``ceil(d * scale0)``, then ``ceil(c / divisors[i])`` for each level below ``level``,
  clipped to ``BIG``, as int32 (push-relabel's CPU rounds compute their slacks with it).
  """
  c = jnp.ceil(d * scale0)
  out = c
  for i, div in enumerate(divisors):
    c = jnp.ceil(c / np.float32(div))
    out = jnp.where(level > i, c, out)
  return jnp.minimum(out, np.float32(BIG)).astype(jnp.int32)


def _tile(d, y_r, y_s, eligible, valid, row_ids, col0, n, level, scale0, k0, k1, divisors):
  """Per-row (best priority, its column, min eligible slack) of one ``(R, C)`` tile.

  Row inputs (``y_r``, ``valid``, ``row_ids``) are ``(R, 1)``, column inputs
  (``y_s``, ``eligible``) ``(1, C)``, the results ``(R, 1)``. The best priority
  is returned as an int32 key, ``prio ^ 2**31`` (the same order as the uint32
  priority; ``NONE`` when no server is admissible), because Mosaic does not
  reduce unsigned integers. Its column is the smallest column holding it
  (``jnp.argmax``'s choice), found with a max and a min: Mosaic's argmax takes
  float32 only.
  """
  slack = scaled_cost(d, level, scale0, divisors) - y_r - y_s
  ok = eligible & valid
  adm = ok & (slack == -1)
  cols = col0 + lax.broadcasted_iota(jnp.int32, d.shape, 1)
  flat = row_ids.astype(jnp.uint32) * jnp.uint32(n) + cols.astype(jnp.uint32)
  prio = jnp.where(adm, hash_bits(flat, k0, k1) | jnp.uint32(1), jnp.uint32(0))
  prio = lax.bitcast_convert_type(prio ^ jnp.uint32(2**31), jnp.int32)
  best = jnp.max(prio, axis=1, keepdims=True)
  arg = jnp.min(jnp.where(prio == best, cols, BIG), axis=1, keepdims=True)
  min_slack = jnp.min(jnp.where(ok, slack, BIG), axis=1, keepdims=True)
  return best, arg, min_slack


def round_proposals_reference(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words,
                              divisors):
  """Whole-row ``jnp`` version: ``(choice (G,) or -1, min_slack (G,))``.

  Args:
    dist: ``(G, n)`` float32 distances of the round's rows.
    y_r: ``(G,)`` int32 request duals at ``level``; y_s: ``(n,)`` server duals.
    eligible: ``(n,)`` bool servers usable at this level; valid: ``(G,)`` bool rows.
    row_ids: ``(G,)`` int32 request ids (seed the random priorities).
    level: int32 scalar level; scale0: float32 ``2 n / (eps omega)``.
    key_words: two uint32 words keying the priorities (fresh per round).
    divisors: static tuple of the per-level divisors.
  """
  k0, k1 = key_words
  col, row = (lambda x: x[:, None]), (lambda x: x[None, :])
  best, arg, min_slack = _tile(dist, col(y_r), row(y_s), row(eligible), col(valid), col(row_ids),
                               0, dist.shape[1], level, scale0, k0, k1, divisors)
  return jnp.where(best[:, 0] > NONE, arg[:, 0], -1), min_slack[:, 0]


def _scalars(i_ref, f_ref):
  """``(level, scale0, k0, k1)`` from the int32 and float32 scalar arrays."""
  k0 = lax.bitcast_convert_type(i_ref[1], jnp.uint32)
  k1 = lax.bitcast_convert_type(i_ref[2], jnp.uint32)
  return i_ref[0], f_ref[0], k0, k1


def _kernel_gpu(i_ref, f_ref, d_ref, yr_ref, ys_ref, el_ref, va_ref, id_ref, choice_ref,
                slack_ref, best_ref, *, n, block_cols, divisors):
  """One row block, all column tiles: the reduction runs inside this program."""
  level, scale0, k0, k1 = _scalars(i_ref, f_ref)
  y_r, valid, row_ids = yr_ref[...], va_ref[...] > 0, id_ref[...]

  def body(j, carry):
    best, arg, slack = carry
    c0 = pl.multiple_of(j * block_cols, block_cols)
    cols = pl.ds(c0, block_cols)
    b, a, s = _tile(d_ref[:, cols], y_r, ys_ref[:, cols], el_ref[:, cols] > 0, valid, row_ids,
                    c0, n, level, scale0, k0, k1, divisors)
    better = b > best  # strict: ties keep the earlier (smaller) column
    return jnp.where(better, b, best), jnp.where(better, a, arg), jnp.minimum(slack, s)

  shape = best_ref.shape
  init = (jnp.full(shape, NONE), jnp.zeros(shape, jnp.int32), jnp.full(shape, BIG))
  best, arg, slack = lax.fori_loop(0, d_ref.shape[1] // block_cols, body, init)
  best_ref[...] = best
  choice_ref[...] = arg
  slack_ref[...] = slack


def _kernel_tpu(i_ref, f_ref, d_ref, yr_ref, ys_ref, el_ref, va_ref, id_ref, choice_ref,
                slack_ref, best_ref, *, n, block_cols, divisors):
  """One (row block, column tile): running results in the revisited output blocks."""
  j = pl.program_id(1)
  level, scale0, k0, k1 = _scalars(i_ref, f_ref)
  best, arg, min_slack = _tile(
      d_ref[...], yr_ref[...], ys_ref[...], el_ref[...] > 0, va_ref[...] > 0, id_ref[...],
      j * block_cols, n, level, scale0, k0, k1, divisors)

  @pl.when(j == 0)
  def _():
    best_ref[...] = best
    choice_ref[...] = arg
    slack_ref[...] = min_slack

  @pl.when(j > 0)
  def _():
    better = best > best_ref[...]
    best_ref[...] = jnp.where(better, best, best_ref[...])
    choice_ref[...] = jnp.where(better, arg, choice_ref[...])
    slack_ref[...] = jnp.minimum(slack_ref[...], min_slack)


def _call(operands, *, tpu: bool, n: int, block_rows: int, block_cols: int, divisors,
          interpret: Any):
  """One ``pallas_call`` of either variant on padded 2-D operands."""
  iscal, fscal, dist = operands[:3]
  gp, np_ = dist.shape
  out_shape = [jax.ShapeDtypeStruct((gp, 1), jnp.int32), jax.ShapeDtypeStruct((gp, 1), jnp.int32),
               jax.ShapeDtypeStruct((gp, 1), jnp.int32)]
  kw = dict(n=n, block_cols=block_cols, divisors=divisors)
  if tpu:
    row = pl.BlockSpec((block_rows, 1), lambda i, j: (i, 0))
    col = pl.BlockSpec((1, block_cols), lambda i, j: (0, j))
    scalar = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(
        functools.partial(_kernel_tpu, **kw),
        grid=(gp // block_rows, np_ // block_cols),
        in_specs=[scalar, scalar, pl.BlockSpec((block_rows, block_cols), lambda i, j: (i, j)),
                  row, col, col, row, row],
        out_specs=[row, row, row],
        out_shape=out_shape,
        # Row blocks are independent; column tiles must run in order on one core.
        # (The TPU interpreter reads these too: it splits "parallel" axes over cores.)
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret,
        name="push_relabel_round",
    )(*operands)
  row = pl.BlockSpec((block_rows, 1), lambda i: (i, 0))
  col = pl.BlockSpec((1, np_), lambda i: (0, 0))
  return pl.pallas_call(
      functools.partial(_kernel_gpu, **kw),
      grid=(gp // block_rows,),
      in_specs=[pl.BlockSpec((3,), lambda i: (0,)), pl.BlockSpec((1,), lambda i: (0,)),
                pl.BlockSpec((block_rows, np_), lambda i: (i, 0)), row, col, col, row, row],
      out_specs=[row, row, row],
      out_shape=out_shape,
      # Triton (jax's default Mosaic GPU backend rejects the small scalar blocks).
      compiler_params=None if interpret else plt.CompilerParams(num_warps=4),
      interpret=interpret,
      name="push_relabel_round",
  )(*operands)


@functools.partial(jax.jit, static_argnames=("divisors", "block_rows", "block_cols", "interpret"))
def _round_proposals_pallas(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words,
                            divisors, *, block_rows, block_cols, interpret):
  g, n = dist.shape
  gp, np_ = -(-g // block_rows) * block_rows, -(-n // block_cols) * block_cols
  as_col = lambda x, v: jnp.pad(x, (0, gp - g), constant_values=v).reshape(gp, 1)
  as_row = lambda x, v: jnp.pad(x, (0, np_ - n), constant_values=v).reshape(1, np_)
  k0, k1 = (lax.bitcast_convert_type(jnp.asarray(k, jnp.uint32), jnp.int32) for k in key_words)
  # Padded columns are not eligible, padded rows not valid.
  operands = (
      jnp.stack([jnp.asarray(level, jnp.int32), k0, k1]),
      jnp.asarray(scale0, jnp.float32).reshape(1),
      jnp.pad(dist.astype(jnp.float32), ((0, gp - g), (0, np_ - n))),
      as_col(y_r.astype(jnp.int32), 0), as_row(y_s.astype(jnp.int32), 0),
      as_row(eligible.astype(jnp.int32), 0), as_col(valid.astype(jnp.int32), 0),
      as_col(row_ids.astype(jnp.int32), 0))
  call = functools.partial(_call, n=n, block_rows=block_rows, block_cols=block_cols,
                           divisors=divisors, interpret=interpret)
  if isinstance(interpret, pltpu.InterpretParams):
    choice, slack, best = call(operands, tpu=True)
  elif interpret:
    choice, slack, best = call(operands, tpu=False)
  else:
    # The lowering platform picks the variant (an export for TPU from a CPU host included);
    # on CPU the default branch's pallas_call says that only interpret mode runs there.
    choice, slack, best = lax.platform_dependent(
        operands, tpu=functools.partial(call, tpu=True),
        default=functools.partial(call, tpu=False))
  return jnp.where(best[:g, 0] > NONE, choice[:g, 0], -1), slack[:g, 0]


def _check_inputs(dist, y_r, y_s, eligible, valid, row_ids, key_words, divisors):
  if getattr(dist, "ndim", None) != 2:
    raise ValueError(f"dist must be a (G, n) array, got shape {np.shape(dist)}")
  g, n = dist.shape
  for name, x, size in (("y_r", y_r, g), ("valid", valid, g), ("row_ids", row_ids, g),
                        ("y_s", y_s, n), ("eligible", eligible, n)):
    if np.shape(x) != (size,):
      raise ValueError(f"{name} must have shape ({size},) for dist of shape {dist.shape}, "
                       f"got {np.shape(x)}")
  if len(key_words) != 2:
    raise ValueError(f"key_words must be two uint32 words, got {len(key_words)}")
  if not isinstance(divisors, tuple):
    raise TypeError(f"divisors must be a tuple of floats (static), got {type(divisors).__name__}")


def _check_blocks(block_rows, block_cols, interpret):
  for name, b, lo in (("block_rows", block_rows, 8), ("block_cols", block_cols, 128)):
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
      raise TypeError(f"{name} must be an int, got {b!r}")
    # Powers of two for Triton; (8, 128) tiles for Mosaic.
    if b < lo or b & (b - 1):
      raise ValueError(f"{name} must be a power of two >= {lo}, got {b}")
  _checks.check_interpret(interpret)


def round_proposals_pallas(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words,
                           divisors, *, block_rows=8, block_cols=512, interpret=False):
  """The Pallas kernel: same outputs as :func:`round_proposals_reference`.

  Rows and columns are padded to the block sizes (padded columns are not
  eligible, padded rows not valid).

  Args:
    dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words, divisors:
      as in :func:`round_proposals_reference`.
    block_rows: rows per program, a power of two >= 8 (static).
    block_cols: columns per tile, a power of two >= 128 (static).
    interpret: False compiles the variant of the platform the call is lowered
      for (GPU: Triton, a loop over column tiles per program; TPU: Mosaic,
      column tiles on a sequential grid axis). True runs the GPU variant in
      Pallas' generic interpreter; a ``pltpu.InterpretParams`` runs the TPU
      variant in the TPU interpreter (which can detect races between cores).
      Interpreters run the grid in order: they cannot show a GPU race.

  Returns:
    ``(choice, min_slack)``, each ``(G,)`` int32.
  """
  _check_inputs(dist, y_r, y_s, eligible, valid, row_ids, key_words, divisors)
  _check_blocks(block_rows, block_cols, interpret)
  return _round_proposals_pallas(dist, y_r, y_s, eligible, valid, row_ids, level, scale0,
                                 tuple(key_words), divisors, block_rows=int(block_rows),
                                 block_cols=int(block_cols), interpret=interpret)


def round_proposals(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words, divisors,
                    *, use_kernel=None):
  """Dispatcher: the Pallas kernel on GPU/TPU, the jnp reference elsewhere.

  ``use_kernel=None`` decides by the platform the computation is lowered for
  (``lax.platform_dependent``), not by ``jax.default_backend()``: an export for
  CUDA or TPU from a CPU host gets the kernel. True / False force one path.
  """
  args = (dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words, divisors)
  if use_kernel is None:
    _check_inputs(dist, y_r, y_s, eligible, valid, row_ids, key_words, divisors)
    ops = (dist, y_r, y_s, eligible, valid, row_ids, level, scale0, tuple(key_words))
    kernel = lambda *a: round_proposals_pallas(*a, divisors)
    reference = lambda *a: round_proposals_reference(*a, divisors)
    return lax.platform_dependent(*ops, cuda=kernel, rocm=kernel, tpu=kernel, default=reference)
  if not isinstance(use_kernel, bool):
    raise TypeError(f"use_kernel must be a bool or None, got {use_kernel!r}")
  return (round_proposals_pallas if use_kernel else round_proposals_reference)(*args)
