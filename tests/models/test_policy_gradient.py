"""GRPO / PPO pieces on hand-computed cases, and a policy that learns from a reward."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.models import policy_gradient as pg
from jaxlab.models import transformer


def test_group_advantages_by_hand():
  adv = pg.group_advantages(jnp.array([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]]))
  s = np.sqrt(1 / 3)  # sample std of (1, 0, 0, 1)
  np.testing.assert_allclose(adv[0], np.array([0.5, -0.5, -0.5, 0.5]) / (s + 1e-6), rtol=1e-6)
  np.testing.assert_allclose(adv[1], 0.0)  # a group that all scores the same teaches nothing
  with pytest.raises(ValueError, match="group axis"):
    pg.group_advantages(jnp.ones((3, 1)))


def test_returns_to_go_by_hand():
  g = pg.returns_to_go(jnp.array([[1.0, 0.0, 2.0]]), gamma=0.5)
  np.testing.assert_allclose(g, [[1.0 + 0.5 * 0.0 + 0.25 * 2.0, 0.0 + 0.5 * 2.0, 2.0]])


def test_clipped_loss_dual_clip_kl_and_token_mean_by_hand():
  logp = jnp.log(jnp.array([[1.5, 0.5, 5.0, 0.9]]))  # ratios against old log-probs of 0
  old = jnp.zeros((1, 4))
  adv = jnp.array([[1.0, -1.0, -1.0, 2.0]])
  mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])  # the last token is not trained
  loss, m = pg.clipped_pg_loss(logp, old, adv, mask, kl_coef=0.0)
  # token 0: A>0, ratio 1.5 -> clipped at 1.2: -1.2; token 1: A<0, ratio 0.5 -> max(0.5, 0.8)
  # = 0.8; token 2: A<0, ratio 5 -> max(5, 1.2) = 5, dual clip min(5, 3) = 3
  assert float(loss) == pytest.approx((-1.2 + 0.8 + 3.0) / 3, rel=1e-6)
  assert float(m["clip_frac"]) == pytest.approx(2 / 3)
  no_dual, _ = pg.clipped_pg_loss(logp, old, adv, mask, kl_coef=0.0, dual_clip=None)
  assert float(no_dual) == pytest.approx((-1.2 + 0.8 + 5.0) / 3, rel=1e-6)
  # k3 KL: exp(r) - r - 1 with r = ref - logp
  ref = jnp.log(jnp.array([[1.0, 1.0, 1.0, 1.0]]))
  r = np.log([1 / 1.5, 1 / 0.5, 1 / 5.0])
  _, m = pg.clipped_pg_loss(logp, old, adv, mask, ref, kl_coef=0.5)
  assert float(m["kl"]) == pytest.approx(np.mean(np.exp(r) - r - 1), rel=1e-5)
  # at ratio 1 the gradient is -A / (number of trained tokens) per token
  grad = jax.grad(lambda lp: pg.clipped_pg_loss(lp, lp, adv, mask, kl_coef=0.0)[0])(old)
  np.testing.assert_allclose(grad, -adv * mask / 3, rtol=1e-6)


def test_sample_groups_mask_and_grpo_learns_a_rewarded_token():
  cfg = transformer.TransformerConfig(vocab_size=4, d_model=16, num_heads=2, num_layers=1,
                                      seq_len=8)
  net = transformer.create(cfg, jax.random.key(0))
  prompts = jnp.array([[1], [2]])
  groups = pg.sample_groups(net, prompts, jax.random.key(1), group_size=8, max_new_tokens=3,
                            eos_id=3)
  assert groups.tokens.shape == (16, 4)
  np.testing.assert_array_equal(groups.tokens[:8, 0], 1)
  lengths = np.asarray(groups.lengths)
  np.testing.assert_array_equal(np.asarray(groups.mask).sum(1), lengths)
  assert np.all(np.asarray(groups.mask)[:, 0] == 1)  # position 0 predicts the first new token

  apply = lambda p, x: net(x, params=p)
  logp_fn = functools.partial(pg.token_log_probs, apply)
  opt = optax.adam(3e-2)

  @jax.jit
  def iteration(params, opt_state, key):
    k_sample, k_update = jax.random.split(key)
    g = pg.sample_groups(net.replace(params=params), prompts, k_sample, group_size=8,
                         max_new_tokens=1)
    reward = (g.tokens[:, -1] == 2).astype(jnp.float32)  # token 2 is right
    adv = pg.group_advantages(reward.reshape(2, 8)).reshape(-1)
    batch = pg.make_batch(logp_fn, params, net.params, g, adv)
    params, opt_state, metrics = pg.pg_update(logp_fn, opt, params, opt_state, batch,
                                              minibatch_size=8, key=k_update)
    return params, opt_state, reward.mean(), metrics

  params, opt_state = net.params, opt.init(net.params)
  first = None
  for i in range(12):
    params, opt_state, reward, metrics = iteration(params, opt_state, jax.random.key(10 + i))
    if i == 0:
      first = metrics
  np.testing.assert_allclose(first["ratio"][0], 1.0, rtol=1e-5)  # first step: on-policy
  p2 = jnp.exp(logp_fn(params, jnp.array([[1, 2], [2, 2]])))[:, 0]
  p2_init = jnp.exp(logp_fn(net.params, jnp.array([[1, 2], [2, 2]])))[:, 0]
  assert np.all(np.asarray(p2) > 0.8) and np.all(np.asarray(p2_init) < 0.5), (p2, p2_init)
