"""TREC library: AdamW's EMA coefficients against optax, the predictor, schedules, measurement."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.dynamics import trec

T = 40


def _problem():
  a = jax.random.normal(jax.random.key(0), (6, 3))
  b = jax.random.normal(jax.random.key(1), (6,))
  params = {"w": jax.random.normal(jax.random.key(2), (3,)), "b": jnp.ones(())}
  # a different target per step, so every step's direction differs
  batches = b[None] + 0.3 * jax.random.normal(jax.random.key(3), (T, 6))
  loss_fn = lambda p, y: jnp.sum((a @ p["w"] + p["b"] - y) ** 2)
  return params, batches, loss_fn


@jax.jit
def _adamw_runs(params, batches, lrs, wd):
  """optax.adamw with Adam's direction u_t recorded alongside, and train_adamw on the same data."""
  _, _, loss_fn = _problem()
  adamw = optax.adamw(lambda count: lrs[count], weight_decay=wd)
  adam = optax.scale_by_adam()  # the direction u_t inside adamw, run alongside

  def step(carry, y):
    p, s, sa = carry
    g = jax.grad(loss_fn)(p, y)
    upd, s = adamw.update(g, s, p)
    u, sa = adam.update(g, sa)
    return (optax.apply_updates(p, upd), s, sa), u

  (final, _, _), us = jax.lax.scan(step, (params, adamw.init(params), adam.init(params)), batches)
  mine, losses = trec.train_adamw(loss_fn, params, batches, lrs, wd)
  return final, us, mine, losses


def test_coefficients_reproduce_optax_adamw_exactly():
  params, batches, _ = _problem()
  wd = 2.0
  for kind in ("cosine", "wsd"):  # same shapes: one compile
    lrs = trec.lr_schedule(kind, T, 0.05, warmup_fraction=0.1, decay_fraction=0.3)
    final, us, mine, losses = _adamw_runs(params, batches, lrs, wd)
    c = np.asarray(trec.adamw_ema_coefficients(lrs, wd), np.float64)
    shrink = np.prod(1.0 - np.asarray(lrs, np.float64) * wd)
    for k in params:
      u = np.asarray(us[k], np.float64)
      pred = np.asarray(params[k], np.float64) * shrink - np.tensordot(c, u, axes=1)
      np.testing.assert_allclose(final[k], pred, rtol=1e-5, atol=1e-6)
      assert np.abs(np.asarray(final[k]) - np.asarray(params[k])).max() > 1e-2  # it did move
      # and train_adamw is that same optax.adamw loop
      np.testing.assert_allclose(mine[k], final[k], rtol=1e-6, atol=1e-7)
    assert losses.shape == (T,)


def test_coefficients_closed_forms():
  lrs = jnp.full((10,), 0.1)
  np.testing.assert_allclose(trec.adamw_ema_coefficients(lrs, 2.0),
                             0.1 * 0.8 ** np.arange(9, -1, -1), rtol=1e-6)
  ramp = jnp.linspace(0.0, 0.2, 7)
  np.testing.assert_allclose(trec.adamw_ema_coefficients(ramp, 0.0), ramp)
  assert trec.ema_timescale(0.01, 0.5) == pytest.approx(200.0)
  assert trec.ema_timescale(0.01, 0.0) == float("inf")


def test_batch_weights_with_momentum_match_the_double_sum():
  lrs = trec.lr_schedule("cosine", 25, 0.1, warmup_fraction=0.2)
  b1, wd = 0.8, 1.5
  c = np.asarray(trec.adamw_ema_coefficients(lrs, wd), np.float64)
  brute = [sum(c[s] * (1 - b1) * b1 ** (s - t) / (1 - b1 ** (s + 1)) for s in range(t, 25))
           for t in range(25)]
  np.testing.assert_allclose(trec.batch_weights(lrs, wd, b1=b1), brute, rtol=1e-5)
  np.testing.assert_allclose(trec.batch_weights(lrs, wd), c, rtol=1e-6)
  # forgetting adds to the decay in the product
  np.testing.assert_allclose(trec.batch_weights(lrs, wd, forgetting=0.5),
                             trec.adamw_ema_coefficients(lrs, wd + 0.5), rtol=1e-6)


