"""alpha-DPO and Diffusion-DPO losses: values, gradients, limits, and the fine-tuning loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.flatten_util import ravel_pytree

from jaxlab.models import ddpm
from jaxlab.nn import Net
from jaxlab.preference import alpha_dpo as A

Z = np.linspace(-8.0, 8.0, 33)
HUGE = np.array([-5000.0, -200.0, -80.0, -12.0, -6.0, 0.0, 80.0, 5000.0])
ALPHAS = (0.1, 0.5, 0.9, 0.9999, 1.5, 3.0)
LIMITS = (1.0, 1 - 1e-3, 1 + 1e-3, 1 - 1e-5, 1e-4, 0.05, 4.0)


def _p(z):
  return 1 / (1 + np.exp(-np.asarray(z, np.float64)))


@pytest.fixture(scope="module")
def table():
  """Losses and dL/dz on a grid of logits x alphas, from one compiled function."""
  z = jnp.asarray(np.concatenate([Z, HUGE]), jnp.float32)
  alphas = jnp.asarray(ALPHAS + LIMITS, jnp.float32)

  @jax.jit
  def compute(z, alphas):
    per_z = lambda f: jax.vmap(jax.value_and_grad(f))
    alpha_vals, alpha_grads = jax.vmap(lambda a: per_z(lambda x: A.alpha_loss(x, a))(z))(alphas)
    return alpha_vals, alpha_grads, *per_z(A.logistic_loss)(z)

  vals, grads, log_vals, log_grads = (np.asarray(a) for a in compute(z, alphas))
  n = len(Z)
  at = {float(a): i for i, a in enumerate(np.asarray(alphas))}
  return {"loss": lambda a: vals[at[float(np.float32(a))], :n],
          "grad": lambda a: grads[at[float(np.float32(a))], :n],
          "huge_loss": vals[:, n:], "huge_grad": grads[:, n:],
          "logistic": log_vals[:n], "logistic_grad": log_grads[:n],
          "logistic_huge": log_vals[n:], "logistic_huge_grad": log_grads[n:]}


def test_hand_computed_values():
  # z = 0 (policy = reference): p = 1/2
  assert math.isclose(float(A.logistic_loss(0.0)), math.log(2), rel_tol=1e-6)
  # (sqrt(1/2) - 1/4 - 1/2) / (1/2 * -1/2) = 0.171572875...
  assert math.isclose(float(A.alpha_loss(0.0, 0.5)), 0.17157288, rel_tol=1e-5)
  assert math.isclose(float(A.alpha_loss(0.0, 2.0)), 0.125, rel_tol=1e-6)  # (1/4 - 1 + 1) / 2
  # batch: z = -beta/2 [(l_w - l_l) - (l_w^ref - l_l^ref)] with beta = 2
  err_w, err_l = jnp.array([0.2, 0.5]), jnp.array([0.4, 0.1])
  ref_w, ref_l = jnp.array([0.3, 0.3]), jnp.array([0.3, 0.2])
  z = np.array([0.2, -0.3])
  np.testing.assert_allclose(A.preference_logit(err_w, err_l, ref_w, ref_l, 2.0), z, rtol=1e-6)
  p = _p(z)
  dpo, info = A.diffusion_dpo_loss(err_w, err_l, ref_w, ref_l, beta=2.0)
  np.testing.assert_allclose(dpo, np.mean(-np.log(p)), rtol=1e-6)
  assert float(info["dpo/implicit_acc"]) == 0.5
  np.testing.assert_allclose(info["dpo/p_mean"], p.mean(), rtol=1e-6)
  np.testing.assert_allclose(info["dpo/model_mse"], 0.3, rtol=1e-6)
  for a in (0.3, 0.9999, 2.5):
    loss, info = A.alpha_dpo_loss(err_w, err_l, ref_w, ref_l, beta=2.0, alpha=a)
    np.testing.assert_allclose(loss, np.mean((p**a - a * p + a - 1) / (a * (a - 1))),
                               rtol=1e-4)
    assert float(info["alpha_dpo/alpha"]) == pytest.approx(a)


def test_loss_matches_textbook_form_and_gradient_closed_form(table):
  p = _p(Z)
  for alpha in ALPHAS:
    np.testing.assert_allclose(table["loss"](alpha),
                               (p**alpha - alpha * p + alpha - 1) / (alpha * (alpha - 1)),
                               atol=2e-6, rtol=1e-4)
    # dL/dz = (p^a - p)(1 - p) / (a - 1) = -(1 - p) w_a(p), w_a = (p^a - p) / (1 - a) >= 0
    closed = (p**alpha - p) * (1 - p) / (alpha - 1)
    np.testing.assert_allclose(table["grad"](alpha), closed, atol=2e-6, rtol=1e-4)
    assert np.all(table["grad"](alpha) < 0)  # descent raises z: the policy moves toward x_w
  np.testing.assert_allclose(table["logistic_grad"], -(1 - p), atol=1e-6)


def test_robust_weighting_vanishes_for_confident_disagreement(table):
  # relative to the logistic gradient -(1 - p), alpha-DPO weighs a pair by w_a(p) -> 0 as p -> 0
  i = ALPHAS.index(0.5)
  ratio = table["huge_grad"][i, 3:6] / table["logistic_huge_grad"][3:6]  # z = -12, -6, 0
  p = _p(HUGE[3:6])
  np.testing.assert_allclose(ratio, (np.sqrt(p) - p) / 0.5, rtol=1e-3)
  assert ratio[0] < 0.01 < ratio[2]
  # the loss itself is bounded by 1 / alpha, the logistic loss is not (z = -200)
  assert table["huge_loss"][i, 1] == pytest.approx(2.0)
  assert table["logistic_huge"][1] == pytest.approx(200.0)


def test_finite_for_huge_logits(table):
  assert np.all(np.isfinite(table["huge_loss"])) and np.all(np.isfinite(table["huge_grad"]))


def test_alpha_to_one_limit(table):
  # L_1 = 1 - p + p log p; its gradient is the logistic one times p log(1/p)
  p = _p(Z)
  np.testing.assert_allclose(table["loss"](1.0), 1 - p + p * np.log(p), atol=1e-6)
  g1 = table["grad"](1.0)
  np.testing.assert_allclose(g1, table["logistic_grad"] * (-p * np.log(p)), atol=1e-6)
  for a in (1 - 1e-3, 1 + 1e-3, 1 - 1e-5):  # continuous through alpha = 1: O(|a - 1|) apart
    np.testing.assert_allclose(table["grad"](a), g1, rtol=10 * abs(a - 1) + 1e-5, atol=1e-7)


def test_alpha_to_zero_limit(table):
  # L_0 = -log p + p - 1 = Diffusion-DPO + (p - 1); gradient = logistic gradient * (1 - p)
  p = _p(Z)
  np.testing.assert_allclose(table["loss"](1e-4), -np.log(p) + p - 1, rtol=2e-3, atol=1e-3)
  np.testing.assert_allclose(table["grad"](1e-4), table["logistic_grad"] * (1 - p), atol=2e-3)


@pytest.fixture(scope="module")
def tiny():
  schedule = ddpm.make_schedule(10, "cosine")
  net = Net.create(ddpm.EpsMLP(2, (16, 16), 8, rngs=nnx.Rngs(0)))
  k1, k2 = jax.random.split(jax.random.key(0))
  x_w = jax.random.normal(k1, (256, 2)) * 0.3 + jnp.array([1.0, 0.0])
  x_l = jax.random.normal(k2, (256, 2)) * 0.3 + jnp.array([-1.0, 0.0])
  return schedule, net, x_w, x_l


def test_gradients_at_the_reference_are_parallel(tiny):
  # policy = reference => z = 0 for every pair, and the parameter gradient of alpha-DPO is
  # c_a = (2^-a - 1/2) / (1 - a) times Diffusion-DPO's (so Adam's first step is the same)
  schedule, net, x_w, x_l = tiny
  t, noise = A.sample_pair_noise(jax.random.key(1), schedule, 64, 2)

  @jax.jit
  def grads(params, alpha):
    def errors(p):
      return (*A.pair_errors(net, schedule, x_w[:64], x_l[:64], t, noise, p),
              *A.pair_errors(net, schedule, x_w[:64], x_l[:64], t, noise, net.params))
    g_dpo = jax.grad(lambda p: A.diffusion_dpo_loss(*errors(p), beta=5.0)[0])(params)
    g_alpha = jax.grad(lambda p: A.alpha_dpo_loss(*errors(p), beta=5.0, alpha=alpha)[0])(params)
    return ravel_pytree(g_dpo)[0], ravel_pytree(g_alpha)[0]

  for a in (0.3, 0.5, 0.9999):
    g_dpo, g_alpha = grads(net.params, a)
    assert float(jnp.linalg.norm(g_dpo)) > 1e-4
    np.testing.assert_allclose(g_alpha, (2**-a - 0.5) / (1 - a) * g_dpo, rtol=1e-3, atol=1e-7)


def test_dynamic_alpha_schedule_and_stop_gradient():
  z = jnp.array([-1.0, 0.5, 2.0])
  mean_p = float(np.mean(_p(z)))
  assert float(A.dynamic_alpha(z, 0.9999, 0, 3)) == pytest.approx(0.9999)
  assert float(A.dynamic_alpha(z, 0.9999, 2, 3)) == pytest.approx(0.9999)
  assert float(A.dynamic_alpha(z, 0.9999, 3, 3)) == pytest.approx(0.9999 * mean_p, rel=1e-6)
  assert float(A.dynamic_alpha(z, 0.8, 0, 0)) == pytest.approx(0.8 * mean_p, rel=1e-6)
  # the schedule passes no gradient: same as holding alpha fixed at its value
  loss_dyn = lambda z: jnp.sum(A.alpha_loss(z, A.dynamic_alpha(z, 0.9999, 5, 0)))
  loss_fix = lambda z: jnp.sum(A.alpha_loss(z, 0.9999 * mean_p))
  g_dyn, g_fix = jax.jit(lambda z: (jax.grad(loss_dyn)(z), jax.grad(loss_fix)(z)))(z)
  np.testing.assert_allclose(g_dyn, g_fix, rtol=1e-5)
  with pytest.raises(ValueError, match="warmup_steps"):
    A.dynamic_alpha(z, 0.9, 0, -1)


def test_reference_errors_get_no_gradient():
  errs = [jnp.array([0.2, 0.5]), jnp.array([0.4, 0.1]), jnp.array([0.3, 0.3]),
          jnp.array([0.3, 0.2])]
  for f in (lambda *e: A.diffusion_dpo_loss(*e, beta=2.0)[0],
            lambda *e: A.alpha_dpo_loss(*e, beta=2.0, alpha=0.5)[0]):
    g = jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(*errs)
    assert float(jnp.abs(g[0]).sum()) > 0 and float(jnp.abs(g[1]).sum()) > 0
    assert float(jnp.abs(g[2]).sum()) == 0 and float(jnp.abs(g[3]).sum()) == 0


def test_bad_input():
  e = jnp.ones(4)
  with pytest.raises(ValueError, match="beta"):
    A.diffusion_dpo_loss(e, e, e, e, beta=0.0)
  with pytest.raises(ValueError, match="alpha"):
    A.alpha_dpo_loss(e, e, e, e, beta=1.0, alpha=-0.5)
  with pytest.raises(ValueError, match="alpha"):
    A.alpha_loss(jnp.zeros(3), 0.0)
  with pytest.raises(ValueError, match="1-D arrays of one shape"):
    A.diffusion_dpo_loss(e, jnp.ones(3), e, e, beta=1.0)
  with pytest.raises(ValueError, match="loss"):
    A.loss_params("ipo")
  with pytest.raises(ValueError, match="warmup_steps"):
    A.loss_params("alpha_dynamic", warmup_steps=1.5)
  with pytest.raises(ValueError, match="batch_size"):
    A.FinetuneConfig(batch_size=0)


def test_finetune_all_losses_in_one_vmap(tiny):
  schedule, net, x_w, x_l = tiny
  losses = jax.tree.map(lambda *a: jnp.stack(a), *[
      A.loss_params("dpo", beta=20.0), A.loss_params("alpha", beta=20.0, alpha=0.5),
      A.loss_params("alpha_dynamic", beta=20.0, warmup_steps=10)])
  cfg = A.FinetuneConfig(steps=60, batch_size=32, learning_rate=1e-2)
  policy, metrics, snaps = jax.vmap(
      lambda loss: A.finetune(jax.random.key(3), net, schedule, x_w, x_l, loss, cfg,
                              snapshots=3))(losses)
  acc = np.asarray(metrics["pref/implicit_acc"])
  assert acc.shape == (3, 60)
  assert np.all(acc[:, -20:].mean(1) > 0.7)  # every loss learns the preference
  alpha = np.asarray(metrics["pref/alpha"])
  np.testing.assert_allclose(alpha[0], 0.0)
  np.testing.assert_allclose(alpha[1], 0.5)
  np.testing.assert_allclose(alpha[2, :10], 0.9999, rtol=1e-6)  # warm-up at alpha_0
  np.testing.assert_allclose(alpha[2, 10:], 0.9999 * np.asarray(metrics["pref/p_mean"])[2, 10:],
                             rtol=1e-5)
  for a, b in zip(jax.tree.leaves(policy.params), jax.tree.leaves(snaps), strict=True):
    np.testing.assert_array_equal(a, b[:, -1])  # the last snapshot is the result
  # the policy moved away from the reference, which stayed put
  moved = ravel_pytree(jax.tree.map(lambda a: a[0], policy.params))[0]
  assert float(jnp.linalg.norm(moved - ravel_pytree(net.params)[0])) > 1e-2


def test_pair_errors_and_preference_loss_selecting_the_standalone_losses(tiny):
  schedule, net, x_w, x_l = tiny
  params = jax.tree.map(lambda a: a * 1.1, net.params)
  key = jax.random.key(4)

  @jax.jit
  def errors():  # the same t and noise preference_loss draws from `key`
    t, noise = A.sample_pair_noise(key, schedule, 32, 2)
    same = A.pair_errors(net, schedule, x_w[:32], x_w[:32], t, noise, params)
    return t, same, (*A.pair_errors(net, schedule, x_w[:32], x_l[:32], t, noise, params),
                     *A.pair_errors(net, schedule, x_w[:32], x_l[:32], t, noise, net.params))

  t, same, errs = errors()
  assert t.shape == (32,) and int(t.min()) >= 0 and int(t.max()) < schedule.num_steps
  np.testing.assert_array_equal(*same)  # one t and noise per pair: same sample, same error
  with pytest.raises(ValueError, match="x_w and x_l"):
    A.pair_errors(net, schedule, x_w[:8], x_w[:7], t[:8], jnp.zeros((8, 2)))
  run = jax.jit(lambda loss: A.preference_loss(params, net.params, net, schedule, x_w[:32],
                                               x_l[:32], key, jnp.int32(0), loss)[0])
  assert float(run(A.loss_params("dpo", beta=3.0))) == pytest.approx(
      float(A.diffusion_dpo_loss(*errs, beta=3.0)[0]), rel=1e-5)
  assert float(run(A.loss_params("alpha", beta=3.0, alpha=0.4))) == pytest.approx(
      float(A.alpha_dpo_loss(*errs, beta=3.0, alpha=0.4)[0]), rel=1e-5)
  with pytest.raises(TypeError, match="LossParams"):
    A.finetune(key, net, schedule, x_w, x_l, "dpo")
  with pytest.raises(ValueError, match="snapshots"):
    A.finetune(key, net, schedule, x_w, x_l, A.loss_params(), A.FinetuneConfig(steps=10),
               snapshots=3)
