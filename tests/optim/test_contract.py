"""Optax contract tests for every jaxlab optimizer, after optax/contrib/_common_test.py.

Each optimizer (with and without quantization) must: accept extra args under
jit without recompiling, work inside optax.chain, optax.inject_hyperparams and
optax.MultiSteps, preserve the parameter dtype and keep state shapes/dtypes
stable across steps, and converge on a small problem. The ``*_fused`` variants
run the fused Pallas step (``implementation="pallas"``, interpreted on CPU).
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.optim import quantized_adam, quantized_muon
from jaxlab.quant import FloatFormat

E8M10 = FloatFormat(8, 10)
QUANT = dict(grads=E8M10, mu=E8M10, nu=E8M10, weights=FloatFormat(8, 16))

OPTIMIZERS = {
    "adam": (quantized_adam, dict(learning_rate=1e-2)),
    "adamw_quant": (quantized_adam, dict(learning_rate=1e-2, weight_decay=1e-4, **QUANT)),
    "adam_stochastic": (quantized_adam, dict(learning_rate=1e-2, rounding="stochastic",
                                             seed=3, **QUANT)),
    "adam_int8": (quantized_adam, dict(learning_rate=1e-2, moment_storage="int8")),
    "adam_fp8": (quantized_adam, dict(learning_rate=1e-2, moment_storage="float8_e4m3fn")),
    "muon": (quantized_muon, dict(learning_rate=1e-2)),
    "muon_quant": (quantized_muon, dict(learning_rate=1e-2, **QUANT)),
    "muon_bf16": (quantized_muon, dict(learning_rate=1e-2, moment_storage="bfloat16")),
    # The fused Pallas step (interpreted on CPU), in float32 only (see _cases). Two variants
    # span what the kernel path does: the bare Adam update, and every format on with
    # stochastic rounding, weight decay and Q_W's update (fused vs jnp values: test_quantized_adam).
    "adam_fused": (quantized_adam, dict(learning_rate=1e-2, implementation="pallas")),
    "adamw_stochastic_fused": (quantized_adam, dict(
        learning_rate=1e-2, weight_decay=1e-4, rounding="stochastic", seed=3,
        implementation="pallas", **QUANT)),
}
NAMES = sorted(OPTIMIZERS)


def _cases(dtypes):
  """``(dtype, name)`` pairs; the fused variants in float32 only.

  With bfloat16 / float16 params they run the jnp chain (the kernel covers float32; see
  test_quantized_adam.py's fallback test), i.e. the very program of their unfused twin.
  """
  return [pytest.param(d, n, id=f"{jnp.dtype(d).name}-{n}") for d in dtypes for n in NAMES
          if d == jnp.float32 or not n.endswith("_fused")]


def _make(name, **overrides):
  factory, kwargs = OPTIMIZERS[name]
  return factory(**{**kwargs, **overrides})


def _mixed_problem(dtype=jnp.float32):
  target = {"m": jnp.array([[1.0, -0.5], [0.25, 2.0]], dtype), "v": jnp.array([1.0, -1.0], dtype)}
  params = jax.tree.map(jnp.zeros_like, target)
  loss = lambda p: sum(jnp.sum((a - b) ** 2) for a, b in zip(
      jax.tree.leaves(p), jax.tree.leaves(target), strict=True))
  return params, target, loss


@pytest.mark.parametrize("name", NAMES)
def test_extra_args_jit_and_no_recompilation(name):
  opt = _make(name)
  params, _, loss = _mixed_problem()
  chex.clear_trace_counter()  # the footprint is shared by every parametrization

  @jax.jit
  @chex.assert_max_traces(n=1)  # a second trace (state structure or dtype drift) raises
  def step(p, s):
    u, s = opt.update(jax.grad(loss)(p), s, p, unexpected_extra_arg=1)
    return optax.apply_updates(p, u), s

  p, s = step(params, opt.init(params))
  for _ in range(2):
    p, s = step(p, s)


@pytest.mark.parametrize("name", NAMES)
def test_converges_inside_chain(name):
  opt = optax.chain(optax.clip_by_global_norm(10.0), _make(name, learning_rate=3e-2))
  params, target, loss = _mixed_problem()

  def body(carry, _):
    p, s = carry
    u, s = opt.update(jax.grad(loss)(p), s, p)
    return (optax.apply_updates(p, u), s), None

  s = optax.tree.map_params(opt, lambda v: v, opt.init(params))
  (p, _), _ = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), length=600))(params, s)
  for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(target), strict=True):
    np.testing.assert_allclose(a, b, atol=5e-2)


@pytest.mark.parametrize("name", NAMES)
def test_inject_hyperparams_matches(name):
  factory, kwargs = OPTIMIZERS[name]
  static = ["ns_steps"] if factory is quantized_muon else []  # as optax: seed is injected too
  opt = factory(**kwargs)
  opt_inject = optax.inject_hyperparams(factory, static_args=static)(**kwargs)
  params = {"a": -jnp.ones((2, 3)), "b": jnp.ones((5,))}
  grads = {"a": jnp.ones((2, 3)), "b": -jnp.linspace(0.1, 1.0, 5)}
  # both optimizers' init and update in one compiled program (one compile per case)
  (u, s), (ui, si) = jax.jit(lambda g, p: tuple(o.update(g, o.init(p), p)
                                                 for o in (opt, opt_inject)))(grads, params)
  chex_close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6)
  jax.tree.map(chex_close, ui, u)
  jax.tree.map(lambda a, b: chex_close(np.asarray(a, np.float64), np.asarray(b, np.float64)),
               si.inner_state, s)


@pytest.mark.parametrize("dtype, name", _cases([jnp.bfloat16, jnp.float32]))
def test_preserve_dtype_and_multisteps(name, dtype):
  opt = _make(name)
  params = {"m": jnp.array([[1.0, 2.0], [3.0, 4.0]], dtype), "v": jnp.array([1.0, 2.0], dtype)}
  grads = jax.grad(lambda p: sum(jnp.sum(x.astype(jnp.float32) ** 2)
                                 for x in jax.tree.leaves(p)))(params)
  multi = optax.MultiSteps(opt, every_k_schedule=4)
  # the optimizer's and MultiSteps' first updates in one compiled program
  updates, multi_updates = jax.jit(lambda g, p: tuple(o.update(g, o.init(p), p)[0]
                                                      for o in (opt, multi)))(grads, params)
  for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
    assert u.dtype == p.dtype
  for u in jax.tree.leaves(multi_updates):
    np.testing.assert_array_equal(u, jnp.zeros_like(u))


@pytest.mark.parametrize("dtype, name", _cases([jnp.float16, jnp.bfloat16, jnp.float32]))
def test_state_shape_dtype_stability(name, dtype):
  opt = _make(name)
  params, _, loss = _mixed_problem(dtype)

  @jax.jit
  def step(p, s):
    g = jax.grad(lambda q: loss(q).astype(jnp.float32))(p)
    cond = jax.random.randint(jax.random.key(0), (), 0, 2) == 0
    u, s2 = jax.lax.cond(cond, lambda: opt.update(g, s, p), lambda: (p, s))
    return optax.apply_updates(p, u), s2

  s0 = opt.init(params)
  p, s = params, s0
  for _ in range(2):
    p, s = step(p, s)
    assert all(leaf.dtype == dtype for leaf in jax.tree.leaves(p))
  chex.assert_trees_all_equal_shapes_and_dtypes(s, s0)  # structure included
