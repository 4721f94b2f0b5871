r"""One fused quantized Adam(W) step as a Pallas kernel, with its jnp reference.

The master update of Tang, Li, Zou (2025), Alg. 1, on flat float32 buffers:
one pass reads ``w, g, m, v`` and writes ``w, m, v``. With step ``t``,
``c_1 = 1 - \beta_1^t`` and ``c_2 = 1 - \beta_2^t``:

.. math::
  \hat g &= Q_G(g) \\
  m_t &= Q_M\big((1 - \beta_1) \hat g + \beta_1 m_{t-1}\big) \\
  v_t &= Q_V\big((1 - \beta_2) \hat g^2 + \beta_2 v_{t-1}\big) \\
  u &= \frac{m_t / c_1}{\sqrt{v_t / c_2} + \epsilon} + \lambda w_{t-1} \\
  w_t &= Q_W\big(w_{t-1} + (-\eta) u\big)

Each line is evaluated in exactly this order, with the scalars formed as
``optax.adam`` / ``optax.adamw`` and :func:`jaxlab.optim.quantized_adam.
quantized_adam` (``nesterov=False``) form them, so all three perform the same
IEEE float32 operations. Three provisos on "bit for bit":

* Compilers (XLA:CPU, XLA:GPU, Triton) may contract ``a * b + c`` into a fused
  multiply-add, and which product of ``a * b + c * d`` gets contracted depends
  on the surrounding code. Paths that contract differently differ by one
  rounding of a product where the products are inexact; the jitted reference
  and the jitted optax chain agree exactly on CPU, the interpret-mode kernel
  agrees exactly when the products are exact (dyadic hyperparameters) and
  within one rounding otherwise (tests).
* XLA's algebraic simplifier rewrites divisions depending on the program
  around them: ``x / c`` for a broadcast scalar ``c`` (the bias corrections)
  into ``x * (1 / c)``, ``(a / b) / c`` into ``a / (b * c)``. Whether it does
  so for optax's Adam depends, e.g., on how many leaves share ``c``, and the
  interpret-mode kernel is XLA code too, while Triton and Mosaic divide as
  written. So ``u`` may differ by a float32 ulp or two between any two of
  these compilations. ``m`` and ``v`` are unaffected, and the new weights
  only where an ulp of ``u`` moves the rounding of ``w + u`` (rare while
  ``|u|`` is much smaller than ``|w|``, rarer still through a coarse ``Q_W``).
* ``quantized_adam``'s ``Q_W`` is an update ``Q_W(w + u) - w`` added back by
  ``optax.apply_updates``; it lands exactly on ``Q_W(w + u)`` (what the kernel
  stores) whenever that difference is exact in float32, e.g. whenever ``w``
  is already in the weight format (see ``jaxlab.optim.transforms.
  quantize_weights``).

Stochastic rounding draws its bits inside the kernel: ``Q_k`` rounds element
``i`` of the flat buffer with ``stream_bits(i, k0, k1)`` (:mod:`jaxlab.core.rng`),
``(k0, k1)`` the key words of quantity ``k``'s key, so no N-length arrays of
random bits are materialized and read. It is the stream ``random_bits`` gives
over the whole buffer, i.e. what the reference's ``quantize(x, fmt, key=k)``
draws, so kernel and reference agree bit for bit in stochastic mode too.

Layout: the wrapper pads ``N`` to a multiple of ``block_size`` and views the
buffers as ``(rows, 128)``, so every block is ``(block_size // 128, 128)``: an
(8, 128)-tiled f32 block for Mosaic (TPU) and a power-of-two block for Triton
(GPU). Hyperparameters travel as one small float32 array and the format bit
widths and key words as one small int32 array (in SMEM on TPU), so a new
learning rate, step, key or format does not recompile. A format that is off is passed as E8M23
with the float32 maximum, which :func:`~jaxlab.quant.quantize_f32` maps to
the identity (tested), so one compiled kernel serves every format choice.

References:
  Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
  Floating-point Quantization", arXiv:2510.21314, ICLR 2026.
  Kingma, Ba, "Adam: A Method for Stochastic Optimization", arXiv:1412.6980.
  Loshchilov, Hutter, "Decoupled Weight Decay Regularization",
  arXiv:1711.05101 (the AdamW decay term).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from jaxlab.core.checks import check_range, concrete
from jaxlab.core.rng import as_key, key_words, stream_bits
from jaxlab.quant.float_format import ROUNDING_MODES, FloatFormat, quantize, quantize_f32
from kernels_pallas import _checks

LANES = 128  # last dimension of the 2-D view: one TPU lane row, a Triton-friendly width
_TILE = 8 * LANES  # block sizes are multiples of one (8, 128) float32 tile

# Slots of the float32 hyperparameter array (padded to a power of two for Triton).
_NEG_LR, _B1, _ONE_MINUS_B1, _B2, _ONE_MINUS_B2, _EPS, _WD, _BC1, _BC2 = range(9)
_MAX_VALUE = 9  # _MAX_VALUE + k: largest finite value of format k (G, M, V, W)
_NUM_F = 16
# int32 array: (exp_bits, man_bits) of G, M, V, W in slots 2k, 2k + 1, and the two
# uint32 key words (as int32 bits) of the stochastic-rounding stream of G, M, V, W in
# slots _WORDS + 2k, _WORDS + 2k + 1 (zeros unless rounding is stochastic).
_WORDS = 8
_NUM_I = 16
_FORMAT_FIELDS = ("grads", "mu", "nu", "weights")  # format k, in kernel order
_OFF = (8, 23)  # "no quantization": E8M23 is the identity on float32


class QuantFormats(NamedTuple):
  """Formats of the four quantized quantities; None means exact (float32)."""

  grads: FloatFormat | None = None
  mu: FloatFormat | None = None
  nu: FloatFormat | None = None
  weights: FloatFormat | None = None


# ----------------------------------------------------------------------------
# Argument checks (all on static information: shapes, dtypes, concrete values).


def _check_step(step: Any) -> None:
  if isinstance(step, jax.core.Tracer):
    if np.shape(step) != () or not jnp.issubdtype(step.dtype, jnp.integer):
      raise TypeError(f"step must be an integer scalar, got {step.dtype}{list(step.shape)}")
    return
  arr = concrete(step, "step", scalar=True)
  if not np.issubdtype(arr.dtype, np.integer):
    raise TypeError(f"step must be an integer (1 for the first update), got {step!r}")
  if int(arr) < 1:
    raise ValueError(f"step must be >= 1 (1 for the first update), got {int(arr)}")


def _check_formats(formats: Any) -> QuantFormats:
  if formats is None:
    return QuantFormats()
  if isinstance(formats, QuantFormats):
    fmts = formats
  elif isinstance(formats, Mapping):
    unknown = sorted(set(formats) - set(_FORMAT_FIELDS))
    if unknown:
      raise ValueError(f"formats has unknown keys {unknown}; accepted keys: {_FORMAT_FIELDS}")
    fmts = QuantFormats(**formats)
  else:
    raise TypeError(
        f"formats must be None, a dict or a QuantFormats with keys {_FORMAT_FIELDS}, "
        f"got {type(formats).__name__}")
  for field, fmt in zip(_FORMAT_FIELDS, fmts, strict=True):
    if fmt is not None and not isinstance(fmt, FloatFormat):
      raise TypeError(
          f"formats[{field!r}] must be a jaxlab.quant.FloatFormat or None, got {fmt!r}")
  return fmts


def _check_buffers(p: Any, g: Any, m: Any, v: Any) -> None:
  shape = None
  for name, x in (("p", p), ("g", g), ("m", m), ("v", v)):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
      raise TypeError(f"{name} must be a jax.Array, got {type(x).__name__}")
    if x.ndim != 1:
      raise ValueError(f"{name} must be 1-D (a flat buffer), got shape {tuple(x.shape)}")
    if x.dtype != jnp.float32:
      raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
    if shape is None:
      shape = x.shape
    elif x.shape != shape:
      raise ValueError(f"{name} must have the shape of p {tuple(shape)}, got {tuple(x.shape)}")


def _check_args(p, g, m, v, step, lr, b1, b2, eps, weight_decay, formats, rounding, key):
  """Validates everything static; returns the formats as a :class:`QuantFormats`."""
  if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
    raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
  if rounding == "stochastic" and key is None:
    raise ValueError('rounding="stochastic" requires a PRNG key (key=...)')
  _check_buffers(p, g, m, v)
  _check_step(step)
  check_range(lr, "lr")
  check_range(b1, "b1", lo=0.0, hi=1.0, hi_open=True)
  check_range(b2, "b2", lo=0.0, hi=1.0, hi_open=True)
  check_range(eps, "eps", lo=0.0, hi=None, hi_open=True)
  check_range(weight_decay, "weight_decay", lo=0.0, hi=None, hi_open=True)
  return _check_formats(formats)


def _check_block_size(block_size: Any) -> None:
  if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
    raise TypeError(f"block_size must be an int, got {block_size!r}")
  b = int(block_size)
  if b < _TILE or b % _TILE or b & (b - 1):
    raise ValueError(
        f"block_size must be a power of two and a multiple of {_TILE} "
        f"(8 x 128 float32 tile), got {b}")


# ----------------------------------------------------------------------------
# Shared scalar helpers (identical expressions in the reference and the kernel path).


@functools.partial(jax.jit, inline=True)
def _bias_correction(decay: jax.Array, count: jax.Array) -> jax.Array:
  """``1 - decay**count``, written (and jitted) as ``optax.tree.bias_correction``."""
  return 1 - decay**count


def _split_keys(key: Any) -> list[jax.Array]:
  """Four independent keys, for Q_G, Q_M, Q_V, Q_W in this order."""
  return list(jax.random.split(as_key(key), len(_FORMAT_FIELDS)))


def _format_fields(fmt: FloatFormat | None) -> tuple[Any, Any, Any]:
  """``(exp_bits, man_bits, max_value)`` of a format; None is the identity E8M23.

  The largest finite value is made concrete whenever the bit widths are, so
  every choice of concrete formats has one pytree structure (one compilation).
  """
  if fmt is None:
    return _OFF[0], _OFF[1], float(np.finfo(np.float32).max)
  max_value = fmt.max_value
  traced = any(isinstance(x, jax.core.Tracer) for x in (fmt.exp_bits, fmt.man_bits))
  if max_value is None and not traced:
    max_value = fmt.max_finite  # (2 - 2**-M) * 2**bias: exact in float32
  return fmt.exp_bits, fmt.man_bits, max_value


def _format_arrays(exp_bits: Any, man_bits: Any, max_value: Any) -> tuple[jax.Array, ...]:
  """int32 bit widths and the float32 largest finite value of a format.

  When ``max_value`` is None it is built from the bit widths exactly as
  :func:`~jaxlab.quant.quantize_f32` builds it, so passing it explicitly does
  not change a single bit (and bit widths may be traced).
  """
  e = jnp.asarray(exp_bits, jnp.int32)
  m = jnp.asarray(man_bits, jnp.int32)
  if max_value is not None:
    return e, m, jnp.asarray(max_value, jnp.float32)
  bias = (jnp.int32(1) << (e - 1)) - 1
  mant_ones = ((jnp.int32(1) << m) - 1) << (23 - m)
  max_bits = ((bias + 127) << 23) | mant_ones
  return e, m, lax.bitcast_convert_type(max_bits.astype(jnp.uint32), jnp.float32)


# ----------------------------------------------------------------------------
# Reference.


def quantized_adam_step_reference(
    p: jax.Array,
    g: jax.Array,
    m: jax.Array,
    v: jax.Array,
    *,
    step: jax.typing.ArrayLike,
    lr: jax.typing.ArrayLike,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    weight_decay: jax.typing.ArrayLike = 0.0,
    formats: QuantFormats | Mapping[str, FloatFormat | None] | None = None,
    rounding: str = "nearest",
    key: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""One quantized Adam(W) step in plain ``jnp`` (the kernel's reference).

  .. math::
    \hat g = Q_G(g), \quad
    m_t = Q_M((1 - \beta_1) \hat g + \beta_1 m), \quad
    v_t = Q_V((1 - \beta_2) \hat g^2 + \beta_2 v), \\
    w_t = Q_W\Big(w + (-\eta)\Big(\frac{m_t / (1 - \beta_1^t)}
          {\sqrt{v_t / (1 - \beta_2^t)} + \epsilon} + \lambda w\Big)\Big)

  Args:
    p, g, m, v: 1-D float32 arrays of one shape: weights, gradient, first and
      second moments (the moments as stored after the previous step).
    step: the step count ``t`` of this update, 1 for the first (optax's
      ``count`` after its increment); int or traced int32 scalar.
    lr: learning rate ``eta`` (a number: evaluate a schedule before calling).
    b1, b2, eps: Adam's decay rates and epsilon.
    weight_decay: decoupled decay ``lambda`` (AdamW); 0 gives Adam.
    formats: :class:`QuantFormats` or dict with keys ``grads``, ``mu``, ``nu``,
      ``weights``, each a :class:`~jaxlab.quant.FloatFormat` or None (exact).
    rounding: "nearest", "stochastic" or "truncate", for every quantizer.
    key: PRNG key (typed or raw key data), required for "stochastic"; split in
      four for G, M, V, W.

  Returns:
    ``(p_new, m_new, v_new)``, float32 arrays of ``p``'s shape.

  Example:
    >>> p, m, v = quantized_adam_step_reference(
    ...     p, g, m, v, step=1, lr=1e-3, formats={"weights": FloatFormat.BF16})

  References:
    Tang, Li, Zou, arXiv:2510.21314 (ICLR 2026), Alg. 1.
  """
  fmts = _check_args(p, g, m, v, step, lr, b1, b2, eps, weight_decay, formats, rounding, key)
  keys = _split_keys(key) if rounding == "stochastic" else [None] * 4
  k_g, k_m, k_v, k_w = keys

  def q(x, fmt, k):
    return x if fmt is None else quantize(x, fmt, rounding=rounding, key=k)

  count = jnp.asarray(step, jnp.int32)
  bc1 = _bias_correction(b1, count).astype(jnp.float32)
  bc2 = _bias_correction(b2, count).astype(jnp.float32)
  # Alg. 1: gradient, moments, Adam direction, decoupled decay, weight update.
  gq = q(g, fmts.grads, k_g)
  m_new = q((1 - b1) * gq + b1 * m, fmts.mu, k_m)
  v_new = q((1 - b2) * (gq * gq) + b2 * v, fmts.nu, k_v)
  u = (m_new / bc1) / (jnp.sqrt(v_new / bc2) + eps)
  # Always added, as quantized_adam does (weight_decay may be traced). With 0
  # it adds +-0, a no-op unless u is -0 or p is infinite, so formats off and
  # weight_decay = 0 still give optax.adam.
  u = u + weight_decay * p
  u = (-lr) * u  # optax.scale_by_learning_rate: scale(-lr)
  p_new = q(p + u, fmts.weights, k_w)
  return p_new, m_new, v_new


