"""Tests for kernels_pallas.quantized_adam: kernel vs reference vs optax.

A note on "bit for bit". XLA:CPU (like XLA:GPU and Triton) contracts ``a * b + c``
into a fused multiply-add inside a fusion, and which of two products it
contracts depends on the surrounding code (the jitted reference and the
interpret-mode kernel make different choices). Same op order therefore gives
the same bits only when the contracted products are exact. The bit-exact kernel
test uses dyadic hyperparameters (b1 = 7/8, lr = 2**-6, ...) and inputs with
8 significant bits, so every product is exact and any contraction gives the
same result; a second test with the usual hyperparameters allows one rounding.
The reference and optax are compiled from the same expression structure and
agree exactly.
"""

import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret  # races
from jax.experimental.pallas import tpu as pltpu

from jaxlab.core.rng import key_words
from jaxlab.optim.quantized_adam import quantized_adam
from jaxlab.quant import FloatFormat, quantize_f32
from kernels_pallas.quantized_adam import (
    QuantFormats,
    quantized_adam_step,
    quantized_adam_step_pallas,
    quantized_adam_step_reference,
    quantized_adam_update_pallas,
)

N = 3000  # not a multiple of the block: exercises padding and 3 grid steps
BLOCK = 1024
MIXED = QuantFormats(
    grads=FloatFormat(5, 2), mu=FloatFormat(8, 3), nu=None, weights=FloatFormat.BF16)
MIXED_2 = {"grads": None, "mu": FloatFormat.E4M3FN, "nu": FloatFormat(8, 7), "weights": None}
ALL = {"grads": FloatFormat(5, 2), "mu": FloatFormat(8, 3), "nu": FloatFormat(8, 7),
       "weights": FloatFormat.BF16}
# Powers of two and short mantissas: every product in the update is exact.
DYADIC = {"lr": 2.0**-6, "b1": 0.875, "b2": 0.9375, "eps": 1e-8, "weight_decay": 2.0**-6}
USUAL = {"lr": 1e-3, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}


def _bf16(x):
  return x.astype(jnp.bfloat16).astype(jnp.float32)


def _buffers(seed=0, n=N):
  """p, g, m, v of realistic magnitudes, each with 8 significant bits."""
  kp, kg, km, kv = jax.random.split(jax.random.key(seed), 4)
  p = jax.random.normal(kp, (n,))
  g = 1e-2 * jax.random.normal(kg, (n,))
  m = 1e-3 * jax.random.normal(km, (n,))
  v = 1e-5 * jnp.abs(jax.random.normal(kv, (n,)))
  return tuple(_bf16(x) for x in (p, g, m, v))


def _bits(x):
  return np.asarray(x).view(np.uint32)


def _assert_bits_equal(a, b, what):
  diff = _bits(a) != _bits(b)
  assert not diff.any(), f"{what}: {diff.sum()} elements differ, e.g. {np.asarray(a)[diff][:3]}"


def _reference(p, g, m, v, step, key, hyper, *, formats, rounding):
  # Hyperparameters stay Python floats (static), as in the kernel path: a traced
  # b1 would make 1 - b1 a float32 subtraction instead of a Python one.
  return _reference_jit(p, g, m, v, step, key, hyper=tuple(hyper.items()), formats=formats,
                        rounding=rounding)


@functools.partial(jax.jit, static_argnames=("hyper", "formats", "rounding"))
def _reference_jit(p, g, m, v, step, key, *, hyper, formats, rounding):
  return quantized_adam_step_reference(
      p, g, m, v, step=step, key=key, formats=formats, rounding=rounding, **dict(hyper))


def _kernel(p, g, m, v, step, key, hyper, *, formats, rounding):
  # quantized_adam_step_pallas is itself a jitted wrapper (formats are traced, so
  # every format choice reuses one compiled kernel per rounding mode).
  return quantized_adam_step_pallas(
      p, g, m, v, step=step, key=key, formats=formats, rounding=rounding,
      block_size=BLOCK, interpret=True, **hyper)


def _hashable(formats):
  return formats if isinstance(formats, QuantFormats) else QuantFormats(**formats)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic", "truncate"])
