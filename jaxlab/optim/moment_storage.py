"""How optimizer moments are kept between steps: exact, simulated, or compact.

Three ways to keep a moment buffer (Adam's m and v, Muon's momentum):

* exact: the array itself, in the parameter's dtype;
* simulated low precision (the paper's model): a float array whose values are
  representable in a :class:`~jaxlab.quant.FloatFormat`;
* compact storage (beyond the paper): codes in a narrow dtype, as
  bitsandbytes and torchao 8-bit optimizers do for PyTorch:

  - ``"bfloat16"``: the moment cast to bfloat16 (no scales needed: bfloat16
    has float32's exponent range);
  - ``"float8_e4m3fn"``: block-wise absmax scaling (block 256) to float8_e4m3fn,
    scale = absmax / 448;
  - ``"int8"``: block-wise absmax linear int8, scale = absmax / 127.

  The absmax runs over a block's finite entries; a NaN, inf or overflowing
  entry is stored as a non-finite code (float8's NaN, int8's unused -128) and
  decodes to NaN, so it spoils only itself, as in ``optax.adam``.

  The second moment is stored as ``sqrt(v)``, which halves its dynamic range in
  log scale, and a positive ``v`` is never stored as zero (it is floored at the
  smallest positive code): a zero ``v`` under a non-zero ``m`` would make
  ``m / (sqrt(v) + eps)`` explode, which is how linear int8 second moments
  diverge.

Codes are always rounded stochastically (unbiased), whatever the optimizer's
``rounding``: with round-to-nearest, increments of ``v`` below half a code step
vanish and ``v`` stalls (the paper's V effect). Measured on the digits MLP
(Adam, lr 1e-3, 2000 steps, 3 seeds): bfloat16 storage with nearest rounding
ended at 1.9x the fp32 training loss, with stochastic rounding at 1.00x.

Codes keep the parameter's shape; the per-block scales are a flat float32 array
of ``ceil(size / 256)`` entries per parameter.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxlab.core.fusion import materialize
from jaxlab.core.rng import random_bits
from jaxlab.quant.float_format import FloatFormat, quantize_f32

MOMENT_STORAGES = (None, "bfloat16", "float8_e4m3fn", "int8")
BLOCK_SIZE = 256

_CODE_DTYPES = {
    "bfloat16": jnp.bfloat16,
    "float8_e4m3fn": jnp.float8_e4m3fn,
    "int8": jnp.int8,
}
_CODE_MAX = {"float8_e4m3fn": 448.0, "int8": 127.0}
# Code of a NaN / inf / overflowing entry: float8_e4m3fn's NaN; for int8 the
# otherwise unused -128 (value codes are clipped to +-127). Both decode to NaN.
_NONFINITE_CODE = {"float8_e4m3fn": jnp.nan, "int8": -128.0}


def check_storage(moment_storage: str | None, mu: Any = None, nu: Any = None) -> None:
  """Validates ``moment_storage`` (and that it is not combined with formats)."""
  if moment_storage not in MOMENT_STORAGES:
    raise ValueError(f"moment_storage must be one of {MOMENT_STORAGES}, got {moment_storage!r}")
  if moment_storage is not None and (mu is not None or nu is not None):
    raise ValueError(
        "moment_storage and mu/nu formats are exclusive: pass either "
        f"moment_storage={moment_storage!r} or mu=/nu= FloatFormats, not both"
    )


def num_blocks(size: int) -> int:
  return max(1, -(-size // BLOCK_SIZE))


def _blocks(x: jax.Array) -> jax.Array:
  flat = x.reshape(-1).astype(jnp.float32)
  nb = num_blocks(flat.size)
  flat = jnp.pad(flat, (0, nb * BLOCK_SIZE - flat.size))
  return flat.reshape(nb, BLOCK_SIZE)


def _unblocks(b: jax.Array, like: jax.Array) -> jax.Array:
  return b.reshape(-1)[: like.size].reshape(like.shape)


def _round_to_int(y: jax.Array, rounding: str, key: jax.Array | None) -> jax.Array:
  if rounding == "stochastic":
    u = (random_bits(key, y.shape) >> 8).astype(jnp.float32) * (2.0**-24)  # [0, 1)
    return jnp.floor(y + u)
  if rounding == "truncate":
    return jnp.trunc(y)
  return jnp.round(y)  # ties to even


def _f8_from_f32(q: jax.Array) -> jax.Array:
  """float8_e4m3fn codes of float32 ``q`` whose values the format holds exactly (or NaN).

  The bits are moved, not rounded (``q`` is already on the grid): the same codes as
  ``q.astype(jnp.float8_e4m3fn)``, whose generic rounding costs XLA:CPU three times as
  much. Normals keep exponent and top three mantissa bits, re-biased (127 - 7 = 120, so
  ``(a >> 20) - (120 << 3)``); subnormals (below 2**-6) are ``|q| * 2**9`` quanta; NaN
  is 0x7F; the sign bit is kept.
  """
  bits = lax.bitcast_convert_type(q, jnp.uint32)
  sign = (bits >> 24) & jnp.uint32(0x80)
  a = bits & jnp.uint32(0x7FFFFFFF)
  normal = (a >> 20) - jnp.uint32(120 << 3)
  sub = (lax.bitcast_convert_type(a, jnp.float32) * 2.0**9).astype(jnp.uint32)
  mag = jnp.where(a >= jnp.uint32(0x3C800000), normal, sub)  # 0x3C800000: 2**-6
  mag = jnp.where(a > jnp.uint32(0x7F800000), jnp.uint32(0x7F), mag)
  return lax.bitcast_convert_type((sign | mag).astype(jnp.uint8), jnp.float8_e4m3fn)


def _f32_from_f8(codes: jax.Array) -> jax.Array:
  """float32 values of float8_e4m3fn ``codes``: ``codes.astype(jnp.float32)`` by moving bits.

  Normals re-bias the exponent (inverse of :func:`_f8_from_f32`), subnormals are
  ``m * 2**-9`` (a normal float32, so no flush to zero), 0x7F / 0xFF decode to the
  quiet NaN of the code's sign, as XLA's conversion gives.
  """
  c = lax.bitcast_convert_type(codes, jnp.uint8).astype(jnp.uint32)
  sign = (c & jnp.uint32(0x80)) << 24
  m7 = c & jnp.uint32(0x7F)
  normal = (m7 + jnp.uint32(120 << 3)) << 20
  sub = lax.bitcast_convert_type(m7.astype(jnp.float32) * 2.0**-9, jnp.uint32)
  mag = jnp.where(m7 >= 8, normal, sub)
  mag = jnp.where(m7 == 0x7F, jnp.uint32(0x7FC00000), mag)
  return lax.bitcast_convert_type(sign | mag, jnp.float32)


def _e4m3fn_stochastic(y: jax.Array, rbits: jax.Array) -> jax.Array:
  """Stochastic rounding of finite float32 ``y`` to float8_e4m3fn, saturating at 448.

  ``quantize_f32(y, 4, 3, 448, "stochastic", rbits)`` bit for bit (tested over every
  exponent, with ties, zero and all-ones bits), with the format's constants worked in:
  at or above 2**-9 round away the low ``s`` = 20..23 magnitude bits (``s > 20`` on the
  subnormal grid), up when ``rbits mod 2**s`` falls below them (computed as the carry of
  adding their complement); below 2**-9 the result is
  0 or 2**-9, up when the bits fall below the significand ``sig`` scaled to the quantum
  (``rbits mod 2**t < sig`` for ``t = 141 - e <= 31``, else ``rbits < sig >> (t - 32)``).
  Non-finite ``y`` give 448 (the encoder codes them as NaN).
  """
  u32 = jnp.uint32
  bits = lax.bitcast_convert_type(y, jnp.uint32)
  a = bits & u32(0x7FFFFFFF)
  e = a >> 23  # biased float32 exponent
  s = u32(20) + (u32(121) - jnp.clip(e, u32(118), u32(121)))
  mask = (u32(1) << s) - u32(1)
  # Up when (rbits & mask) < (a & mask), i.e. when adding mask - (rbits & mask) carries
  # past bit s (into the exponent too, at the top of a binade).
  normal = (a + (~rbits & mask)) & ~mask
  sig = (a & u32(0x7FFFFF)) | u32(0x800000)
  t = u32(141) - jnp.minimum(e, u32(117))  # >= 24
  up = jnp.where(t <= 31, (rbits & ((u32(1) << jnp.minimum(t, u32(31))) - u32(1))) < sig,
                 rbits < (sig >> jnp.clip(t - u32(32), u32(0), u32(31))))
  tiny = jnp.where(up & (e > 0), u32(118 << 23), u32(0))  # 118 << 23: 2**-9
  res = jnp.minimum(jnp.where(e >= 118, normal, tiny), u32(0x43E00000))  # 0x43E00000: 448
  return lax.bitcast_convert_type(res | (bits & u32(0x80000000)), jnp.float32)


def _finite_absmax(x: jax.Array, nonnegative: bool) -> jax.Array:
  """Per-block maximum of ``|x|`` (of ``max(x, 0)`` if ``nonnegative``) over finite entries.

  One masked reduction, ``max(where(a <= FLT_MAX, a, 0))`` (a NaN compares false), with no
  branch. XLA:CPU writes the masked array before its library reduction reads it, but in an
  A/B of ``experiments.bench_quant_optim``'s whole training step (same process, interleaved
  rounds; not a committed record) this ran faster than what it replaced: plain max and min
  reductions on ``x`` with the finite-only maximum in a ``lax.cond``, whose conditional
  waits for both reductions, in a step compiled to more ops. The same values: where every
  entry is finite both give the largest ``|x|``.
  """
  b = _blocks(x)
  a = jnp.maximum(b, 0.0) if nonnegative else jnp.abs(b)
  return jnp.max(jnp.where(a <= jnp.finfo(jnp.float32).max, a, 0.0), axis=1)


def _rbits(rounding: str, key: jax.Array | None, shape) -> jax.Array | None:
  return random_bits(key, shape) if rounding == "stochastic" else None


# encode and decode are jitted functions: an optimizer step codes every leaf, and inside a
# trace a later call with the same shapes reuses jit's cached jaxpr (and its batched form
# under vmap) instead of tracing the codec again; XLA inlines the call when compiling.
# Called eagerly, each is one compiled program rather than one per operation.
@functools.partial(jax.jit, static_argnames=("storage", "rounding", "second_moment"))
def encode(
    x: jax.Array, storage: str, rounding: str, key: jax.Array | None, second_moment: bool
) -> tuple[jax.Array, jax.Array | None]:
  """Encodes one moment buffer. Returns ``(codes, scales)``; scales may be None."""
  codes, scales, _ = _encode(x, storage, rounding, key, second_moment)
  return codes, scales


@functools.partial(jax.jit,
                   static_argnames=("storage", "rounding", "second_moment", "dtype", "root"))
def encode_and_decode(
    x: jax.Array, storage: str, rounding: str, key: jax.Array | None, second_moment: bool,
    dtype, root: bool = False,
) -> tuple[jax.Array, jax.Array | None, jax.Array]:
  """``(codes, scales, decode(codes, scales, ...))`` in one pass, as an optimizer step needs.

  The decoded moment is computed from the rounded values before they become codes
  (``q * scale``), the same numbers :func:`decode` gives (NaN where it gives NaN), so
  the step does not unpack the codes it has just packed. With ``root`` (a second moment
  in a block-scaled storage, see :func:`stores_root`) the third value is the decoded
  root ``sqrt(v)`` itself, before :func:`decode` squares it: Adam's denominator needs
  ``sqrt(v)``, and squaring to take the root again costs a square root per element.
  """
  if root and not stores_root(storage, second_moment):
    raise ValueError(f"root=True needs a second moment in a block-scaled storage, got "
                     f"storage={storage!r}, second_moment={second_moment}")
  codes, scales, q = _encode(x, storage, rounding, key, second_moment)
  if storage == "bfloat16":
    return codes, None, codes.astype(dtype)
  y = q * scales[:, None]
  if storage == "int8":
    y = jnp.where(q == _NONFINITE_CODE["int8"], jnp.nan, y)
  y = _unblocks(y, x)
  if second_moment and not root:
    y = y * y
  return codes, scales, y.astype(dtype)


def stores_root(storage: str | None, second_moment: bool) -> bool:
  """Whether ``storage`` codes a second moment as ``sqrt(v)`` (int8 and float8 do)."""
  return second_moment and storage in _CODE_MAX


def _encode(x, storage, rounding, key, second_moment):
  """Codes, scales and the coded values ``q`` by block (float32; None for bfloat16)."""
  if storage == "bfloat16":
    fmt = FloatFormat.BF16
    y = quantize_f32(x.astype(jnp.float32), fmt.exp_bits, fmt.man_bits, None, rounding,
                     _rbits(rounding, key, x.shape))
    return y.astype(jnp.bfloat16), None, None
  # The second moment is coded as sqrt(max(v, 0)), finite exactly where max(v, 0) is.
  b = _blocks(jnp.maximum(x, 0.0) if second_moment else x)
  # Scales over the block's finite entries only: one NaN, inf or overflowing
  # entry must not poison the other 255 (as optax.adam, where it stays one
  # element). Such an entry gets the non-finite code below and decodes to NaN.
  finite = jnp.isfinite(b)
  absmax = _finite_absmax(x, second_moment)
  if second_moment:
    # max(sqrt(.)) = sqrt(max(.)) exactly (a correctly rounded sqrt is monotonic), so the
    # block maximum is taken on v: no pass that writes sqrt(v) just for the reduction.
    absmax, b = jnp.sqrt(absmax), jnp.sqrt(b)
  # Both divisions as multiplications by a float32 reciprocal: what XLA:CPU compiled
  # ``absmax / max_code`` and ``b / scale`` into (its algebraic simplifier), now stated,
  # so the codes do not depend on that rewrite.
  scale = absmax * jnp.float32(1.0 / _CODE_MAX[storage])
  y = b * (1.0 / jnp.where(scale > 0, scale, 1.0))[:, None]
  if storage == "int8":
    q = jnp.clip(_round_to_int(y, rounding, key), -127, 127)
    smallest = 1.0
  else:
    fmt = FloatFormat.E4M3FN
    if rounding == "stochastic":  # what the optimizers use: quantize_f32's bits, fewer ops
      q = _e4m3fn_stochastic(y, random_bits(key, y.shape))
    else:
      q = quantize_f32(y, fmt.exp_bits, fmt.man_bits, fmt.max_value, rounding)
    smallest = fmt.min_subnormal
  if second_moment:  # a positive v must not decode to 0 (see module docstring)
    q = jnp.where((q == 0) & (y > 0), smallest, q)
  # The codes have two consumers, the stored codes and the decoded moment the update reads:
  # written once, or XLA recomputes the whole encode (random bits, scaling, rounding) in
  # the update, which measured as the step's largest fusion.
  q = materialize(jnp.where(finite, q, _NONFINITE_CODE[storage]))
  y = _unblocks(q, x)
  codes = y.astype(jnp.int8) if storage == "int8" else _f8_from_f32(y)
  return codes, scale, q


@functools.partial(jax.jit, static_argnames=("storage", "second_moment", "dtype"))
def decode(
    codes: jax.Array, scales: jax.Array | None, storage: str, second_moment: bool, dtype
) -> jax.Array:
  """Inverse of :func:`encode`, returning a float array of ``dtype``."""
  if storage == "bfloat16":
    return codes.astype(dtype)
  c = _blocks(codes.astype(jnp.float32) if storage == "int8" else _f32_from_f8(codes))
  if storage == "int8":  # -128, never a value code, marks a non-finite entry
    c = jnp.where(c == _NONFINITE_CODE["int8"], jnp.nan, c)
  y = c * scales[:, None]  # finite scales (see encode): no 0 * inf
  y = _unblocks(y, codes)
  if second_moment:
    y = y * y
  return y.astype(dtype)


def init_codes(params: Any, storage: str | None) -> tuple[Any, Any]:
  """Zero moment buffers for ``params``: ``(codes_tree, scales_tree_or_None)``."""
  if storage is None:
    return jax.tree.map(jnp.zeros_like, params), None
  codes = jax.tree.map(lambda p: jnp.zeros(p.shape, _CODE_DTYPES[storage]), params)
  if storage == "bfloat16":
    return codes, None
  scales = jax.tree.map(lambda p: jnp.zeros((num_blocks(p.size),), jnp.float32), params)
  return codes, scales
