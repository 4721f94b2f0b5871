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

References:
  "Efficient Algorithms for Incremental Metric Bipartite Matching", ICLR 2026
  (OpenReview wnIanx0r0w), the parallel round of its batch algorithm.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from jaxlab.core.rng import hash_bits

BIG = np.int32(2**30)


def _scaled(d: jax.Array, level: jax.Array, scale0: jax.Array, divisors: tuple[float, ...]):
  """Integer cost at ``level`` (traced) from float distances, chained as the paper."""
  c = jnp.ceil(d * scale0)
  out = c
  for i, div in enumerate(divisors):
    c = jnp.ceil(c / np.float32(div))
    out = jnp.where(level > i, c, out)
  return jnp.minimum(out, np.float32(BIG)).astype(jnp.int32)


def _tile(d, y_r, y_s, eligible, valid, row_ids, col0, n, level, scale0, k0, k1, divisors):
  """Per-row (best priority, its column, min eligible slack) of one tile."""
  slack = _scaled(d, level, scale0, divisors) - y_r[:, None] - y_s[None, :]
  ok = eligible[None, :] & valid[:, None]
  adm = ok & (slack == -1)
  cols = col0 + jax.lax.broadcasted_iota(jnp.int32, d.shape, 1)
  flat = row_ids[:, None].astype(jnp.uint32) * jnp.uint32(n) + cols.astype(jnp.uint32)
  prio = jnp.where(adm, hash_bits(flat, k0, k1) | jnp.uint32(1), jnp.uint32(0))
  best = jnp.max(prio, axis=1)
  arg = jnp.argmax(prio, axis=1).astype(jnp.int32) + col0
  min_slack = jnp.min(jnp.where(ok, slack, BIG), axis=1)
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
  best, arg, min_slack = _tile(dist, y_r, y_s, eligible, valid, row_ids, 0, dist.shape[1],
                               level, scale0, k0, k1, divisors)
  return jnp.where(best > 0, arg, -1), min_slack


def _kernel(i_ref, f_ref, d_ref, yr_ref, ys_ref, el_ref, va_ref, id_ref, choice_ref, slack_ref,
            best_ref, *, n, block_cols, divisors):
  j = pl.program_id(1)
  level, scale0 = i_ref[0], f_ref[0]
  k0 = jax.lax.bitcast_convert_type(i_ref[1], jnp.uint32)
  k1 = jax.lax.bitcast_convert_type(i_ref[2], jnp.uint32)
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


@functools.partial(jax.jit, static_argnames=("divisors", "block_rows", "block_cols", "interpret"))
def round_proposals_pallas(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words,
                           divisors, *, block_rows=8, block_cols=512, interpret=False):
  """The Pallas kernel: same outputs as :func:`round_proposals_reference`.

  Grid (row blocks, column blocks); the column axis is a reduction carried in
  the revisited output blocks. Rows and columns are padded to the block sizes
  (padded columns are not eligible, padded rows not valid).
  """
  g, n = dist.shape
  gp, np_ = -(-g // block_rows) * block_rows, -(-n // block_cols) * block_cols
  pad2 = lambda x, v: jnp.pad(x, ((0, gp - g), (0, np_ - n)), constant_values=v)
  pad1 = lambda x, size, v: jnp.pad(x, (0, size - x.shape[0]), constant_values=v)
  k0, k1 = (jax.lax.bitcast_convert_type(jnp.asarray(k, jnp.uint32), jnp.int32)
            for k in key_words)
  iscal = jnp.stack([jnp.asarray(level, jnp.int32), k0, k1])
  fscal = jnp.asarray(scale0, jnp.float32).reshape(1)
  kernel = functools.partial(_kernel, n=n, block_cols=block_cols, divisors=divisors)
  row_spec = pl.BlockSpec((block_rows,), lambda i, j: (i,))
  col_spec = pl.BlockSpec((block_cols,), lambda i, j: (j,))
  choice, slack, best = pl.pallas_call(
      kernel,
      grid=(gp // block_rows, np_ // block_cols),
      in_specs=[pl.BlockSpec((3,), lambda i, j: (0,)), pl.BlockSpec((1,), lambda i, j: (0,)),
                pl.BlockSpec((block_rows, block_cols), lambda i, j: (i, j)),
                row_spec, col_spec, col_spec, row_spec, row_spec],
      out_specs=[row_spec, row_spec, row_spec],
      out_shape=[jax.ShapeDtypeStruct((gp,), jnp.int32), jax.ShapeDtypeStruct((gp,), jnp.int32),
                 jax.ShapeDtypeStruct((gp,), jnp.uint32)],
      interpret=interpret,
      # Triton on GPU (jax's default Mosaic GPU backend rejects the small scalar
      # blocks); ignored in interpret mode.
      compiler_params=None if interpret or jax.default_backend() == "tpu" else
      plt.CompilerParams(num_warps=4),
      name="push_relabel_round",
  )(iscal, fscal, pad2(dist.astype(jnp.float32), 0.0), pad1(y_r, gp, 0), pad1(y_s, np_, 0),
    pad1(eligible.astype(jnp.int32), np_, 0), pad1(valid.astype(jnp.int32), gp, 0),
    pad1(row_ids, gp, 0))
  return jnp.where(best[:g] > 0, choice[:g], -1), slack[:g]


def round_proposals(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words, divisors,
                    *, use_kernel=None):
  """Dispatcher: the Pallas kernel on GPU/TPU, the jnp reference elsewhere."""
  if use_kernel is None:
    use_kernel = jax.default_backend() in ("gpu", "tpu")
  fn = round_proposals_pallas if use_kernel else round_proposals_reference
  return fn(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, key_words, divisors)
