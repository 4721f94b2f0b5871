"""Value tests for quantized Adam: against optax.adam and hand-computed steps."""

import jax
import jax.extend.core
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest

from jaxlab.core.rng import advance_key
from jaxlab.optim import (
    quantize_params,
    quantize_updates,
    quantized_adam,
    scale_by_quantized_adam,
)
from jaxlab.optim.transforms import STREAM_MU
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

  p, s, out = params, jax.jit(opt.init)(params), []
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


# -- the fused Pallas step: implementation="pallas" (interpreted on CPU) against the jnp chain --
# Powers of two and formats of short mantissa make every product of the step exact, so a
# compiler's multiply-add contraction (tests/kernels_pallas/test_quantized_adam.py) rounds
# nothing differently and the two implementations must agree bit for bit.
DYADIC = dict(b1=0.875, b2=0.9375, eps=1e-8)
LR = WD = 2.0**-6
FORMATS = dict(grads=FloatFormat(5, 2), mu=FloatFormat(8, 3), nu=FloatFormat(8, 7),
               weights=FloatFormat.BF16)


def _fused_problem():
  """Leaves of odd sizes (every flat offset matters), weights already in bfloat16.

  Built in numpy: eager jax ops would each compile on their own.
  """
  rng = np.random.default_rng(7)
  shapes = {"a": (5, 1, 3), "b": (7,), "c": (2, 2)}
  return {n: jnp.asarray(rng.normal(size=s).astype(ml_dtypes.bfloat16).astype(np.float32))
          for n, s in shapes.items()}


def _grads(params, steps):
  """Per-step gradients, stacked, made in numpy: inputs to the compiled run, so that XLA
  cannot fuse their computation into (and re-evaluate it inside) the chain's arithmetic."""
  rng = np.random.default_rng(1)
  return jax.tree.map(lambda p: jnp.asarray(
      0.1 * rng.normal(size=(steps, *np.shape(p))), jnp.float32), params)


def _run_together(opts, params, steps=3, follow_first=False):
  """Per optimizer, the ``(updates, state)`` of ``steps`` steps (stacked), in one program.

  ``follow_first``: every optimizer steps from the first one's params and state, so each
  step compares one update from a common start.
  """
  def body(carry, g):
    outs = [opt.update(g, carry[0 if follow_first else i][1], carry[0 if follow_first else i][0])
            for i, opt in enumerate(opts)]
    new = [(optax.apply_updates(c[0], u), s) for c, (u, s) in zip(carry, outs, strict=True)]
    return new, outs

  def run(params, grads):
    carry = [(params, opt.init(params)) for opt in opts]
    return jax.lax.scan(body, carry, grads)[1]

  return jax.jit(run)(params, _grads(params, steps))


def _has_kernel(opt, params, with_params=True):
  def calls(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "pallas_call":
        yield eqn
      for sub in jax.extend.core.jaxprs_in_params(eqn.params):
        yield from calls(sub)

  # the state's shapes suffice to trace (an eager init would compile op by op)
  args = (params, jax.eval_shape(opt.init, params)) + ((params,) if with_params else ())
  return any(True for _ in calls(jax.make_jaxpr(opt.update)(*args).jaxpr))


def test_fused_step_is_bit_identical_to_the_jnp_chain_in_stochastic_rounding():
  """Updates and every state leaf (moments, counts, keys), 3 steps, 3 leaves of odd sizes.

  Both draw element i of the flattened tree from one hash stream per quantity and step,
  so stochastic rounding agrees bit for bit (nearest: the schedule test below).
  """
  params = _fused_problem()
  kw = dict(weight_decay=WD, rounding="stochastic", seed=3, **DYADIC, **FORMATS)
  xla, fused = (quantized_adam(LR, implementation=i, **kw) for i in ("xla", "pallas"))
  assert _has_kernel(fused, params) and not _has_kernel(xla, params)
  a, b = _run_together([xla, fused], params)
  _assert_bits_equal(a, b)
  updates = np.concatenate([np.ravel(u) for u in jax.tree.leaves(a[0])])
  assert np.mean(updates != 0) > 0.9  # the weights moved


def test_fused_step_within_one_rounding_of_the_jnp_chain_with_usual_hyperparameters():
  """Inexact products and no weight format (the update is Adam's direction u itself).

  Each step starts both from the chain's params and state. The moments may differ by one
  step of their format: a multiply-add contracted differently rounds one product
  differently, which can flip one rounding of the format (the float32 ulps of the scale
  cover an operand's last bit). The update may differ by a few float32 ulps: XLA rewrites
  divisions by the bias corrections depending on the surrounding program (``x / c`` into
  ``x * (1 / c)``, ``(a / b) / c`` into ``a / (b * c)``), in the chain and the interpreted
  kernel alike, so even dyadic hyperparameters do not make u bit-exact. A wrong formula,
  offset or output (e.g. ``(w + u) - w`` for u) is off by orders of magnitude more.
  """
  params = _fused_problem()
  kw = dict(weight_decay=1e-2, b1=0.9, b2=0.999, rounding="nearest",
            **{**FORMATS, "weights": None})
  xla, fused = (quantized_adam(1e-3, implementation=i, **kw) for i in ("xla", "pallas"))
  (ux, sx), (uf, sf) = _run_together([xla, fused], params, follow_first=True)
  flat = lambda t: np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)])
  u_x, u_f = flat(ux), flat(uf)
  assert np.max(np.abs(u_f - u_x) / (4 * 2.0**-23 * np.abs(u_x))) <= 1, "updates"
  for name, man in (("mu", FORMATS["mu"].man_bits), ("nu", FORMATS["nu"].man_bits)):
    a, b = flat(getattr(sx[1], name)), flat(getattr(sf[1], name))
    tol = 2.0**-man * np.maximum(np.abs(a), np.abs(b)) + 2.0**-21 * np.abs(a).max()
    assert np.max(np.abs(a - b) / tol) <= 1, name
    assert np.mean(a == b) > 0.9, f"{name}: only {np.mean(a == b):.1%} equal"