# ----------------------------------------------------------------------------
# Kernel.


# The body's four roundings share their shapes (one block), so as one jitted function they
# are traced once per block shape and rounding, not four times per kernel trace (the
# Triton, Mosaic and interpret lowerings inline the call, as they do jnp's own jitted
# helpers such as jnp.where).
_quantize_f32 = jax.jit(quantize_f32, static_argnames="rounding")


def _quantized_adam_kernel(f_ref, i_ref, p_ref, g_ref, m_ref, v_ref, p_out, m_out, v_out, *,
                           rounding: str, decay: bool, output: str):
  """One (rows, 128) block: loads w, g, m, v, stores w (or the update), m, v."""
  if rounding == "stochastic":
    # Flat index of every element of the block: the counter of the hash. int32
    # arithmetic wraps like uint32, so indices past 2**31 stay right mod 2**32.
    shape = p_ref.shape
    row = lax.broadcasted_iota(jnp.int32, shape, 0)
    lane = lax.broadcasted_iota(jnp.int32, shape, 1)
    index = pl.program_id(0) * (shape[0] * LANES) + row * LANES + lane
    index = lax.bitcast_convert_type(index, jnp.uint32)

  def q(x, k):  # Q_k with format k in (G, M, V, W)
    rbits = None
    if rounding == "stochastic":
      k0 = lax.bitcast_convert_type(i_ref[_WORDS + 2 * k], jnp.uint32)
      k1 = lax.bitcast_convert_type(i_ref[_WORDS + 2 * k + 1], jnp.uint32)
      rbits = stream_bits(index, k0, k1)
    return _quantize_f32(x, i_ref[2 * k], i_ref[2 * k + 1], f_ref[_MAX_VALUE + k],
                         rounding, rbits)

  p = p_ref[...]
  # Same expressions, same order as quantized_adam_step_reference.
  gq = q(g_ref[...], 0)
  m_new = q(f_ref[_ONE_MINUS_B1] * gq + f_ref[_B1] * m_ref[...], 1)
  v_new = q(f_ref[_ONE_MINUS_B2] * (gq * gq) + f_ref[_B2] * v_ref[...], 2)
  u = (m_new / f_ref[_BC1]) / (jnp.sqrt(v_new / f_ref[_BC2]) + f_ref[_EPS])
  if decay:
    u = u + f_ref[_WD] * p
  u = f_ref[_NEG_LR] * u
  if output == "update":  # optax's update before Q_W (weights format off)
    p_out[...] = u
  elif output == "quantized_update":  # quantize_weights' update Q_W(w + u) - w
    p_out[...] = q(p + u, 3) - p
  else:
    p_out[...] = q(p + u, 3)
  m_out[...] = m_new
  v_out[...] = v_new


