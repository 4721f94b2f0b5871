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

# Each test runs every optimizer (each on its own params and state) in one compiled program,
# one per dtype where the test has dtypes, and asserts per optimizer, naming it: one program
# instead of one per optimizer saves each program's fixed tracing, lowering and compiling
# costs, which at these sizes are much of a program's cost.


def _names(dtype=jnp.float32):
  """The optimizers run at ``dtype``: the fused variants in float32 only.

  With bfloat16 / float16 params they run the jnp chain (the kernel covers float32; see
  test_quantized_adam.py's fallback test), i.e. the very program of their unfused twin.
  """
  return [n for n in NAMES if dtype == jnp.float32 or not n.endswith("_fused")]


def _make(name, **overrides):
  factory, kwargs = OPTIMIZERS[name]
  return factory(**{**kwargs, **overrides})


def _mixed_problem(dtype=jnp.float32):
  target = {"m": jnp.array([[1.0, -0.5], [0.25, 2.0]], dtype), "v": jnp.array([1.0, -1.0], dtype)}
  params = jax.tree.map(jnp.zeros_like, target)
  loss = lambda p: sum(jnp.sum((a - b) ** 2) for a, b in zip(
      jax.tree.leaves(p), jax.tree.leaves(target), strict=True))
  return params, target, loss


def _same_shapes_and_dtypes(name, a, b):
  try:
    chex.assert_trees_all_equal_shapes_and_dtypes(a, b)  # structure included
  except AssertionError as err:
    raise AssertionError(f"{name}: {err}") from err


def test_extra_args_jit_and_no_recompilation():
  opts = {n: _make(n) for n in NAMES}
  params, _, loss = _mixed_problem()
  chex.clear_trace_counter()

  @jax.jit
  @chex.assert_max_traces(n=1)  # a second trace (state structure or dtype drift) raises
  def step(ps, states):
    out = {n: opt.update(jax.grad(loss)(ps[n]), states[n], ps[n], unexpected_extra_arg=1)
           for n, opt in opts.items()}
    return ({n: optax.apply_updates(ps[n], u) for n, (u, _) in out.items()},
            {n: s for n, (_, s) in out.items()})

  s0 = jax.jit(lambda p: {n: opt.init(p) for n, opt in opts.items()})(params)
  p, s = step({n: params for n in opts}, s0)
  for _ in range(2):
    for n in NAMES:  # names the optimizer whose state drifted (the step would retrace)
      _same_shapes_and_dtypes(n, s[n], s0[n])
    p, s = step(p, s)


def test_converges_inside_chain():
  opts = {n: optax.chain(optax.clip_by_global_norm(10.0), _make(n, learning_rate=3e-2))
          for n in NAMES}
  params, target, loss = _mixed_problem()

  def run(opt, p, s):
    def body(carry, _):
      p, s = carry
      u, s = opt.update(jax.grad(loss)(p), s, p)
      return (optax.apply_updates(p, u), s), None
    return jax.lax.scan(body, (p, s), length=600)[0][0]

  final = jax.jit(lambda p: {n: run(opt, p, optax.tree.map_params(opt, lambda v: v, opt.init(p)))
                             for n, opt in opts.items()})(params)
  for n in NAMES:
    for a, b in zip(jax.tree.leaves(final[n]), jax.tree.leaves(target), strict=True):
      np.testing.assert_allclose(a, b, atol=5e-2, err_msg=n)


def test_inject_hyperparams_matches():
  params = {"a": -jnp.ones((2, 3)), "b": jnp.ones((5,))}
  grads = {"a": jnp.ones((2, 3)), "b": -jnp.linspace(0.1, 1.0, 5)}
  pairs = {}
  for n in NAMES:
    factory, kwargs = OPTIMIZERS[n]
    static = ["ns_steps"] if factory is quantized_muon else []  # as optax: seed is injected too
    pairs[n] = (factory(**kwargs),
                optax.inject_hyperparams(factory, static_args=static)(**kwargs))
  # every optimizer's and its injected twin's init and update in one compiled program
  out = jax.jit(lambda g, p: {n: tuple(o.update(g, o.init(p), p) for o in pair)
                              for n, pair in pairs.items()})(grads, params)
  for n, ((u, s), (ui, si)) in out.items():
    close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6, err_msg=n)
    jax.tree.map(close, ui, u)
    jax.tree.map(lambda a, b, close=close: close(np.asarray(a, np.float64),
                                                 np.asarray(b, np.float64)),
                 si.inner_state, s)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=lambda d: jnp.dtype(d).name)
def test_preserve_dtype_and_multisteps(dtype):
  params = {"m": jnp.array([[1.0, 2.0], [3.0, 4.0]], dtype), "v": jnp.array([1.0, 2.0], dtype)}
  grad = jax.grad(lambda p: sum(jnp.sum(x.astype(jnp.float32) ** 2) for x in jax.tree.leaves(p)))
  pairs = {}
  for n in _names(dtype):
    opt = _make(n)
    pairs[n] = (opt, optax.MultiSteps(opt, every_k_schedule=4))
  # every optimizer's and its MultiSteps' first updates in one compiled program
  out = jax.jit(lambda p: {n: tuple(o.update(grad(p), o.init(p), p)[0] for o in pair)
                           for n, pair in pairs.items()})(params)
  for n, (updates, multi_updates) in out.items():
    for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
      assert u.dtype == p.dtype, (n, u.dtype, p.dtype)
    for u in jax.tree.leaves(multi_updates):
      np.testing.assert_array_equal(u, jnp.zeros_like(u), err_msg=n)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32],
                         ids=lambda d: jnp.dtype(d).name)
def test_state_shape_dtype_stability(dtype):
  opts = {n: _make(n) for n in _names(dtype)}
  params, _, loss = _mixed_problem(dtype)

  @jax.jit
  def step(ps, states):
    g = {n: jax.grad(lambda q: loss(q).astype(jnp.float32))(p) for n, p in ps.items()}
    cond = jax.random.randint(jax.random.key(0), (), 0, 2) == 0
    out = {}
    for n, opt in opts.items():
      try:  # cond's branches must agree: the state's structure, shapes and dtypes are stable
        u, s2 = jax.lax.cond(cond, lambda n=n, opt=opt: opt.update(g[n], states[n], ps[n]),
                             lambda n=n: (ps[n], states[n]))
      except TypeError as err:
        raise AssertionError(f"{n}: {err}") from err
      out[n] = (optax.apply_updates(ps[n], u), s2)
    return {n: o[0] for n, o in out.items()}, {n: o[1] for n, o in out.items()}

  s0 = jax.jit(lambda p: {n: opt.init(p) for n, opt in opts.items()})(params)
  p, s = {n: params for n in opts}, s0
  for _ in range(2):
    p, s = step(p, s)
    for n in opts:
      assert all(leaf.dtype == dtype for leaf in jax.tree.leaves(p[n])), n
  for n in opts:
    _same_shapes_and_dtypes(n, s[n], s0[n])
