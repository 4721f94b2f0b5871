"""Value tests for quantized Muon against optax.contrib.muon."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest

from jaxlab.optim import quantized_muon
from jaxlab.quant import FloatFormat, quantize


def _problem():
  k1, k2, k3, k4 = jax.random.split(jax.random.key(1), 4)
  params = {"w1": jax.random.normal(k1, (10, 16)) * 0.3, "b1": jnp.zeros(16),
            "w2": jax.random.normal(k4, (16, 3)) * 0.3}
  x = jax.random.normal(k2, (48, 10))
  y = jax.random.normal(k3, (48, 3))
  loss = lambda p: jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)
  return params, loss


def _run(opt, steps):
  params, loss = _problem()

  @jax.jit
  def step(p, s):
    u, s = opt.update(jax.grad(loss)(p), s, p)
    return optax.apply_updates(p, u), s, u

  p, s, us = params, jax.jit(opt.init)(params), []
  for _ in range(steps):
    p, s, u = step(p, s)
    us.append(u)
  return p, us, loss(p)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(nesterov=False, beta=0.9),
    dict(weight_decay=0.1, adam_weight_decay=0.01, adam_b1=0.8, adam_b2=0.99, ns_steps=4),
])
def test_no_quantization_is_bit_identical_to_optax_muon(kw):
  _, ua, _ = _run(quantized_muon(2e-2, **kw), 20)
  _, ub, _ = _run(optax.contrib.muon(2e-2, **kw), 20)
  for a, b in zip(jax.tree.leaves(ua), jax.tree.leaves(ub), strict=True):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_matrices_routed_to_muon_and_vectors_to_adam():
  params, _ = _problem()
  state = quantized_muon(1e-2, mu=FloatFormat(8, 4)).init(params)
  inner = state[1].inner_states
  muon_mu = inner["muon"].inner_state[0].mu
  adam_nu = inner["adam"].inner_state[0].nu
  assert muon_mu["w1"].shape == (10, 16) and isinstance(muon_mu["b1"], optax.MaskedNode)
  assert adam_nu["b1"].shape == (16,) and isinstance(adam_nu["w1"], optax.MaskedNode)


def test_quantized_momentum_is_on_grid_and_weights_representable():
  fmt_m, fmt_w = FloatFormat(8, 3), FloatFormat(8, 7)
  opt = quantized_muon(2e-2, mu=fmt_m, nu=fmt_m, weights=fmt_w)
  params, loss = _problem()

  @jax.jit
  def step(p, s):
    u, s = opt.update(jax.grad(loss)(p), s, p)
    return optax.apply_updates(p, u), s

  p, s = params, jax.jit(opt.init)(params)
  for _ in range(5):
    p, s = step(p, s)
  mu = s[1].inner_states["muon"].inner_state[0].mu["w1"]
  np.testing.assert_array_equal(mu, quantize(mu, fmt_m))
  for leaf in jax.tree.leaves(p):
    np.testing.assert_array_equal(leaf, quantize(leaf, fmt_w))


def test_moderate_mantissa_keeps_fp32_loss():
  """G, M, V with 7 mantissa bits (bfloat16's) end within 10% of fp32 Muon."""
  _, _, l_fp = _run(quantized_muon(2e-2), 150)
  fmt = FloatFormat(8, 7)
  _, _, l_q = _run(quantized_muon(2e-2, mu=fmt, nu=fmt, grads=fmt), 150)
  assert abs(float(l_q) - float(l_fp)) < 0.1 * float(l_fp)


def test_bad_arguments():
  with pytest.raises(ValueError, match="moment_storage"):
    quantized_muon(1e-2, mu=FloatFormat.BF16, moment_storage="int8")
  with pytest.raises(TypeError, match="nu"):
    quantized_muon(1e-2, nu=7)
  with pytest.raises(ValueError, match="rounding"):
    quantized_muon(1e-2, rounding="even")


def _has_kernel(opt, params):
  jaxpr = jax.make_jaxpr(opt.update)(params, jax.eval_shape(opt.init, params), params)
  return "pallas_call" in str(jaxpr)


def test_fused_adam_part_is_bit_identical_to_the_jnp_chain():
  """implementation="pallas": the non-matrix params' Adam as one kernel, stochastic rounding.

  Dyadic hyperparameters and short-mantissa formats (every product exact): the fused and
  jnp Adam parts give the same update and state bit for bit. One step checks the wiring
  (the masked Adam leaves, the 3-link Adam state, Q_W outside); multi-step trajectories of
  the shared fused step are quantized_adam's tests.
  """
  rng = np.random.default_rng(0)  # numpy: no eager jax ops to compile one by one
  shapes = {"w1": (10, 16), "b1": (16,), "w2": (16, 3), "b2": (5,)}  # two Adam leaves
  params = {n: jnp.asarray(rng.normal(size=s).astype(ml_dtypes.bfloat16).astype(np.float32))
            for n, s in shapes.items()}
  grads = {n: jnp.asarray(0.1 * rng.normal(size=s), jnp.float32) for n, s in shapes.items()}
  kw = dict(nesterov=False, beta=0.875, adam_b1=0.875, adam_b2=0.9375,
            adam_weight_decay=2.0**-6, mu=FloatFormat(8, 3), nu=FloatFormat(8, 7),
            grads=FloatFormat(5, 2), weights=FloatFormat.BF16, rounding="stochastic", seed=2)
  # (That "pallas" runs the kernel here: test_fused_adam_part_falls_back_with_nesterov.)
  xla, fused = (quantized_muon(2.0**-5, implementation=i, **kw) for i in ("xla", "pallas"))
  a, b = jax.jit(lambda g, p: [o.update(g, o.init(p), p) for o in (xla, fused)])(grads, params)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x).view(np.uint32), np.asarray(y).view(np.uint32))
  assert np.all(np.asarray(a[0]["b1"]) != 0)  # the Adam leaves moved


def test_fused_adam_part_falls_back_with_nesterov():
  # optax's Muon (and ours by default) uses Nesterov momentum in its Adam: not in the kernel.
  params, _ = _problem()
  for implementation in ("pallas", "auto"):
    assert not _has_kernel(quantized_muon(1e-2, implementation=implementation), params)
  assert _has_kernel(quantized_muon(1e-2, nesterov=False, implementation="pallas"), params)