def _default_block_size(tpu: bool) -> int:
  # Not tuned on hardware: 1024 elements per Triton program (4 warps, 8 per
  # thread); 16K per TPU grid step (64 KiB per buffer, 11 double-buffered
  # buffers and the body's temporaries well inside the default scoped VMEM).
  return 16 * _TILE if tpu else _TILE


@functools.partial(
    jax.jit, static_argnames=("rounding", "block_size", "interpret", "decay", "output"))
def _pallas_step(p, g, m, v, count, hyper, fmt_fields, words, *, rounding, block_size,
                 interpret, decay=True, output="weights"):
  """Packs the scalars, tiles the buffers, runs the kernel, untiles.

  ``words`` is a uint32 ``(4, 2)`` array of the key words of G, M, V, W (None
  unless rounding is stochastic); ``decay=False`` drops the ``lambda w`` term;
  ``output`` is what the first result holds (see ``_quantized_adam_kernel``).
  """
  neg_lr, b1, one_minus_b1, b2, one_minus_b2, eps, weight_decay = hyper
  fmt_arrays = [_format_arrays(*f) for f in fmt_fields]
  # Bias corrections from the traced step, as optax.tree.bias_correction forms them.
  fvals = [neg_lr, b1, one_minus_b1, b2, one_minus_b2, eps, weight_decay,
           _bias_correction(b1, count), _bias_correction(b2, count)]
  fvals += [mx for _, _, mx in fmt_arrays]
  fscal = jnp.stack([jnp.asarray(x, jnp.float32) for x in fvals])
  fscal = jnp.pad(fscal, (0, _NUM_F - fscal.shape[0]))
  widths = jnp.stack([b for e, man, _ in fmt_arrays for b in (e, man)])
  if words is None:
    words = jnp.zeros((len(_FORMAT_FIELDS), 2), jnp.uint32)
  iscal = jnp.concatenate([widths, lax.bitcast_convert_type(words.reshape(-1), jnp.int32)])
  iscal = jnp.pad(iscal, (0, _NUM_I - iscal.shape[0]))

  n = p.shape[0]
  kernel = functools.partial(_quantized_adam_kernel, rounding=rounding, decay=decay,
                             output=output)

  def call(buffers, *, tpu: bool):
    """The kernel on padded ``(rows, 128)`` views, TPU (Mosaic) or GPU (Triton) layout."""
    bs = block_size or _default_block_size(tpu)
    padded = pl.cdiv(n, bs) * bs
    rows, block_rows = padded // LANES, bs // LANES
    arrays = [jnp.pad(x, (0, padded - n)).reshape(rows, LANES) for x in buffers]
    if tpu:
      scalar_specs = [pl.BlockSpec(memory_space=pltpu.SMEM)] * 2
      compiler_params = pltpu.CompilerParams(dimension_semantics=("parallel",))
    else:
      scalar_specs = [pl.BlockSpec((_NUM_F,), lambda i: (0,)),
                      pl.BlockSpec((_NUM_I,), lambda i: (0,))]
      # Triton on GPU: jax's default Mosaic GPU backend rejects the small scalar
      # blocks (copies must be multiples of the 128-byte warpgroup size).
      compiler_params = None if interpret else plt.CompilerParams(num_warps=4)
    block = pl.BlockSpec((block_rows, LANES), lambda i: (i, 0))
    outs = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct((rows, LANES), jnp.float32)] * 3,
        grid=(rows // block_rows,),
        in_specs=scalar_specs + [block] * len(arrays),
        out_specs=[block] * 3,
        # p, m, v are updated in place (operand indices count the two scalar arrays).
        input_output_aliases={2: 0, 4: 1, 5: 2},
        compiler_params=compiler_params,
        interpret=interpret,
        name="quantized_adam_step",
    )(fscal, iscal, *arrays)
    return tuple(x.reshape(padded)[:n] for x in outs)

  buffers = (p, g, m, v)
  if isinstance(interpret, pltpu.InterpretParams):  # the TPU layout, in the TPU interpreter
    return call(buffers, tpu=True)
  if interpret:
    return call(buffers, tpu=False)
  # The platform lowered for picks the layout (an export for TPU from a CPU host
  # too); on CPU the default branch's pallas_call says only interpret mode runs there.
  return lax.platform_dependent(buffers, tpu=functools.partial(call, tpu=True),
                                default=functools.partial(call, tpu=False))


