"""Expert Divergence Learning: JSD against scipy, the loss on hand-built router
probabilities, masking of absent domains, mutual information, gradients to the router."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from jaxlab.lm import expert_divergence as ed
from jaxlab.models import transformer as tfm

EPS = ed.EPS


def _probs(rows):
  """``(L=1, B, T=1, E)`` router probabilities, one distribution per sequence."""
  return jnp.asarray(rows, jnp.float32)[None, :, None, :]


def test_jsd_matches_scipy_and_its_bounds():
  key_p, key_q = jax.random.split(jax.random.key(0))
  p = jax.random.dirichlet(key_p, jnp.ones(6), (5,))
  q = jax.random.dirichlet(key_q, jnp.full(6, 0.3), (5,))
  p = p.at[0, :3].set(0.0)  # zeros: 0 log 0 = 0
  p = p / p.sum(-1, keepdims=True)
  jsd = jax.jit(ed.jensen_shannon)
  ours = np.asarray(jsd(p, q))
  ref = np.array([jensenshannon(a, b) ** 2 for a, b in zip(np.asarray(p, np.float64),
                                                              np.asarray(q, np.float64),
                                                              strict=True)])
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)
  # disjoint supports: log 2; identical: 0 (one call, same shapes as above)
  edge = np.asarray(jsd(p.at[0].set(jnp.array([0.5, 0.5, 0, 0, 0, 0])).at[1].set(q[1]),
                        q.at[0].set(jnp.array([0, 0, 0.25, 0.75, 0, 0]))))
  assert edge[0] == pytest.approx(math.log(2), rel=1e-6) and abs(edge[1]) < 1e-7


def test_loss_on_hand_built_router_probabilities():
  loss_fn = jax.jit(ed.expert_divergence_loss, static_argnums=2)
  same = _probs([[0.25] * 4] * 4)  # every domain routes alike
  loss, info = loss_fn(same, jnp.array([0, 1, 2, 3]), 4)
  assert float(loss) == pytest.approx(-math.log(EPS), rel=1e-5) and float(info["ed/pairs"]) == 6
  # domain j's sequences put all their mass on expert j: every pair disjoint
  eye = _probs(np.eye(4).tolist() * 2)
  loss, info = loss_fn(eye, jnp.array([0, 1, 2, 3] * 2), 4)
  assert float(loss) == pytest.approx(-math.log(math.log(2) + EPS), rel=1e-5)
  assert float(info["ed/jsd"]) == pytest.approx(math.log(2), rel=1e-5)
  # sequence mean, then domain mean: two sequences of domain 0 average to uniform over
  # experts 0-1; domain 1 sits on expert 2; one pair, JSD(1/2,1/2,0 || 0,0,1) = log 2
  seqs = jnp.asarray([[[1, 0, 0], [1, 0, 0]], [[0, 1, 0], [0, 1, 0]], [[0, 0, 1], [0, 0, 1]]],
                     jnp.float32)[None]
  loss, info = loss_fn(seqs, jnp.array([0, 0, 1]), 2)
  assert float(info["ed/jsd"]) == pytest.approx(math.log(2), rel=1e-5)
  # averaged over layers: a second layer with identical domains
  two = jnp.concatenate([eye, same[:, :1].repeat(8, 1)], 0)
  loss, _ = loss_fn(two, jnp.array([0, 1, 2, 3] * 2), 4)
  expected = 0.5 * (-math.log(math.log(2) + EPS) - math.log(EPS))
  assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_absent_domains_are_masked():
  loss_fn = jax.jit(ed.expert_divergence_loss, static_argnums=2)
  # 8 labels declared, only 0 and 5 in the batch: one pair, C(2, 2) = 1
  probs = _probs([[1, 0, 0, 0], [0, 0, 0, 1], [1, 0, 0, 0]])
  loss, info = loss_fn(probs, jnp.array([0, 5, 0]), 8)
  assert float(info["ed/pairs"]) == 1
  assert float(loss) == pytest.approx(-math.log(math.log(2) + EPS), rel=1e-5)
  dist, present = ed.domain_router_distributions(probs, jnp.array([0, 5, 0]), 8)
  assert np.asarray(present).tolist() == [i in (0, 5) for i in range(8)]
  assert float(jnp.abs(dist[0, 1]).sum()) == 0.0
  # one domain only: no pair, no loss
  loss, info = loss_fn(probs, jnp.array([3, 3, 3]), 8)
  assert float(loss) == 0.0 and float(info["ed/pairs"]) == 0
  with pytest.raises(ValueError, match="router_probs must be"):
    ed.expert_divergence_loss(probs[0], jnp.array([0, 5, 0]), 8)
  with pytest.raises(ValueError, match="eps must be"):
    ed.expert_divergence_loss(probs, jnp.array([0, 5, 0]), 8, eps=0.0)


def test_mutual_information_and_routing_metrics():
  joint = np.array([[0.3, 0.1], [0.1, 0.5]])
  px, py = joint.sum(1), joint.sum(0)
  ref = float(np.sum(joint * np.log(joint / np.outer(px, py))))
  assert float(ed.mutual_information(jnp.asarray(joint))) == pytest.approx(ref, rel=1e-5)
  assert float(ed.mutual_information(jnp.full((3, 4), 2.0))) == pytest.approx(0.0, abs=1e-7)
  # 4 domains each sent wholly to its own pair of 8 experts (top-2): I(D; E) = log 4,
  # the load is uniform over the 8 experts, every pair of domains is disjoint
  rows = np.zeros((4, 8))
  for d in range(4):
    rows[d, 2 * d:2 * d + 2] = [0.6, 0.4]
  metrics = jax.jit(ed.routing_metrics, static_argnums=(2, 3))
  m = metrics(_probs(rows), jnp.arange(4), 4, 2)
  assert float(m["mi"]) == pytest.approx(math.log(4), rel=1e-5)
  assert float(m["mi_soft"]) == pytest.approx(math.log(4), rel=1e-5)
  assert float(m["load_entropy"]) == pytest.approx(math.log(8), rel=1e-5)
  assert float(m["jsd"]) == pytest.approx(math.log(2), rel=1e-5)
  # every domain routes alike: no information, no divergence
  m = metrics(_probs([rows[0]] * 4), jnp.arange(4), 4, 2)
  assert float(m["mi"]) == pytest.approx(0.0, abs=1e-6) and float(m["jsd"]) < 1e-7
  assert float(m["load_entropy"]) == pytest.approx(math.log(2), rel=1e-5)


def test_gradient_reaches_the_router_and_beta_zero_is_the_baseline():
  cfg = tfm.TransformerConfig(vocab_size=12, d_model=16, num_heads=2, num_layers=1, seq_len=8,
                              num_experts=4, experts_per_token=2, mlp_ratio=1)
  net = tfm.create(cfg, jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (8, 9), 0, 12)
  domains = jnp.arange(8) % 4

  @jax.jit
  def grads(params, beta):
    fn = lambda p: ed.edl_loss(net.replace(params=p), tokens, domains, num_domains=4,  # noqa: E731
                               beta=beta)
    (total, info), g = jax.value_and_grad(fn, has_aux=True)(params)
    return g, {**info, "total": total}

  g1, info = grads(net.params, 1.0)
  g0, info0 = grads(net.params, 0.0)
  router = lambda g: g["blocks"][0]["moe"]["router"]["kernel"][...]  # noqa: E731
  diff = router(g1) - router(g0)  # the L_ED part of the router's gradient
  assert float(jnp.abs(diff).max()) > 0 and bool(jnp.all(jnp.isfinite(diff)))
  assert float(info["ed/loss"]) > 0 and 0 < float(info["ed/jsd"]) < math.log(2)
  # the total at beta = 0 is CE + alpha * Switch loss; at beta = 1 it adds L_ED
  assert float(info0["total"]) == pytest.approx(
      float(info0["lm/ce"] + 0.01 * info0["aux/load_balance"]), rel=1e-6)
  assert float(info["total"] - info0["total"]) == pytest.approx(float(info["ed/loss"]), rel=1e-5)
  sample = ed.domain_sampler(tokens[:8].reshape(4, 2, 9), domains.reshape(2, 4).T, 3)
  batch_tokens, labels = sample(jax.random.key(3), 0)
  assert batch_tokens.shape == (12, 9) and np.asarray(labels).tolist() == [0] * 3 + [1] * 3 + [
      2] * 3 + [3] * 3