def test_off_format_e8m23_is_identity(rounding):
  rng = np.random.default_rng(1)
  x = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  tiny = np.finfo(np.float32).tiny
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, tiny / 3, -1e-45,
                      np.finfo(np.float32).max], np.float32)
  x = np.concatenate([x, special])  # every class: normals, subnormals, inf, nan
  rbits = jnp.asarray(rng.integers(0, 2**32, x.size, dtype=np.uint64).astype(np.uint32))
  f32_max = jnp.float32(np.finfo(np.float32).max)
  y = jax.jit(lambda x, r: quantize_f32(x, jnp.int32(8), jnp.int32(23), f32_max, rounding, r))(
      x, rbits if rounding == "stochastic" else None)
  _assert_bits_equal(y, x, "E8M23")


@pytest.mark.parametrize("formats", [MIXED, MIXED_2], ids=["mixed", "mixed_2"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic", "truncate"])
def test_kernel_matches_reference_bit_for_bit(rounding, formats):
  p, g, m, v = _buffers()
  step, key = jnp.int32(3), jax.random.key(7)
  ours = _kernel(p, g, m, v, step, key, DYADIC, formats=formats, rounding=rounding)
  ref = _reference(p, g, m, v, step, key, DYADIC, formats=_hashable(formats), rounding=rounding)
  for name, a, b in zip(("p", "m", "v"), ours, ref, strict=True):
    assert a.shape == (N,) and a.dtype == jnp.float32
    _assert_bits_equal(a, b, f"{name} ({rounding})")
  # The step did something: most weights moved and the moments are new.
  assert np.mean(np.asarray(ours[0]) != np.asarray(p)) > 0.5
  assert not np.array_equal(np.asarray(ours[1]), np.asarray(m))


def test_tpu_layout_matches_reference_without_races():
  """The TPU layout (scalars in SMEM, 1024-element blocks, the grid "parallel" over two
  cores) in the TPU interpreter with race detection: no race, and the reference's bits
  (dyadic hyperparameters, stochastic rounding: the bits drawn in the kernel)."""
  p, g, m, v = _buffers()
  step, key = jnp.int32(3), jax.random.key(7)
  params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
  ours = quantized_adam_step_pallas(p, g, m, v, step=step, key=key, formats=ALL,
                                    rounding="stochastic", block_size=BLOCK, interpret=params,
                                    **DYADIC)
  assert not tpu_interpret.races.races_found
  ref = _reference(p, g, m, v, step, key, DYADIC, formats=_hashable(ALL), rounding="stochastic")
  for name, a, b in zip(("p", "m", "v"), ours, ref, strict=True):
    _assert_bits_equal(a, b, f"{name} (TPU layout)")


@pytest.mark.parametrize("formats", [None, ALL], ids=["off", "all"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic", "truncate"])
def test_kernel_matches_reference_with_usual_hyperparameters(rounding, formats):
  # Inexact products here, so the two compilations may contract different
  # multiply-adds (module docstring). A product's rounding error is at most one
  # float32 ulp of the largest term, which cancellation can make large relative
  # to the result; it may then flip one rounding of the output format. Allow
  # exactly that: one output ulp plus a few float32 ulps of the buffer's scale.
  # A wrong formula or a swapped scalar is off by orders of magnitude more.
  p, g, m, v = _buffers(seed=1)
  step, key = jnp.int32(5), jax.random.key(3)
  fmts = QuantFormats() if formats is None else QuantFormats(**formats)
  ours = _kernel(p, g, m, v, step, key, USUAL, formats=fmts, rounding=rounding)
  ref = _reference(p, g, m, v, step, key, USUAL, formats=fmts, rounding=rounding)
  for name, a, b, fmt in zip(("p", "m", "v"), ours, ref, (fmts.weights, fmts.mu, fmts.nu),
                             strict=True):
    a, b = np.asarray(a), np.asarray(b)
    man = 23 if fmt is None else fmt.man_bits
    tol = 2.0**-man * np.maximum(np.abs(a), np.abs(b)) + 2.0**-21 * np.abs(b).max()
    worst = np.max(np.abs(a - b) / tol)
    assert worst <= 1, f"{name}: {worst:.3g} times the allowed one-rounding difference"
    assert np.mean(a == b) > 0.5, f"{name}: only {np.mean(a == b):.1%} equal"


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_kernel_saturates_like_reference(rounding):
  # Gradients up to ~1e6: Q_G = E5M2 saturates at 57344 and Q_M = E4M3FN (max
  # 448, the max_value path) saturates the first moment.
  p, g, m, v = _buffers(seed=6)
  g = _bf16(g * 1e8)
  fmts = QuantFormats(grads=FloatFormat.E5M2, mu=FloatFormat.E4M3FN, nu=FloatFormat.BF16,
                      weights=FloatFormat.FP16)
  step, key = jnp.int32(2), jax.random.key(4)
  ours = _kernel(p, g, m, v, step, key, DYADIC, formats=fmts, rounding=rounding)
  ref = _reference(p, g, m, v, step, key, DYADIC, formats=fmts, rounding=rounding)
  for name, a, b in zip(("p", "m", "v"), ours, ref, strict=True):
    _assert_bits_equal(a, b, f"{name} (saturating)")
  m_new = np.abs(np.asarray(ours[1]))
  assert m_new.max() == 448.0 and np.mean(m_new == 448.0) > 0.1


def test_stochastic_rounding_uses_the_key():
  p, g, m, v = _buffers(seed=2)
  step = jnp.int32(2)
  fmts = QuantFormats(**ALL)
  a = _kernel(p, g, m, v, step, jax.random.key(0), DYADIC, formats=fmts, rounding="stochastic")
  b = _kernel(p, g, m, v, step, jax.random.key(1), DYADIC, formats=fmts, rounding="stochastic")
  c = _kernel(p, g, m, v, step, jax.random.key(0), DYADIC, formats=fmts, rounding="nearest")
  for x, y, z in zip(a, b, c, strict=True):
    assert np.mean(np.asarray(x) != np.asarray(y)) > 0.01  # other key, other draws
    assert np.mean(np.asarray(x) != np.asarray(z)) > 0.01  # not round-to-nearest
  # Raw uint32 key data draws the same bits as the typed key.
  raw = _kernel(p, g, m, v, step, jax.random.key_data(jax.random.key(0)), DYADIC,
                formats=fmts, rounding="stochastic")
  for x, y in zip(a, raw, strict=True):
    _assert_bits_equal(x, y, "raw key data")


def test_stochastic_kernel_draws_its_bits_inside():
  """No N-length random-bit arrays go in: the kernel reads two scalar arrays and p, g, m, v.

  (Its bits are still the reference's: test_kernel_matches_reference_bit_for_bit.)
  """
  p = jnp.zeros(N)
  jaxpr = jax.make_jaxpr(lambda p: quantized_adam_step_pallas(
      p, p, p, p, step=1, lr=1e-3, formats=ALL, rounding="stochastic", key=jax.random.key(0),
      block_size=BLOCK, interpret=True))(p)
  calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call"]
  calls += [e for eqn in jaxpr.jaxpr.eqns for sub in jax.extend.core.jaxprs_in_params(eqn.params)
            for e in sub.eqns if e.primitive.name == "pallas_call"]
  assert len(calls) == 1
  shapes = [tuple(v.aval.shape) for v in calls[0].invars]
  assert shapes == [(16,), (16,)] + [(3 * BLOCK // 128, 128)] * 4


def test_update_kernel_returns_the_optax_update():
  """quantized_adam_update_pallas: p + update lands on the step's new weights, bit for bit.

  With Q_W the update is Q_W(p + u) - p (exact here: p is in bfloat16); without it, u
  itself, and ``weight_decay=None`` drops the decay term. Its per-quantity stream words
  are the key words of the four keys quantized_adam_step_pallas splits its key into.
  """
  p, g, m, v = _buffers(seed=7)
  key = jax.random.key(5)
  words = jnp.stack([jnp.stack(key_words(k)) for k in jax.random.split(key, 4)])
  hyper = {k: val for k, val in DYADIC.items() if k != "weight_decay"}
  common = dict(step=jnp.int32(2), block_size=BLOCK, interpret=True, **hyper)
  for formats, rounding, wd in ((ALL, "stochastic", DYADIC["weight_decay"]),
                                (MIXED_2, "nearest", None)):
    step = quantized_adam_step_pallas(p, g, m, v, formats=formats, rounding=rounding, key=key,
                                      weight_decay=wd or 0.0, **common)
    upd = quantized_adam_update_pallas(p, g, m, v, formats=formats, rounding=rounding,
                                       stream_words=words, weight_decay=wd, **common)
    _assert_bits_equal(p + upd[0], step[0], f"weights ({rounding})")
    for name, a, b in zip(("m", "v"), upd[1:], step[1:], strict=True):
      _assert_bits_equal(a, b, f"{name} ({rounding})")


@pytest.mark.parametrize("n", [1, 2 * BLOCK])
def test_kernel_sizes(n):
  p, g, m, v = _buffers(seed=3, n=n)
  step, key = jnp.int32(1), jax.random.key(0)
  ours = _kernel(p, g, m, v, step, key, DYADIC, formats=MIXED, rounding="nearest")
  ref = _reference(p, g, m, v, step, key, DYADIC, formats=MIXED, rounding="nearest")
  for a, b in zip(ours, ref, strict=True):
    _assert_bits_equal(a, b, f"n={n}")


def test_kernel_under_jit_with_traced_hyperparameters():
  p, g, m, v = _buffers(seed=4)

  @jax.jit
  def step_fn(p, g, m, v, step, lr, wd):
    return quantized_adam_step_pallas(
        p, g, m, v, step=step, lr=lr, b1=0.875, b2=0.9375, weight_decay=wd,
        formats=ALL, block_size=BLOCK, interpret=True)

  lr, wd = jnp.float32(2.0**-6), jnp.float32(2.0**-6)
  ours = step_fn(p, g, m, v, jnp.int32(4), lr, wd)
  ref = jax.jit(lambda p, g, m, v, t, lr, wd: quantized_adam_step_reference(
      p, g, m, v, step=t, lr=lr, b1=0.875, b2=0.9375, weight_decay=wd, formats=ALL))(
          p, g, m, v, jnp.int32(4), lr, wd)
  for a, b in zip(ours, ref, strict=True):
    _assert_bits_equal(a, b, "traced lr/step/weight_decay")


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2], ids=["adam", "adamw"])
def test_reference_matches_optax_adam(weight_decay):
  """Formats off: optax.adam (optax.adamw with decay), 3 steps, bit for bit."""
  p0 = jax.random.normal(jax.random.key(0), (N,))
  if weight_decay:
    opt = optax.adamw(1e-3, weight_decay=weight_decay)
  else:
    opt = optax.adam(1e-3)

  @jax.jit
  def optax_step(params, state, grads):
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  ref_step = jax.jit(lambda p, g, m, v, t: quantized_adam_step_reference(
      p, g, m, v, step=t, lr=1e-3, weight_decay=weight_decay))
  params, state = p0, opt.init(p0)
  p, m, v = p0, jnp.zeros(N), jnp.zeros(N)
  for t in range(1, 4):
    grads = 10.0**-t * jax.random.normal(jax.random.key(t), (N,))
    params, state = optax_step(params, state, grads)
    p, m, v = ref_step(p, grads, m, v, jnp.int32(t))
    adam_state = state[0]
    # Same expressions in the same order, compiled the same way: exact.
    np.testing.assert_array_equal(p, params)
    np.testing.assert_array_equal(m, adam_state.mu)
    np.testing.assert_array_equal(v, adam_state.nu)
  assert not np.allclose(p, p0)


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_reference_matches_jaxlab_quantized_adam(weight_decay):
  """All four formats on, nearest: the optax-level quantized Adam, 3 steps, exactly.

  Exact because the weights start in the weight format (bf16): then
  ``quantize_weights``' update ``Q_W(p + u) - p`` is exact in float32 and
  ``apply_updates`` lands on ``Q_W(p + u)``, which is what the kernel stores.
  """
  opt = quantized_adam(1e-3, weight_decay=weight_decay, rounding="nearest", **ALL)
  p0 = _bf16(jax.random.normal(jax.random.key(0), (N,)))

  @jax.jit
  def optax_step(params, state, grads):
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  ref_step = jax.jit(lambda p, g, m, v, t: quantized_adam_step_reference(
      p, g, m, v, step=t, lr=1e-3, weight_decay=weight_decay, formats=ALL))
  params, state = p0, opt.init(p0)
  p, m, v = p0, jnp.zeros(N), jnp.zeros(N)
  for t in range(1, 4):
    grads = 10.0**-t * jax.random.normal(jax.random.key(t), (N,))
    params, state = optax_step(params, state, grads)
    p, m, v = ref_step(p, grads, m, v, jnp.int32(t))
    adam_state = state[1]  # chain(Q_G, rule, [decay,] lr, Q_W): the rule's state
    np.testing.assert_array_equal(p, params)
    np.testing.assert_array_equal(m, adam_state.mu)
    np.testing.assert_array_equal(v, adam_state.nu)
  assert not np.array_equal(p, p0)


def test_dispatch_uses_reference_on_cpu_and_kernel_on_request():
  p, g, m, v = _buffers(seed=5)
  kw = {"step": 2, "formats": MIXED, **DYADIC}
  assert jax.default_backend() == "cpu"
  ref = jax.jit(functools.partial(quantized_adam_step_reference, **kw))(p, g, m, v)
  auto = jax.jit(functools.partial(quantized_adam_step, **kw))(p, g, m, v)
  forced = quantized_adam_step(p, g, m, v, use_kernel=True, interpret=True,
                               block_size=BLOCK, **kw)
  for a, b, c in zip(auto, ref, forced, strict=True):
    _assert_bits_equal(a, b, "auto dispatch")
    # Equal in practice; not asserted bit for bit because here the reference's
    # step is a jit constant whose 1 - b**t XLA may fold at compile time with a
    # different pow than the kernel path's run-time one.
    np.testing.assert_allclose(c, b, rtol=1e-6)


_P = jnp.zeros(8)
_GOOD = {"step": 1, "lr": 1e-3}


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((_P, _P, _P, _P), {"rounding": "up"}, ValueError, "rounding"),
        ((_P, _P, _P, _P), {"rounding": "stochastic"}, ValueError, "key"),
        ((_P, _P[:4], _P, _P), {}, ValueError, "g must have the shape"),
        ((_P, _P, _P, _P.reshape(2, 4)), {}, ValueError, "v must be 1-D"),
        ((_P, _P.astype(jnp.bfloat16), _P, _P), {}, TypeError, "g must have dtype float32"),
        ((np.zeros(8, np.float32).tolist(), _P, _P, _P), {}, TypeError, "p must be a jax.Array"),
        ((_P, _P, _P, _P), {"step": 0}, ValueError, "step must be >= 1"),
        ((_P, _P, _P, _P), {"step": 1.0}, TypeError, "step must be an integer"),
        ((_P, _P, _P, _P), {"b1": 1.0}, ValueError, r"b1 must be in \[0.0, 1.0\)"),
        ((_P, _P, _P, _P), {"b2": -0.1}, ValueError, "b2 must be in"),
        ((_P, _P, _P, _P), {"eps": -1.0}, ValueError, "eps must be in"),
        ((_P, _P, _P, _P), {"weight_decay": -1e-3}, ValueError, "weight_decay must be in"),
        ((_P, _P, _P, _P), {"lr": jnp.ones(2)}, ValueError, "lr must be a scalar"),
        ((_P, _P, _P, _P), {"formats": {"moment": None}}, ValueError, "unknown keys"),
        ((_P, _P, _P, _P), {"formats": {"mu": "bf16"}}, TypeError, r"formats\['mu'\]"),
        ((_P, _P, _P, _P), {"formats": [None] * 4}, TypeError, "formats must be"),
    ],
)
def test_bad_arguments_raise(args, kwargs, error, match):
  kwargs = {**_GOOD, **kwargs}
  for fn in (quantized_adam_step_reference, quantized_adam_step_pallas, quantized_adam_step):
    with pytest.raises(error, match=match):
      fn(*args, **kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"block_size": 1000}, ValueError, "block_size must be a power of two"),
        ({"block_size": 3 * 1024}, ValueError, "block_size must be a power of two"),
        ({"block_size": 512}, ValueError, "block_size must be a power of two"),
        ({"block_size": 1024.0}, TypeError, "block_size must be an int"),
        ({"interpret": "yes"}, TypeError, "interpret must be a bool or a pltpu.InterpretParams"),
    ],
)
def test_bad_kernel_arguments_raise(kwargs, error, match):
  with pytest.raises(error, match=match):
    quantized_adam_step_pallas(_P, _P, _P, _P, **_GOOD, **kwargs)
  with pytest.raises(error, match=match):
    quantized_adam_update_pallas(_P, _P, _P, _P, **_GOOD, **kwargs)
  with pytest.raises(TypeError, match="use_kernel"):
    quantized_adam_step(_P, _P, _P, _P, use_kernel="yes", **_GOOD)