@jax.jit
def _stream_words(key: jax.Array) -> jax.Array:
  """uint32 ``(4, 2)``: the key words of the four keys ``key`` splits into (G, M, V, W)."""
  return jnp.stack([jnp.stack(key_words(k)) for k in _split_keys(key)])


def quantized_adam_step_pallas(
    p: jax.Array,
    g: jax.Array,
    m: jax.Array,
    v: jax.Array,
    *,
    step: jax.typing.ArrayLike,
    lr: jax.typing.ArrayLike,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    weight_decay: jax.typing.ArrayLike = 0.0,
    formats: QuantFormats | Mapping[str, FloatFormat | None] | None = None,
    rounding: str = "nearest",
    key: jax.Array | None = None,
    block_size: int | None = None,
    interpret: bool | pltpu.InterpretParams = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The fused Pallas kernel for :func:`quantized_adam_step_reference`.

  Same arguments and result (bit for bit up to the compiler's multiply-add
  contraction, see the module docstring), plus:

  Args:
    block_size: elements per grid step (static), a power of two and a
      multiple of 1024; None picks a default per platform lowered for
      (1024 on GPU, 16384 on TPU). ``N`` need not be a
      multiple: the buffers are zero-padded and sliced back.
    interpret: True runs the kernel (its GPU layout) with the Pallas
      interpreter (any backend, CPU included); a ``pltpu.InterpretParams`` runs
      the TPU layout (scalars in SMEM, the grid split over cores) in the TPU
      interpreter, which can detect races between cores; False compiles it with
      Triton (GPU) or Mosaic (TPU), chosen by the platform the call is lowered
      for (``lax.platform_dependent``), not by ``jax.default_backend()``.

  Returns:
    ``(p_new, m_new, v_new)``.

  Example:
    >>> p, m, v = quantized_adam_step_pallas(
    ...     p, g, m, v, step=t, lr=1e-3, formats={"nu": FloatFormat.BF16},
    ...     rounding="stochastic", key=jax.random.key(t), interpret=True)
  """
  fmts = _check_args(p, g, m, v, step, lr, b1, b2, eps, weight_decay, formats, rounding, key)
  words = _stream_words(as_key(key)) if rounding == "stochastic" else None
  return _launch(p, g, m, v, step, (lr, b1, b2, eps, weight_decay), fmts, words,
                 rounding=rounding, block_size=block_size, interpret=interpret)


def _launch(p, g, m, v, step, hyper, fmts, words, *, rounding, block_size, interpret,
            **kernel_options):
  """Checks the launch options and runs :func:`_pallas_step` (nothing for empty buffers).

  ``hyper`` is ``(lr, b1, b2, eps, weight_decay)``.
  """
  if block_size is not None:
    _check_block_size(block_size)
  _checks.check_interpret(interpret)
  if p.shape[0] == 0:
    return p, m, v
  lr, b1, b2, eps, weight_decay = hyper
  # (1 - b1) and -lr are formed here, before jit makes Python numbers float32,
  # so they round exactly as the reference's (and optax's) Python arithmetic.
  return _pallas_step(
      p, g, m, v, jnp.asarray(step, jnp.int32), (-lr, b1, 1 - b1, b2, 1 - b2, eps, weight_decay),
      tuple(_format_fields(f) for f in fmts), words,
      rounding=rounding, block_size=None if block_size is None else int(block_size),
      interpret=interpret, **kernel_options)


def quantized_adam_update_pallas(
    p: jax.Array,
    g: jax.Array,
    m: jax.Array,
    v: jax.Array,
    *,
    step: jax.typing.ArrayLike,
    lr: jax.typing.ArrayLike,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    weight_decay: jax.typing.ArrayLike | None = None,
    formats: QuantFormats | Mapping[str, FloatFormat | None] | None = None,
    rounding: str = "nearest",
    stream_words: jax.Array | None = None,
    block_size: int | None = None,
    interpret: bool | pltpu.InterpretParams = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""The fused kernel in the form an optax update needs (``jaxlab.optim.quantized_adam``).

  The same step as :func:`quantized_adam_step_pallas`, but the first result is
  the optax update rather than the new weights, and the random streams are
  given per quantity:

  * with ``formats.weights`` set, ``Q_W(w + u) - w`` (the update of
    :func:`jaxlab.optim.quantize_weights`, which ``optax.apply_updates`` turns
    into ``Q_W(w + u)``); without it, ``u`` itself (nothing is added to ``w``);
  * ``weight_decay=None`` leaves the ``lambda w`` term out (what
    ``quantized_adam`` does for a literal 0; a number, even 0, adds it);
  * ``stream_words`` (uint32 ``(4, 2)``, required for stochastic rounding)
    holds the key words of the streams of G, M, V, W: element ``i`` of the
    flat buffer rounds ``Q_k`` with ``stream_bits(i, *stream_words[k])``.

  Args:
    p, g, m, v, step, lr, b1, b2, eps, formats, rounding, block_size, interpret:
      as in :func:`quantized_adam_step_pallas`.
    weight_decay: decoupled decay, or None for no decay term.
    stream_words: the four streams' key words (see above).

  Returns:
    ``(update, m_new, v_new)``, float32 arrays of ``p``'s shape.

  Example:
    >>> from jaxlab.core.rng import key_words
    >>> words = jnp.stack([jnp.stack(key_words(k)) for k in jax.random.split(key, 4)])
    >>> u, m, v = quantized_adam_update_pallas(
    ...     p, g, m, v, step=t, lr=1e-3, formats={"weights": FloatFormat.BF16},
    ...     rounding="stochastic", stream_words=words, interpret=True)
    >>> p = p + u  # == Q_W(p + u_adam) whenever that difference is exact
  """
  if rounding == "stochastic" and stream_words is None:
    raise ValueError('rounding="stochastic" requires stream_words (uint32, shape (4, 2))')
  fmts = _check_args(p, g, m, v, step, lr, b1, b2, eps,
                     0.0 if weight_decay is None else weight_decay, formats, rounding,
                     stream_words)
  if rounding == "stochastic":
    if (getattr(stream_words, "shape", None) != (len(_FORMAT_FIELDS), 2)
        or getattr(stream_words, "dtype", None) != jnp.uint32):
      raise TypeError(f"stream_words must be a uint32 array of shape (4, 2), got {stream_words!r}")
  return _launch(p, g, m, v, step,
                 (lr, b1, b2, eps, 0.0 if weight_decay is None else weight_decay), fmts,
                 stream_words if rounding == "stochastic" else None,
                 rounding=rounding, block_size=block_size, interpret=interpret,
                 decay=weight_decay is not None,
                 output="update" if fmts.weights is None else "quantized_update")


def quantized_adam_step(
    p: jax.Array,
    g: jax.Array,
    m: jax.Array,
    v: jax.Array,
    *,
    step: jax.typing.ArrayLike,
    lr: jax.typing.ArrayLike,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    weight_decay: jax.typing.ArrayLike = 0.0,
    formats: QuantFormats | Mapping[str, FloatFormat | None] | None = None,
    rounding: str = "nearest",
    key: jax.Array | None = None,
    use_kernel: bool | None = None,
    block_size: int | None = None,
    interpret: bool | pltpu.InterpretParams = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One quantized Adam(W) step: the Pallas kernel on GPU/TPU, jnp elsewhere.

  Args:
    p, g, m, v, step, lr, b1, b2, eps, weight_decay, formats, rounding, key:
      as in :func:`quantized_adam_step_reference`.
    use_kernel: force the kernel (True) or the reference (False); None uses
      the kernel when the computation is lowered for CUDA, ROCm or TPU
      (``lax.platform_dependent``) and the reference otherwise.
    block_size, interpret: passed to :func:`quantized_adam_step_pallas`.

  Returns:
    ``(p_new, m_new, v_new)``.

  Example:
    >>> for t in range(1, 101):
    ...   g = jax.grad(loss)(p)
    ...   p, m, v = quantized_adam_step(
    ...       p, g, m, v, step=t, lr=1e-3, formats={"weights": FloatFormat.BF16})

  References:
    Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
    Floating-point Quantization", arXiv:2510.21314, ICLR 2026.
  """
  if use_kernel is not None and not isinstance(use_kernel, bool):
    raise TypeError(f"use_kernel must be a bool or None, got {use_kernel!r}")
  kwargs = dict(step=step, lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                formats=formats, rounding=rounding, key=key)

  def kernel(p, g, m, v):
    return quantized_adam_step_pallas(p, g, m, v, block_size=block_size,
                                      interpret=interpret, **kwargs)

  def reference(p, g, m, v):
    return quantized_adam_step_reference(p, g, m, v, **kwargs)

  if use_kernel is None:
    # By the platform lowered for, not jax.default_backend(): an export for
    # CUDA or TPU from a CPU host gets the kernel.
    return lax.platform_dependent(p, g, m, v, cuda=kernel, rocm=kernel, tpu=kernel,
                                  default=reference)
  return (kernel if use_kernel else reference)(p, g, m, v)