def test_predictor_minimum_and_window():
  n = 200
  lrs = trec.lr_schedule("wsd", n, 0.01, warmup_fraction=0.05, decay_fraction=0.2)
  wd = 1.0 / (0.3 * n * 0.01)  # tau = 0.3 T
  pred = np.asarray(trec.predict_trec(lrs, wd))
  w = np.asarray(trec.adamw_ema_coefficients(lrs, wd))
  assert pred.min() == pytest.approx(-1.0) and pred.max() <= 0.0
  m = trec.predicted_minimum_step(lrs, wd)
  assert m == np.argmax(w) == np.argmin(pred)
  assert 0.8 * n <= m < n - 1  # inside the decay: lr still large, little decay after it
  start = trec.best_window(lrs, wd, 20)
  brute = max(range(n - 19), key=lambda i: w[i:i + 20].sum())
  assert start == brute
  assert trec.best_window(lrs, wd, n) == 0 and trec.best_window(lrs, wd, 1) == m
  # constant lr: the last step is remembered best; more forgetting moves nothing there
  flat = jnp.full((50,), 0.01)
  assert trec.predicted_minimum_step(flat, 1.0) == 49
  # stronger forgetting moves a WSD window later
  assert trec.best_window(lrs, wd, 20, forgetting=5 * wd) > start


def test_fit_forgetting_recovers_the_rate():
  n = 300
  lrs = trec.lr_schedule("cosine", n, 0.01, warmup_fraction=0.05)
  wd, phi = 0.5, 2.0
  rng = np.random.default_rng(0)
  curve = 3.0 - 0.2 * np.asarray(trec.batch_weights(lrs, wd, forgetting=phi)) / 0.01
  noisy = curve + 0.02 * rng.standard_normal(n)
  cands = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
  assert trec.fit_forgetting(noisy, lrs, wd, cands, window=10) == 2.0
  assert trec.fit_forgetting(curve, lrs, wd, cands) == 2.0


def test_moving_average():
  x = np.arange(10.0)
  np.testing.assert_allclose(trec.moving_average(x, 3)[1:-1], x[1:-1])
  np.testing.assert_allclose(trec.moving_average(x, 3)[[0, -1]], [0.5, 8.5])
  np.testing.assert_allclose(trec.moving_average(np.ones(7), 4), np.ones(7))
  np.testing.assert_allclose(trec.moving_average(x, 1), x)


def test_measured_curve_is_the_loss_of_the_final_weights_per_batch():
  params, batches, loss_fn = _problem()
  expected = [float(loss_fn(params, y)) for y in batches]
  np.testing.assert_allclose(trec.training_reevaluation_curve(params, batches, loss_fn),
                             expected, rtol=1e-5)
  np.testing.assert_allclose(trec.training_reevaluation_curve(params, batches, loss_fn, chunk=16),
                             expected, rtol=1e-5)


def test_train_adamw_vmaps_over_configurations():
  params, batches, loss_fn = _problem()
  lrs = jnp.stack([trec.lr_schedule(k, T, 0.05) for k in ("constant", "cosine")])
  wds = jnp.array([0.0, 3.0])
  finals, _ = jax.jit(jax.vmap(lambda l, w: trec.train_adamw(loss_fn, params, batches, l, w)))(
      lrs, wds)
  one, _ = trec.train_adamw(loss_fn, params, batches, lrs[1], 3.0)
  np.testing.assert_allclose(finals["w"][1], one["w"], rtol=1e-5, atol=1e-6)
  assert not np.allclose(finals["w"][0], finals["w"][1])


@pytest.mark.parametrize("lrs, wd, match", [
    (jnp.ones((2, 3)) * 0.1, 0.0, "learning_rates must be a non-empty 1-D"),
    (jnp.zeros((0,)), 0.0, "learning_rates must be a non-empty 1-D"),
    (jnp.array([0.1, -0.1]), 0.0, "finite and >= 0"),
    (jnp.array([0.1, jnp.nan]), 0.0, "finite and >= 0"),
    (jnp.array([0.1, 0.2]), -1.0, "weight_decay must be a finite scalar >= 0"),
    (jnp.array([0.1, 0.2]), 5.0, "must be < 1"),
])
def test_bad_inputs(lrs, wd, match):
  with pytest.raises(ValueError, match=match):
    trec.adamw_ema_coefficients(lrs, wd)


def test_bad_options():
  lrs = jnp.full((10,), 0.01)
  with pytest.raises(ValueError, match="b1"):
    trec.batch_weights(lrs, 0.1, b1=1.0)
  with pytest.raises(ValueError, match="forgetting"):
    trec.predict_trec(lrs, 0.1, forgetting=-1.0)
  with pytest.raises(ValueError, match="length"):
    trec.best_window(lrs, 0.1, 11)
  with pytest.raises(ValueError, match="window"):
    trec.moving_average(np.ones(5), 0)
