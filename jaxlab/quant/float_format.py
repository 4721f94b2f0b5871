"""Simulated low-precision floating-point formats on a float32 carrier.

A value "in format E?M?" is stored here as an ordinary float32 whose value is
exactly representable in the target format. Rounding is done with integer
operations on the float32 bit pattern, so it is exact, keeps the target's
subnormals (XLA on CPU flushes float subnormals in arithmetic, integer ops are
unaffected) and agrees bit for bit with ``ml_dtypes`` casts for nearest-even.

The model (IEEE-754-like, as in the paper's analysis):

* ``bias = 2**(E-1) - 1``, smallest normal exponent ``emin = 1 - bias``;
* subnormals with spacing ``2**(emin - M)``;
* the top exponent is reserved for inf/nan, so the largest finite value is
  ``(2 - 2**-M) * 2**bias`` unless ``max_value`` overrides it (float8_e4m3fn
  uses the top exponent for normals and tops out at 448).

Rounding modes:

* ``"nearest"``: round to nearest, ties to even (IEEE default);
* ``"stochastic"``: round up with probability equal to the discarded fraction
  of an ulp, so ``E[Q(x)] = x`` (uniform random bits below the kept mantissa);
* ``"truncate"``: toward zero.

Overflow saturates to ``+-max_value``; NaN and inf pass through unchanged.

References:
  Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
  Floating-point Quantization", arXiv:2510.21314, ICLR 2026.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxlab.core.checks import check_int, check_range, concrete
from jaxlab.core.rng import as_key, random_bits

ROUNDING_MODES = ("nearest", "stochastic", "truncate")

_SIGN_MASK = 0x80000000
_ABS_MASK = 0x7FFFFFFF
_MANT_MASK = 0x007FFFFF
_IMPLICIT_BIT = 0x00800000


@dataclasses.dataclass(frozen=True)
class FloatFormat:
  """An IEEE-like binary floating-point format with ``exp_bits`` and ``man_bits``.

  Args:
    exp_bits: exponent width E, 2..8 (float32 carrier).
    man_bits: explicit mantissa width M, 0..23.
    max_value: optional largest finite magnitude, overriding the IEEE-like
      ``(2 - 2**-M) * 2**bias``; must be representable in the format
      (e.g. 448 for float8_e4m3fn, whose top exponent holds normal numbers).

  Bit widths may also be traced integers (for a sweep vmapped over formats);
  they are validated only when concrete.

  Example:
    >>> fmt = FloatFormat(4, 3)            # float8_e4m3 (IEEE-like, max 240)
    >>> FloatFormat.E4M3FN.max_finite      # 448.0
  """

  exp_bits: Any
  man_bits: Any
  max_value: Any = None

  BF16: ClassVar[FloatFormat]
  FP16: ClassVar[FloatFormat]
  E5M2: ClassVar[FloatFormat]
  E4M3: ClassVar[FloatFormat]
  E3M4: ClassVar[FloatFormat]
  E4M3FN: ClassVar[FloatFormat]
  FP32: ClassVar[FloatFormat]

  def __post_init__(self):
    e = check_int(self.exp_bits, "exp_bits")
    m = check_int(self.man_bits, "man_bits")
    if e is not None and not 2 <= e <= 8:
      raise ValueError(f"exp_bits must be in 2..8 (float32 carrier), got {e}")
    if m is not None and not 0 <= m <= 23:
      raise ValueError(f"man_bits must be in 0..23 (float32 carrier), got {m}")
    if self.max_value is None or isinstance(self.max_value, jax.core.Tracer):
      return
    try:
      mv = float(self.max_value)
    except TypeError as err:
      raise TypeError(
          f"max_value must be a positive float or None, got {self.max_value!r}") from err
    if not (math.isfinite(mv) and mv > 0):
      raise ValueError(f"max_value must be positive and finite, got {mv}")
    if e is not None and m is not None:
      bias = 2 ** (e - 1) - 1
      emin = 1 - bias
      exponent = max(math.floor(math.log2(mv)), emin)
      scaled = mv / 2.0 ** (exponent - m)
      # The top exponent may hold normals (as float8_e4m3fn), nothing above it.
      top = (2 - 2.0**-m) * 2.0 ** (bias + 1)
      if not scaled.is_integer() or mv > min(top, float(np.finfo(np.float32).max)):
        raise ValueError(
            f"max_value={mv} is not representable with exp_bits={e}, man_bits={m} "
            f"(at most {top} on this exponent range)"
        )

  @property
  def bias(self) -> int:
    return 2 ** (int(self.exp_bits) - 1) - 1

  @property
  def max_finite(self) -> float:
    """Largest finite magnitude (concrete formats only)."""
    if self.max_value is not None:
      return float(self.max_value)
    m = int(self.man_bits)
    return (2.0 - 2.0**-m) * 2.0**self.bias

  @property
  def min_normal(self) -> float:
    return 2.0 ** (1 - self.bias)

  @property
  def min_subnormal(self) -> float:
    return 2.0 ** (1 - self.bias - int(self.man_bits))

  def __str__(self) -> str:
    suffix = "" if self.max_value is None else f"(max={self.max_value})"
    return f"E{self.exp_bits}M{self.man_bits}{suffix}"


FloatFormat.BF16 = FloatFormat(8, 7)
FloatFormat.FP16 = FloatFormat(5, 10)
FloatFormat.E5M2 = FloatFormat(5, 2)
FloatFormat.E4M3 = FloatFormat(4, 3)
FloatFormat.E3M4 = FloatFormat(3, 4)
FloatFormat.E4M3FN = FloatFormat(4, 3, max_value=448.0)
FloatFormat.FP32 = FloatFormat(8, 23)


def check_rounding(
    rounding: str, key: Any = None, *, need_key: bool = True
) -> None:
  """Raises ``ValueError`` for an unknown rounding mode or a missing key."""
  if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
    raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
  if need_key and rounding == "stochastic" and key is None:
    raise ValueError('rounding="stochastic" requires a PRNG key (key=...)')


def _round_shift(v: jax.Array, s: jax.Array, rounding: str, rbits: jax.Array | None):
  """``round(v / 2**s)`` for uint32 ``v`` and shifts ``0 <= s <= 31``."""
  one = jnp.uint32(1)
  mask = (one << s) - one
  low = v & mask
  kept = v >> s
  if rounding == "nearest":
    half = jnp.where(s > 0, one << (jnp.maximum(s, one) - one), jnp.uint32(0))
    odd = (kept & one) == one
    up = (s > 0) & ((low > half) | ((low == half) & odd))
  elif rounding == "truncate":
    up = jnp.zeros(v.shape, bool)
  else:  # stochastic
    up = (rbits & mask) < low  # P(up) = low / 2**s: unbiased
  return kept + up.astype(jnp.uint32)


def _is_int(value: Any, equal_to: int | None = None) -> bool:
  """True for a concrete Python/NumPy integer (optionally equal to ``equal_to``)."""
  ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
  return ok and (equal_to is None or int(value) == equal_to)


def _pow2_bits(k: jax.Array) -> jax.Array:
  """float32 bits of ``2**(k - 127)`` for a biased exponent ``k >= -22``."""
  return jnp.where(
      k >= 1,
      jnp.maximum(k, 1).astype(jnp.uint32) << 23,
      jnp.uint32(1) << jnp.clip(k + 22, 0, 22).astype(jnp.uint32),
  )


def quantize_f32(
    x: jax.Array,
    exp_bits: jax.Array,
    man_bits: jax.Array,
    max_value: jax.Array | None,
    rounding: str,
    rbits: jax.Array | None = None,
) -> jax.Array:
  """Core rounding of a float32 array with (possibly traced) bit widths.

  Pure ``jnp`` elementwise code with no PRNG inside, so it runs unchanged in a
  Pallas kernel body. ``rbits`` are uniform uint32 bits of ``x``'s shape,
  needed only for ``rounding="stochastic"``.
  """
  e_bits = jnp.asarray(exp_bits, jnp.int32)
  m_bits = jnp.asarray(man_bits, jnp.int32)
  bits = lax.bitcast_convert_type(x, jnp.uint32)
  sign = bits & jnp.uint32(_SIGN_MASK)
  a = bits & jnp.uint32(_ABS_MASK)
  e32 = (a >> 23).astype(jnp.int32)
  special = e32 == 255  # inf / nan pass through

  bias = (jnp.int32(1) << (e_bits - 1)) - 1
  emin = 1 - bias
  e = jnp.maximum(e32, 1) - 127  # unbiased exponent (float32 subnormals: -126)
  # Bits of float32 mantissa to drop: 23 - M for target normals, more below emin.
  s = 23 - m_bits + jnp.maximum(emin - e, 0)

  # s <= 22: round the raw magnitude bits. A carry moves into the exponent field
  # correctly and bit s is the parity of the quantum count, because the
  # implicit bit 2**23 is an even multiple of 2**s.
  s_small = jnp.minimum(s, 22).astype(jnp.uint32)
  res_small = _round_shift(a, s_small, rounding, rbits) << s_small
  # With a concrete E = 8 and M >= 1 every float32 input has s <= 22 (target
  # and carrier share the exponent range), so the tiny-value path is skipped.
  if _is_int(exp_bits, 8) and _is_int(man_bits) and int(man_bits) >= 1:
    res = res_small
  else:
    # s >= 23 (M = 0, or |x| below twice the target's smallest subnormal): the
    # result is 0, 1 or 2 quanta 2**q. Round the full significand (implicit bit
    # included), whose count parity is what ties-to-even needs.
    sig = (a & jnp.uint32(_MANT_MASK)) | jnp.where(
        e32 > 0, jnp.uint32(_IMPLICIT_BIT), jnp.uint32(0)
    )
    s_big = jnp.clip(s, 23, 31).astype(jnp.uint32)
    r_big = _round_shift(sig, s_big, rounding, rbits)
    # s > 31: |x| < 2**-8 quanta. Nearest and truncate give 0; stochastic rounds
    # up with probability sig / 2**s, i.e. when 32 random bits fall below
    # floor(sig * 2**(32 - s)) (probability error < 2**-32).
    if rounding == "stochastic":
      threshold = sig >> jnp.clip(s - 32, 0, 31).astype(jnp.uint32)
      tiny_up = (rbits < threshold).astype(jnp.uint32)
    else:
      tiny_up = jnp.uint32(0)
    r_big = jnp.where(s > 31, tiny_up, r_big)
    k = jnp.maximum(e, emin) - m_bits + 127  # biased float32 exponent of the quantum
    res_big = jnp.where(
        r_big == 0,
        jnp.uint32(0),
        jnp.where(r_big == 1, _pow2_bits(k), _pow2_bits(k + 1)),
    )
    res = jnp.where(s <= 22, res_small, res_big)

  if max_value is None:
    mant_ones = ((jnp.int32(1) << m_bits) - 1) << (23 - m_bits)
    max_bits = ((bias + 127) << 23) | mant_ones
    max_f = lax.bitcast_convert_type(max_bits.astype(jnp.uint32), jnp.float32)
  else:
    max_f = jnp.asarray(max_value, jnp.float32)
  # Saturate (inf included) in the integer domain: ``res`` and ``max_f`` are non-negative
  # and not NaN, so their bits order as their values do. A float comparison would pass
  # subnormals through float registers, which flush them to zero where denormals are off
  # (TPU, and XLA:CPU with some code generators).
  max_u = lax.bitcast_convert_type(max_f, jnp.uint32)
  res = jnp.where(res > max_u, max_u, res)
  res = jnp.where(special, a, res) | sign
  return lax.bitcast_convert_type(res, jnp.float32)


def check_widths(exp_bits: Any, man_bits: Any, max_value: Any = None) -> None:
  """Validates concrete bit widths (scalars or arrays) as :class:`FloatFormat` does.

  Traced widths are skipped (a vmapped sweep). Raises ``TypeError`` for
  non-integers and ``ValueError`` for ``exp_bits`` outside 2..8, ``man_bits``
  outside 0..23 or a ``max_value`` the format cannot hold.
  """
  widths = {}
  for name, value, lo, hi in (("exp_bits", exp_bits, 2, 8), ("man_bits", man_bits, 0, 23)):
    arr = concrete(value, name)
    if arr is not None:
      if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integers, got {value!r} of dtype {arr.dtype}")
      check_range(arr, name, lo=lo, hi=hi, scalar=False)
      if arr.ndim == 0:
        widths[name] = int(arr)
  if len(widths) == 2 and max_value is not None and np.ndim(max_value) == 0:
    FloatFormat(widths["exp_bits"], widths["man_bits"], max_value)  # checks max_value
  elif max_value is not None:
    check_range(max_value, "max_value", lo=0.0, lo_open=True, scalar=False)


def _check_float(x: jax.Array, name: str = "x") -> None:
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")


def quantize_bits(
    x: jax.typing.ArrayLike,
    exp_bits: jax.typing.ArrayLike,
    man_bits: jax.typing.ArrayLike,
    max_value: jax.typing.ArrayLike | None = None,
    *,
    rounding: str = "nearest",
    key: jax.Array | None = None,
    offset: int = 0,
) -> jax.Array:
  """Rounds ``x`` to the format with the given (possibly traced) bit widths.

  Like :func:`quantize`, but the format is given as arrays, so a sweep over
  formats is one compiled function::

      sweep = jax.jit(jax.vmap(lambda m: quantize_bits(x, 8, m)))
      sweep(jnp.arange(1, 24))  # 23 mantissa widths, one compilation

  Args:
    x: float array (computed on a float32 carrier, returned in x's dtype).
    exp_bits: exponent width, 2..8 (int scalar or array; not checked if traced).
    man_bits: mantissa width, 0..23 (out-of-range concrete widths raise
      ``ValueError``, as :class:`FloatFormat` does).
    max_value: largest finite magnitude, or None for the IEEE-like maximum.
    rounding: "nearest" (ties to even), "stochastic" or "truncate".
    key: PRNG key (typed or raw uint32 key data), required for "stochastic".
    offset: index of x's first element in the key's stream: element ``i`` of
      ``x.ravel()`` rounds with ``random_bits(key, ...)[offset + i]``, so the
      leaves of a pytree quantized at their offsets in the flattened tree draw
      what one call on the concatenated leaves would (and what a fused kernel
      over that flat buffer draws).

  Returns:
    An array of x's shape and dtype with values representable in the format
    (exactly for float32 inputs; other dtypes are rounded on a float32 carrier
    and cast back, which rounds once more where the dtype is coarser than the
    format, saturating at the dtype's largest value; float64 beyond float32's
    range saturates like any overflow).
  """
  check_rounding(rounding, key)
  x = jnp.asarray(x)
  _check_float(x)
  check_widths(exp_bits, man_bits, max_value)
  if rounding == "stochastic":
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
      raise TypeError(f"offset must be an int (an element index), got {offset!r}")
    if isinstance(key, (int, np.integer)):
      key = as_key(key)  # an int seed: a key here, not an int32 operand of the jit below
  else:
    key, offset = None, 0  # unused: one compiled (and traced) program for every key and offset
  widths = (exp_bits, man_bits, max_value)
  # Python numbers stay static (E = 8 with M >= 1 skips the tiny-value path); arrays and
  # tracers are operands.
  static = tuple(w if _is_static(w) else None for w in widths)
  operands = tuple(None if _is_static(w) else w for w in widths)
  return _quantize_bits_jit(x, operands, key, static=static, rounding=rounding, offset=offset)


def _is_static(value: Any) -> bool:
  return value is None or (isinstance(value, (int, float, np.integer, np.floating))
                           and not isinstance(value, bool))


# One jitted function, so that a call inside another trace (an optimizer step in a scanned,
# vmapped sweep quantizes G, M, V and W of every leaf at every such call) reuses jit's
# cached jaxpr of an earlier call with the same shapes and static arguments, and its
# batched form under vmap, instead of tracing and batching the rounding's few dozen jnp
# operations again. It stays a call in the staged program (XLA inlines it when compiling);
# the rounding is integer arithmetic, so the values are those of the inlined code bit for
# bit. Called eagerly it is one compiled program rather than one per operation.
@functools.partial(jax.jit, static_argnames=("static", "rounding", "offset"))
def _quantize_bits_jit(x, operands, key, *, static, rounding, offset):
  exp_bits, man_bits, max_value = (s if o is None else o for s, o in zip(static, operands,
                                                                          strict=True))
  rbits = None
  if rounding == "stochastic":
    rbits = random_bits(key, x.shape, offset)
  carrier = x
  if jnp.finfo(x.dtype).max > np.finfo(np.float32).max:
    # float64 beyond float32's range would become inf on the carrier: saturate
    # it to float32's largest value (which then saturates to the format's).
    f32_max = float(np.finfo(np.float32).max)
    carrier = jnp.where(jnp.isfinite(x), jnp.clip(x, -f32_max, f32_max), x)
  y = quantize_f32(carrier.astype(jnp.float32), exp_bits, man_bits, max_value, rounding, rbits)
  if x.dtype != jnp.float32 and jnp.finfo(x.dtype).max < np.finfo(np.float32).max:
    # The float32 result is cast back to x's dtype, which rounds again where the
    # dtype is coarser than the format; saturate first so a finite input never
    # becomes inf (e.g. float16 65504 -> bfloat16 grid 65536).
    dtype_max = quantize_f32(jnp.float32(jnp.finfo(x.dtype).max), exp_bits, man_bits,
                             max_value, "truncate")
    y = jnp.clip(y, -dtype_max, dtype_max)
  return y.astype(x.dtype)


def quantize(
    x: jax.typing.ArrayLike,
    fmt: FloatFormat,
    *,
    rounding: str = "nearest",
    key: jax.Array | None = None,
    offset: int = 0,
) -> jax.Array:
  """Rounds ``x`` to values representable in ``fmt``.

  Args:
    x: float array.
    fmt: the target :class:`FloatFormat`.
    rounding: "nearest" (ties to even), "stochastic" (unbiased, needs ``key``)
      or "truncate" (toward zero).
    key: PRNG key for stochastic rounding.
    offset: index of x's first element in the key's random stream (see
      :func:`quantize_bits`).

  Returns:
    ``Q(x)``, same shape and dtype as ``x``. Subnormals of ``fmt`` are kept,
    overflow saturates to ``+-fmt.max_finite``, NaN and inf pass through.

  Example:
    >>> quantize(jnp.float32(0.1), FloatFormat.BF16)  # 0.10009765625
  """
  if not isinstance(fmt, FloatFormat):
    raise TypeError(f"fmt must be a FloatFormat, got {type(fmt).__name__}")
  check_rounding(rounding, key)
  return quantize_bits(
      x, fmt.exp_bits, fmt.man_bits, fmt.max_value, rounding=rounding, key=key, offset=offset
  )


def quantize_tree(
    tree: Any,
    fmt: FloatFormat | None,
    *,
    rounding: str = "nearest",
    key: jax.Array | None = None,
) -> Any:
  """Applies :func:`quantize` to every leaf of a pytree (one key per leaf).

  ``fmt=None`` returns the tree unchanged. Used for the paper's master/worker
  model, where the gradient is evaluated at ``Q_W(W)``.
  """
  if fmt is None:
    return tree
  if not isinstance(fmt, FloatFormat):
    raise TypeError(f"fmt must be a FloatFormat or None, got {type(fmt).__name__}")
  check_rounding(rounding, key)
  leaves, treedef = jax.tree.flatten(tree)
  keys = [None] * len(leaves)
  if rounding == "stochastic":
    keys = list(jax.random.split(as_key(key), max(len(leaves), 1)))
  out = [quantize(x, fmt, rounding=rounding, key=k) for x, k in zip(leaves, keys, strict=False)]
  return jax.tree.unflatten(treedef, out)