def test_bad_stream_words_raise():
  with pytest.raises(ValueError, match="requires stream_words"):
    quantized_adam_update_pallas(_P, _P, _P, _P, rounding="stochastic", **_GOOD)
  with pytest.raises(TypeError, match=r"stream_words must be a uint32 array of shape \(4, 2\)"):
    quantized_adam_update_pallas(_P, _P, _P, _P, rounding="stochastic",
                                 stream_words=jnp.zeros(8, jnp.uint32), **_GOOD)


# -- the kernel against independent references: optax, and ml_dtypes casts in numpy --------
def _assert_within(a, b, tol, what):
  err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
  worst = np.max(err / tol)
  assert worst <= 1.0, f"{what}: off by {worst:.2f} x the tolerance"


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2], ids=["adam", "adamw"])
def test_kernel_matches_optax_adam_with_formats_off(weight_decay):
  """The interpret-mode kernel with every format off takes optax.adam(w)'s steps.

  Each of 3 steps starts from optax's state (weights and moments), so the comparison is
  one step at a time. Usual (non-dyadic) hyperparameters: a compiler's multiply-add
  contraction may round a product differently, so each result may differ by a few float32
  ulps of its operands (|(1 - b1) g| + |b1 m| for m, and so on), not bit for bit.
  """
  ulps = lambda *terms: 4 * np.finfo(np.float32).eps * sum(np.abs(np.asarray(x)) for x in terms)
  p0 = jax.random.normal(jax.random.key(0), (N,))
  opt = optax.adamw(1e-3, weight_decay=weight_decay) if weight_decay else optax.adam(1e-3)
  state, params = opt.init(p0), p0
  for t in range(1, 4):
    grads = 10.0**-t * jax.random.normal(jax.random.key(t), (N,))
    p, m, v = quantized_adam_step_pallas(params, grads, state[0].mu, state[0].nu, step=t,
                                         lr=1e-3, weight_decay=weight_decay,
                                         block_size=BLOCK, interpret=True)
    mu, nu = state[0].mu, state[0].nu
    updates, state = opt.update(grads, state, params)
    _assert_within(m, state[0].mu, ulps(0.1 * grads, 0.9 * mu), f"first moment, step {t}")
    _assert_within(v, state[0].nu, ulps(1e-3 * grads**2, 0.999 * nu), f"second moment, step {t}")
    params = optax.apply_updates(params, updates)
    _assert_within(p, params, ulps(params, updates), f"weights, step {t}")
  assert np.abs(np.asarray(params) - np.asarray(p0)).min() > 0  # every weight moved


