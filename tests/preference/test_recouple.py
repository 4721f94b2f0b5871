"""ReCouPLe: the reason projection, each loss term on hand-computed values, and training."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn import Net
from jaxlab.preference import recouple as rc

softplus = lambda x: math.log1p(math.exp(x))


def test_projection_hand_values_orthogonality_and_reconstruction():
  z = jnp.array([[[3.0, 4.0], [1.0, -2.0]]])  # (B=1, T=2, D=2)
  e = jnp.array([[2.0, 0.0]])  # not unit length: the projection divides by ||e||^2
  z_par, z_perp = jax.jit(rc.project_onto_reason)(z, e)
  np.testing.assert_allclose(z_par, [[[3.0, 0.0], [1.0, 0.0]]], atol=1e-6)
  np.testing.assert_allclose(z_perp, [[[0.0, 4.0], [0.0, -2.0]]], atol=1e-6)

  rng = np.random.default_rng(0)
  z, e = rng.standard_normal((5, 7, 6)), rng.standard_normal((5, 6))
  project = jax.jit(rc.project_onto_reason)
  z_par, z_perp = project(z, e)
  np.testing.assert_allclose(z_par + z_perp, z, atol=1e-6)
  np.testing.assert_allclose(np.einsum("btd,bd->bt", z_perp, e), 0.0, atol=1e-5)
  # z_par is parallel to e: its component orthogonal to e vanishes
  z_par = np.asarray(z_par)
  cos = np.einsum("btd,bd->bt", z_par, e) / (np.linalg.norm(z_par, axis=-1)
                                             * np.linalg.norm(e, axis=-1)[:, None])
  np.testing.assert_allclose(np.abs(cos), 1.0, atol=1e-5)
  # scale of the reason does not matter
  np.testing.assert_allclose(project(z, 3.0 * e)[0], z_par, atol=1e-5)


def test_decomposed_returns_hand_values():
  z = jnp.array([[[1.0, 2.0], [3.0, -1.0]]])
  e, w = jnp.array([[1.0, 0.0]]), jnp.array([[1.0, 1.0]])
  r_par, r_perp = jax.jit(rc.decomposed_returns)(z, e, w)
  np.testing.assert_allclose(r_par, [4.0])  # <(1,0),w> + <(3,0),w>
  np.testing.assert_allclose(r_perp, [1.0])  # <(0,2),w> + <(0,-1),w>
  np.testing.assert_allclose(jax.jit(rc.segment_returns)(z, w), [5.0])


def test_recouple_loss_terms_hand_values():
  # one step, D = 2, reason e = (1, 0), task w = (1, 1):
  # tau_a: z = (1, 2) -> R_par 1, R_perp 2; tau_b: z = (3, 1) -> R_par 3, R_perp 1
  # Delta R_par = 2, Delta R_perp = -1; pair 0 prefers b (y = 1), pair 1 prefers a (y = 0)
  z_a = jnp.array([[[1.0, 2.0]], [[1.0, 2.0]]])
  z_b = jnp.array([[[3.0, 1.0]], [[3.0, 1.0]]])
  e = jnp.array([[1.0, 0.0]] * 2)
  w = jnp.array([[1.0, 1.0]] * 2)
  y = jnp.array([1.0, 0.0])
  loss, info = jax.jit(rc.recouple_loss)(z_a, z_b, e, w, y)
  bt = (softplus(-1.0) + softplus(1.0)) / 2  # logit Delta R = 1
  diff = (softplus(-3.0) + softplus(3.0)) / 2  # logit Delta R_par - Delta R_perp = 3
  ratio = 0.0 + (0.75 - 0.4)  # shares 1/3 (under the cap) and 3/4, each a batch mean
  np.testing.assert_allclose(info["recouple/bt"], bt, rtol=1e-6)
  np.testing.assert_allclose(info["recouple/diff"], diff, rtol=1e-6)
  np.testing.assert_allclose(info["recouple/ratio"], ratio, rtol=1e-6)
  np.testing.assert_allclose(loss, bt + diff + 0.1 * ratio, rtol=1e-6)
  assert float(info["recouple/accuracy"]) == 0.5 and float(info["recouple/aligned_accuracy"]) == 0.5
  # the total-return term is the plain Bradley-Terry loss
  bt_only, bt_info = jax.jit(rc.bt_loss)(z_a, z_b, w, y)
  np.testing.assert_allclose(bt_only, bt, rtol=1e-6)
  assert float(bt_info["bt/accuracy"]) == 0.5
  # lambda = 0 drops the penalty; kappa = 0.8 leaves both shares under the cap
  variants = jax.jit(lambda *a: (rc.recouple_loss(*a, ratio_weight=0.0)[0],
                                rc.recouple_loss(*a, ratio_threshold=0.8)[0]))
  np.testing.assert_allclose(variants(z_a, z_b, e, w, y), [bt + diff] * 2, rtol=1e-6)


def test_ratio_penalty_hinge():
  r_par = jnp.array([1.0, 3.0, 0.0, -3.0, 2.0])
  r_perp = jnp.array([2.0, 1.0, 5.0, 1.0, 3.0])  # shares 1/3, 3/4, 0, 3/4, 2/5
  penalty = jax.jit(rc.ratio_penalty)
  np.testing.assert_allclose(penalty(r_par, r_perp), 0.7 / 5, rtol=1e-6)
  np.testing.assert_allclose(penalty(r_par, r_perp, 0.8), 0.0)
  np.testing.assert_allclose(penalty(r_par, r_perp, 0.0), (1 / 3 + 0.75 + 0 + 0.75 + 0.4) / 5,
                             rtol=1e-6)
  assert float(penalty(jnp.zeros(5), jnp.zeros(5))) == 0.0  # eps keeps it finite


def test_gradients():
  rng = np.random.default_rng(3)
  z_a, z_b, e, w = (rng.standard_normal(s) for s in ((4, 3, 5), (4, 3, 5), (4, 5), (4, 5)))
  y = jnp.array([1.0, 0.0, 1.0, 0.5])
  grads = jax.jit(jax.grad(lambda a, b: rc.recouple_loss(a, b, e, w, y)[0], argnums=(0, 1)))(
      z_a, z_b)
  for g in grads:
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).max()) > 0

  # The two BCE terms cancel in Delta R_perp at zero: an orthogonal part helps one and
  # hurts the other by the same amount to first order; Bradley-Terry alone would use it.
  e2, w2 = jnp.array([[1.0, 0.0]] * 3), jnp.array([[1.0, 1.0]] * 3)
  za = jnp.array([[[0.3, 1.0]], [[-1.0, 2.0]], [[2.0, -0.5]]])  # same orthogonal coordinate
  zb = jnp.array([[[1.5, 1.0]], [[0.5, 2.0]], [[-1.0, -0.5]]])  # as its partner: dR_perp = 0
  y2 = jnp.array([1.0, 1.0, 0.0])

  def terms(delta):  # delta moves R_perp of tau_b only
    _, info = rc.recouple_loss(za, zb.at[:, :, 1].add(delta), e2, w2, y2)
    return info["recouple/bt"] + info["recouple/diff"], info["recouple/bt"]

  g_both, g_bt = jax.jit(jax.jacobian(terms))(0.0)
  np.testing.assert_allclose(g_both, 0.0, atol=1e-6)
  assert float(g_bt) < -0.05


def _toy_data(seed, n=256, t=4, d=3):
  """Feature 0 decides the preference; the reason is the first axis, the task (1, .5, 0)."""
  x = np.random.default_rng(seed).standard_normal((2, n, t, 2)).astype(np.float32)
  labels = (x[1, :, :, 0].sum(-1) > x[0, :, :, 0].sum(-1)).astype(np.float32)
  reason = np.zeros((n, d), np.float32)
  reason[:, 0] = 1.0
  task = reason.copy()
  task[:, 1] = 0.5
  return rc.PreferenceData(x[0], x[1], labels, reason, task)


def test_fit_learns_a_toy_preference():
  # (Bradley-Terry training runs end to end in tests/experiments/test_recouple.py.)
  cfg = rc.RecoupleConfig(method="recouple", hidden_dims=(16,), embed_dim=3, lr=1e-2,
                          batch_size=64, steps=120, log_every=40)
  graphdef, params = rc.init_encoder(jax.random.key(0), 2, cfg)
  data, test = _toy_data(1), _toy_data(2)
  rc.check_data(data, cfg)
  accuracy = jax.jit(lambda p: rc.preference_accuracy(graphdef, p, test.segments_a,
                                                      test.segments_b, test.tasks, test.labels))
  before = accuracy(params)
  # gradients flow through the nnx encoder inside the jitted scan
  params, losses = jax.jit(rc.make_fit(cfg, graphdef))(params, jax.random.key(3), data)
  after = accuracy(params)
  assert losses.shape == (3,) and float(losses[-1]) < float(losses[0])
  assert float(after) > 0.9 and float(after) > float(before)


def test_encoder_is_a_net_and_the_older_pair_form_gives_the_same_values():
  cfg = rc.RecoupleConfig(method="bt", hidden_dims=(8,), embed_dim=3, batch_size=16, steps=4,
                          log_every=2)
  encoder = rc.init_encoder(jax.random.key(0), 2, cfg)
  assert isinstance(encoder, Net)
  graphdef, params = encoder  # the older (graphdef, params) pair
  data = _toy_data(3, n=12)
  args = (data.segments_a, data.segments_b, data.tasks, data.labels)
  np.testing.assert_array_equal(rc.embed(encoder, data.segments_a),
                                rc.embed(graphdef, params, data.segments_a))
  np.testing.assert_array_equal(rc.predicted_returns(encoder, data.segments_a, data.tasks),
                                rc.predicted_returns(graphdef, params, data.segments_a,
                                                     data.tasks))
  acc = rc.preference_accuracy(encoder, *args)
  assert float(acc) == float(rc.preference_accuracy(graphdef, params, *args))
  # per block of pairs (e.g. per task): the blocks' mean is the overall accuracy
  per_block = rc.preference_accuracy(encoder, *args, num_tasks=3)
  assert per_block.shape == (3,)
  np.testing.assert_allclose(per_block.mean(), acc, rtol=1e-6)
  correct = np.asarray(rc.predicted_returns(encoder, data.segments_b, data.tasks)
                       - rc.predicted_returns(encoder, data.segments_a, data.tasks)) > 0
  np.testing.assert_allclose(per_block, (correct == (data.labels > 0.5)).reshape(3, 4).mean(1))
  with pytest.raises(ValueError, match="num_tasks"):
    rc.preference_accuracy(encoder, *args, num_tasks=5)
  # make_fit takes the Net (or its graphdef) and fits a Net or bare params identically
  trained, losses = jax.jit(rc.make_fit(cfg, encoder))(encoder, jax.random.key(1), data)
  params_old, losses_old = jax.jit(rc.make_fit(cfg, graphdef))(params, jax.random.key(1), data)
  assert isinstance(trained, Net) and losses.shape == (2,)
  np.testing.assert_array_equal(losses, losses_old)
  for a, b in zip(jax.tree.leaves(trained.params), jax.tree.leaves(params_old), strict=True):
    np.testing.assert_array_equal(a, b)


def test_bad_input():
  with pytest.raises(ValueError, match="method"):
    rc.RecoupleConfig(method="dpo")
  with pytest.raises(ValueError, match="ratio_threshold"):
    rc.RecoupleConfig(ratio_threshold=1.5)
  with pytest.raises(ValueError, match="steps"):
    rc.RecoupleConfig(steps=0)
  with pytest.raises(ValueError, match="hidden_dims"):
    rc.RecoupleConfig(hidden_dims=())
  with pytest.raises(TypeError, match="config"):
    rc.init_encoder(jax.random.key(0), 2, {"method": "bt"})
  with pytest.raises(ValueError, match="in_dim"):
    rc.init_encoder(jax.random.key(0), 0, rc.RecoupleConfig())
  z = np.zeros((2, 3, 4))
  with pytest.raises(ValueError, match="reason"):
    rc.project_onto_reason(z, jnp.ones((2, 5)))
  with pytest.raises(ValueError, match="task"):
    rc.decomposed_returns(z, jnp.ones((2, 4)), jnp.ones((3, 4)))
  with pytest.raises(ValueError, match="labels"):
    rc.bt_loss(z, z, jnp.ones((2, 4)), jnp.ones(3))
  with pytest.raises(ValueError, match="z_a and z_b"):
    rc.recouple_loss(z, jnp.zeros((2, 4, 4)), jnp.ones((2, 4)), jnp.ones((2, 4)), jnp.ones(2))
  with pytest.raises(ValueError, match="r_par and r_perp"):
    rc.ratio_penalty(jnp.ones(2), jnp.ones(3))
  data = _toy_data(0, n=8)
  with pytest.raises(ValueError, match="embed_dim"):
    rc.check_data(data, rc.RecoupleConfig(embed_dim=4))
  with pytest.raises(ValueError, match="labels"):
    rc.check_data(data._replace(labels=np.ones(7)), rc.RecoupleConfig(embed_dim=3))