def test_fused_step_with_a_schedule_and_inject_hyperparams_matches_the_jnp_chain():
  # b1, b2, eps, weight_decay and seed injected (traced scalars inside the update), the
  # learning rate a dyadic schedule read by the optimizer at its own count (2**-5, then
  # 2**-6 from count 2): nearest rounding, bit for bit, state included.
  params = _fused_problem()
  sched = optax.piecewise_constant_schedule(2.0**-5, {2: 0.5})
  kw = dict(weight_decay=WD, rounding="nearest", seed=1, **DYADIC, **FORMATS)
  xla, fused = (optax.inject_hyperparams(quantized_adam, static_args="learning_rate")(
      sched, implementation=i, **kw) for i in ("xla", "pallas"))
  assert _has_kernel(fused, params)
  a, b = _run_together([xla, fused], params, steps=4)
  _assert_bits_equal(a, b)
  lr_state = b[1].inner_state[3]
  np.testing.assert_array_equal(lr_state.count, [1, 2, 3, 4])  # the schedule's count advanced


def test_fused_step_without_decay_keeps_the_sign_of_zero_updates():
  # A literal weight_decay=0 leaves the decay term out on both paths: a zero gradient on a
  # -0 moment gives u = -0 and the update -lr * -0 = +0, where adding 0 * w would give -0.
  params = {"w": jnp.array([1.0, 2.0, -1.0, 0.5])}
  grads = {"w": jnp.array([-0.0, 0.0, -0.0, 0.0])}
  xla, fused = (quantized_adam(1e-3, implementation=i) for i in ("xla", "pallas"))
  state = xla.init(params)
  rule = state[1]._replace(mu={"w": jnp.array([-0.0, -0.0, 0.0, 0.0])})
  state = (state[0], rule, *state[2:])
  u_xla, u_fused = jax.jit(lambda g, s, p: (xla.update(g, s, p)[0], fused.update(g, s, p)[0]))(
      grads, state, params)
  _assert_bits_equal(u_fused, u_xla)
  np.testing.assert_array_equal(np.signbit(u_xla["w"]), [False, True, True, True])


def test_fused_falls_back_to_the_jnp_chain_where_the_kernel_does_not_apply():
  """Nesterov, moment_storage, a bfloat16 leaf, no params: the very program of "xla"."""
  params = _fused_problem()
  mixed = {**params, "b": params["b"].astype(jnp.bfloat16)}
  cases = [(dict(nesterov=True), params, True), (dict(moment_storage="int8"), params, True),
           ({}, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), True),
           ({}, mixed, True), ({}, params, False)]
  for kw, p, with_params in cases:
    xla, fused = (quantized_adam(1e-3, implementation=i, **kw) for i in ("xla", "pallas"))
    args = (p, jax.eval_shape(xla.init, p)) + ((p,) if with_params else ())
    assert not _has_kernel(fused, p, with_params), kw
    # The same jaxpr, hence the same values.
    assert str(jax.make_jaxpr(fused.update)(*args)) == str(jax.make_jaxpr(xla.update)(*args))
  # float32 gradients and weights, but bfloat16 moments (a state made for bfloat16 params).
  fused = quantized_adam(1e-3, implementation="pallas")
  assert "pallas_call" not in str(jax.make_jaxpr(fused.update)(
      params, fused.init(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)), params))
  assert _has_kernel(quantized_adam(1e-3, implementation="pallas"), params)


def test_stochastic_streams_are_indexed_by_position_in_the_flattened_tree():
  """The jnp chain rounds leaf by leaf what one draw over the concatenated leaves rounds."""
  fmt = FloatFormat(8, 2)
  tree = {"a": jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32),
          "b": jnp.asarray(np.linspace(-1, 1, 5), jnp.float32)}
  flat = lambda t: jnp.concatenate([x.ravel() for x in jax.tree.leaves(t)])
  q_g = quantize_updates(fmt, rounding="stochastic", seed=4)
  rule = scale_by_quantized_adam(mu=fmt, rounding="stochastic", seed=4)

  @jax.jit
  def run(tree):
    g_state, rule_state = q_g.init(tree), rule.init(tree)
    out, g_state2 = q_g.update(tree, g_state)
    _, rule_state2 = rule.update(tree, rule_state)
    # Q_G: the step key itself; Q_M: STREAM_MU folded into the rule's step key.
    g_key = advance_key(g_state.key)[1]
    mu_key = jax.random.fold_in(advance_key(rule_state.key)[1], STREAM_MU)
    return (flat(out), quantize(flat(tree), fmt, rounding="stochastic", key=g_key),
            flat(rule_state2.mu), quantize(0.1 * flat(tree), fmt, rounding="stochastic",
                                            key=mu_key), g_state.key, g_state2.key)

  g_leafwise, g_flat, mu_leafwise, mu_flat, key, key2 = run(tree)
  _assert_bits_equal(g_leafwise, g_flat)
  np.testing.assert_array_equal(mu_leafwise, mu_flat)
  assert not np.array_equal(key, key2)  # one step advanced the key
