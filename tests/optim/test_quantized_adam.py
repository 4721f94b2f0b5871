"""Value tests for quantized Adam: against optax.adam and hand-computed steps."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.optim import quantize_params, quantized_adam, scale_by_quantized_adam
from jaxlab.quant import FloatFormat, quantize


def _problem():
  k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
  params = {"w": jax.random.normal(k1, (12, 6)) * 0.5, "b": jnp.zeros(6),
            "v": jax.random.normal(k4, (6,))}
  x = jax.random.normal(k2, (64, 12))
  y = jax.random.normal(k3, (64,))
  loss = lambda p: jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) @ p["v"] - y) ** 2)
  return params, loss


def _trajectory(opt, steps, grad_transform=lambda g: g):
  params, loss = _problem()

  @jax.jit
  def step(p, s):
    g = grad_transform(jax.grad(loss)(p))
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s, u

  p, s, out = params, opt.init(params), []
  for _ in range(steps):
    p, s, u = step(p, s)
    out.append((p, u))
  return out


def _assert_bits_equal(tree_a, tree_b):
  for a, b in zip(jax.tree.leaves(tree_a), jax.tree.leaves(tree_b), strict=True):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


@pytest.mark.parametrize(
    "ours,ref",
    [
        (dict(), optax.adam(3e-2)),
        (dict(b1=0.8, b2=0.99, eps=1e-6), optax.adam(3e-2, b1=0.8, b2=0.99, eps=1e-6)),
        (dict(nesterov=True), optax.adam(3e-2, nesterov=True)),
        (dict(weight_decay=0.05), optax.adamw(3e-2, weight_decay=0.05)),
    ],
)
def test_no_quantization_is_bit_identical_to_optax(ours, ref):
  a = _trajectory(quantized_adam(3e-2, **ours), 25)
  b = _trajectory(ref, 25)
  for (pa, ua), (pb, ub) in zip(a, b, strict=True):
    _assert_bits_equal(ua, ub)
    _assert_bits_equal(pa, pb)


def test_schedule_learning_rate_bit_identical():
  sched = optax.cosine_decay_schedule(3e-2, 30)
  a = _trajectory(quantized_adam(sched), 10)
  b = _trajectory(optax.adam(sched), 10)
  _assert_bits_equal(a[-1][0], b[-1][0])


def test_grad_quantization_equals_adam_on_quantized_grads():
  fmt = FloatFormat(5, 2)
  a = _trajectory(quantized_adam(3e-2, grads=fmt), 15)
  b = _trajectory(optax.adam(3e-2), 15, grad_transform=lambda g: jax.tree.map(
      lambda x: quantize(x, fmt), g))
  _assert_bits_equal(a[-1][0], b[-1][0])


def test_moment_quantization_one_step_by_hand():
  fmt_m, fmt_v = FloatFormat(8, 2), FloatFormat(8, 3)
  b1, b2, eps = 0.9, 0.999, 1e-8
  g = jnp.array([0.3, -1.7, 2.5e-3, 0.0, 11.0])
  rule = scale_by_quantized_adam(b1, b2, eps, mu=fmt_m, nu=fmt_v)
  state = rule.init(g)
  u, state = jax.jit(rule.update)(g, state)
  m = np.asarray(quantize((1 - b1) * g, fmt_m))
  v = np.asarray(quantize((1 - b2) * g * g, fmt_v))
  np.testing.assert_array_equal(state.mu, m)
  np.testing.assert_array_equal(state.nu, v)
  expected = (m / (1 - b1)) / (np.sqrt(v / (1 - b2)) + eps)
  np.testing.assert_allclose(u, expected, rtol=2e-5)  # numpy computes in float64
  # Hand value for the first entry: m = Q(0.03) = 0.03125 (E8M2), v = Q(9e-5).
  assert state.mu[0] == 0.03125


def test_weights_land_exactly_on_quantized_p_plus_u():
  """apply_updates(p, u_W) == Q_W(p + u) at every step, and is representable."""
  fmt = FloatFormat(8, 5)
  params, loss = _problem()
  plain = quantized_adam(3e-2)
  wq = quantized_adam(3e-2, weights=fmt)
  p = quantize_params(params, fmt)
  s_plain, s_w = plain.init(p), wq.init(p)

  @jax.jit
  def step(p, s_plain, s_w):
    g = jax.grad(loss)(p)
    u_plain, s_plain = plain.update(g, s_plain, p)
    u_w, s_w = wq.update(g, s_w, p)
    target = jax.tree.map(lambda a, b: quantize(a + b, fmt), p, u_plain)
    return optax.apply_updates(p, u_w), target, s_plain, s_w

  for _ in range(30):
    new_p, target, s_plain, s_w = step(p, s_plain, s_w)
    _assert_bits_equal(new_p, target)
    _assert_bits_equal(new_p, quantize_params(new_p, fmt))
    p = new_p


def test_stochastic_rounding_deterministic_per_seed_and_key_in_state():
  kw = dict(grads=FloatFormat(5, 2), mu=FloatFormat(8, 3), nu=FloatFormat(8, 3),
            weights=FloatFormat(8, 6), rounding="stochastic")
  a = _trajectory(quantized_adam(3e-2, seed=1, **kw), 5)
  b = _trajectory(quantized_adam(3e-2, seed=1, **kw), 5)
  c = _trajectory(quantized_adam(3e-2, seed=2, **kw), 5)
  _assert_bits_equal(a[-1][0], b[-1][0])
  assert not np.array_equal(a[-1][0]["w"], c[-1][0]["w"])
  state = quantized_adam(3e-2, seed=1, **kw).init(_problem()[0])
  keys = [x for x in jax.tree.leaves(state) if x.dtype == jnp.uint32]
  assert keys and all(k.shape == (2,) for k in keys)


def test_quantized_weights_stagnate_with_nearest_and_recover_with_stochastic():
  """The paper's W effect: tiny updates below half an ulp vanish under nearest."""
  fmt = FloatFormat(8, 3)
  p0 = {"x": jnp.full((256,), 1.0)}
  g = {"x": jnp.full((256,), 1.0)}  # constant gradient: Adam step = lr
  for rounding, moved in (("nearest", False), ("stochastic", True)):
    opt = quantized_adam(1e-3, weights=fmt, rounding=rounding)
    s, p = opt.init(p0), p0
    upd = jax.jit(opt.update)
    for _ in range(20):
      u, s = upd(g, s, p)
      p = optax.apply_updates(p, u)
    # 20 steps of 1e-3 from 1.0: exact result 0.98; the grid spacing below 1 is 1/16.
    mean = float(jnp.mean(p["x"]))
    if moved:
      assert abs(mean - 0.98) < 0.01
    else:
      assert mean == 1.0


def test_bad_arguments():
  with pytest.raises(ValueError, match="rounding"):
    quantized_adam(1e-3, rounding="round")
  with pytest.raises(TypeError, match="grads"):
    quantized_adam(1e-3, grads="bf16")
  with pytest.raises(ValueError, match="moment_storage"):
    quantized_adam(1e-3, moment_storage="int4")
  with pytest.raises(ValueError, match="moment_storage"):
    quantized_adam(1e-3, moment_storage="int8", nu=FloatFormat.BF16)
  opt = quantized_adam(1e-3, weights=FloatFormat.BF16)
  p = {"x": jnp.ones(3)}
  with pytest.raises(ValueError, match="params"):
    opt.update(p, opt.init(p))