def _numpy_quantized_adam(p, g, m, v, t, *, lr, b1, b2, eps, weight_decay):
  """Alg. 1 in float32 numpy, each Q a round trip through an ml_dtypes type (nearest-even):
  G in E5M2, M in bfloat16, V in float16, W in bfloat16."""
  f = np.float32
  q = lambda x, dtype: np.asarray(x, f).astype(dtype).astype(f)
  gq = q(g, ml_dtypes.float8_e5m2)
  m = q(f(1 - b1) * gq + f(b1) * m, ml_dtypes.bfloat16)
  v = q(f(1 - b2) * (gq * gq) + f(b2) * v, np.float16)
  bc1, bc2 = f(1) - f(b1) ** t, f(1) - f(b2) ** t
  u = (m / bc1) / (np.sqrt(v / bc2) + f(eps)) + f(weight_decay) * p
  return q(p + f(-lr) * u, ml_dtypes.bfloat16), m, v


ML_DTYPES_FORMATS = {"grads": FloatFormat.E5M2, "mu": FloatFormat.BF16,
                     "nu": FloatFormat.FP16, "weights": FloatFormat.BF16}


def test_kernel_matches_ml_dtypes_casts_in_numpy():
  """Four formats on, nearest rounding, 3 steps: bit for bit against numpy + ml_dtypes.

  Dyadic hyperparameters and inputs already in their formats make every product exact,
  so the only roundings are the sums, quotients and square roots both sides perform.
  """
  p, g, m, v = (np.asarray(x) for x in _buffers(3))
  m = m.astype(ml_dtypes.bfloat16).astype(np.float32)
  v = v.astype(np.float16).astype(np.float32)
  kp, km, kv = (jnp.asarray(x) for x in (p, m, v))
  for t in range(1, 4):
    g = (10.0 ** -t * np.random.default_rng(t).normal(size=N)).astype(np.float32)
    kp, km, kv = quantized_adam_step_pallas(kp, jnp.asarray(g), km, kv, step=t,
                                            formats=ML_DTYPES_FORMATS, block_size=BLOCK,
                                            interpret=True, **DYADIC)
    p, m, v = _numpy_quantized_adam(p, g, m, v, t, **DYADIC)
    _assert_bits_equal(kp, p, f"weights, step {t}")
    _assert_bits_equal(km, m, f"first moment, step {t}")
    _assert_bits_equal(kv, v, f"second moment, step {t}")
  assert np.mean(np.asarray(kp) != np.asarray(_buffers(3)[0])) > 0.5  # most weights moved
