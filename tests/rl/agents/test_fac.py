"""FAC's critic penalty by hand: its value, its three thresholds and its stop-gradients.

The behavior log-density of the actor's actions is replaced by hand-picked numbers
(``behavior_log_prob`` monkeypatched), so every weight ``w = clip(1 - beta/eps, 0, 1)``
below is known in closed form; the critic and actor are the agent's own small networks.
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl.agents import FACAgent, FACConfig

B, OBS, ACT = 4, 3, 2
SMALL = dict(hidden_dims=(8,), batch_size=B, flow_steps=2)  # small and fast: the math is the same
LOG_PROB = np.array([0.0, -1.0, 2.0, -3.0], np.float32)  # cached log beta(a_data | s)
RATIOS = np.array([0.5, 0.25, 2.0, 0.75])  # beta(a_pi|s) / eps, chosen per row
W = np.array([0.5, 0.75, 0.0, 0.25])  # 1 - ratio, clipped to [0, 1]


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  batch = {"observations": rng.normal(size=(B, OBS)), "actions": rng.uniform(-1, 1, (B, ACT)),
           "rewards": -np.ones(B), "next_observations": rng.normal(size=(B, OBS)),
           "masks": np.ones(B), "log_prob": LOG_PROB}
  return {k: jnp.asarray(v, jnp.float32) for k, v in batch.items()}


def _agent(**config):
  return FACAgent.create(0, np.zeros((1, OBS)), np.zeros((1, ACT)), FACConfig(**SMALL, **config))


def _params(agent):
  return {"critic": agent.critic.params, "actor": agent.actor.params}


KEYS = tuple(jax.random.split(jax.random.key(5), 4))  # (k_next, k_pi, k_actor, k_div)


def _actor_actions(agent, obs):
  """a_pi = clip(pi(s, z)), z ~ N(0, I) from the penalty's key (the second of four)."""
  z = jax.random.normal(KEYS[1], (B, ACT))
  return jnp.clip(agent.actor(obs, z), -1, 1)


# log eps per threshold: the transition's own cached density, the batch minimum, or the
# dataset minimum (log_prob_min, set here to -7, below every batch value).
THRESHOLDS = {"batch_adaptive": LOG_PROB, "batch_min": np.full(B, -3.0),
              "dataset_min": np.full(B, -7.0)}


@pytest.mark.parametrize("threshold", sorted(THRESHOLDS))
def test_penalty_value_by_hand(threshold, monkeypatch):
  """alpha * mean_i w_i Q(s_i, a_pi,i), with w from the chosen threshold and Q on a_pi."""
  log_eps = THRESHOLDS[threshold]
  lp_pi = jnp.asarray(log_eps + np.log(RATIOS), jnp.float32)
  seen = {}

  def fake_log_prob(self, obs, actions, key=None):
    seen["actions"] = actions
    return lp_pi

  monkeypatch.setattr(FACAgent, "behavior_log_prob", fake_log_prob)
  agent = _agent(alpha=3.0, threshold=threshold).replace(log_prob_min=jnp.float32(-7.0))
  batch = _batch()
  _, info = agent.losses(_params(agent), batch, KEYS)  # eager: `seen` keeps a concrete array

  a_pi = _actor_actions(agent, batch["observations"])
  np.testing.assert_allclose(seen["actions"], a_pi, rtol=1e-6)  # density of a_pi, not a_data
  q_pi = np.asarray(agent.critic(batch["observations"], a_pi)).mean(axis=0)  # ensemble mean
  np.testing.assert_allclose(info["penalty/w_mean"], W.mean(), rtol=1e-5)
  np.testing.assert_allclose(info["critic/penalty"], 3.0 * np.mean(W * q_pi), rtol=1e-5)
  # The other two thresholds give other weights on the same log-densities: the choice matters.
  for other in THRESHOLDS:
    if other != threshold:
      w_other = np.clip(1 - np.exp(np.asarray(lp_pi) - THRESHOLDS[other]), 0, 1)
      assert not np.allclose(w_other, W)


def test_thresholds_on_hand_built_log_densities():
  batch = _batch()
  for kind, want in THRESHOLDS.items():
    agent = _agent(threshold=kind).replace(log_prob_min=jnp.float32(-7.0))
    np.testing.assert_array_equal(agent._threshold(batch), want)


def test_log_weight_by_hand():
  """The "log" family: w = 1 - log(1 + r^tau) / log 2, r = beta / eps (r = 1 gives 0)."""
  agent = _agent(weight="log", weight_tau=0.5)
  w = agent.penalty_weight(jnp.log(jnp.asarray(RATIOS, jnp.float32)), jnp.zeros(B))
  want = [1 - math.log1p(r**0.5) / math.log(2) for r in RATIOS]
  np.testing.assert_allclose(w, np.clip(want, 0, 1), atol=1e-6)


def _all_zero(tree):
  return all(not np.any(np.asarray(x)) for x in jax.tree.leaves(tree))


@pytest.fixture(scope="module")
def info_grads():
  """d info[name] / d {"critic", "actor"} for every scalar the losses report (one compile)."""
  agent = _agent(alpha=1.0)
  batch = dict(_batch(), log_prob=jnp.full(B, 50.0))  # log eps far above: w = 1 everywhere
  grads = jax.jit(jax.jacrev(lambda p: agent.losses(p, batch, KEYS)[1]))(_params(agent))
  return agent, batch, grads


def test_penalty_gradient_reaches_the_critic_only(info_grads):
  """sg(a_pi) and sg(w): the penalty moves Q(s, a_pi) down and leaves the actor alone."""
  agent, batch, grads = info_grads
  grads = grads["critic/penalty"]
  assert _all_zero(grads["actor"])
  assert not _all_zero(grads["critic"])
  # It is exactly the gradient of alpha * mean Q(s, a_pi) with a_pi held fixed (w = 1).
  a_pi = _actor_actions(agent, batch["observations"])
  want = jax.jit(jax.grad(lambda c: agent.critic(batch["observations"], a_pi, params=c).mean()))(
      agent.critic.params)
  chex.assert_trees_all_close(grads["critic"], want, rtol=1e-4, atol=1e-7)


def test_actor_loss_and_td_target_stop_gradients(info_grads):
  """The actor's Q term sees the critic as a constant; the TD target's a' carries no actor
  gradient; the distillation term trains the actor only."""
  grads = info_grads[2]
  q_loss, td, distill = grads["actor/q_loss"], grads["critic/td_loss"], grads["actor/distill"]
  assert _all_zero(q_loss["critic"]) and not _all_zero(q_loss["actor"])
  assert _all_zero(td["actor"]) and not _all_zero(td["critic"])
  assert _all_zero(distill["critic"]) and not _all_zero(distill["actor"])


def test_flow_stays_frozen():
  """No gradient of the loss reaches the behavior flow, though the flow shapes the loss."""
  agent = _agent(alpha=1.0)
  batch = dict(_batch(), log_prob=jnp.full(B, 1.0))

  def loss(flow_params, name=None):
    frozen = agent.replace(flow=agent.flow.replace(params=flow_params))
    total, info = frozen.losses(_params(agent), batch, KEYS)
    return total if name is None else info[name]

  flow = agent.flow.params
  names = (None, "actor/distill", "penalty/log_beta_pi")
  grads = jax.jit(lambda f: [jax.grad(loss)(f, n) for n in names])(flow)
  assert all(_all_zero(g) for g in grads)
  # The test can fail: the same terms do depend on the flow's parameters.
  moved = jax.tree.map(lambda x: 1.5 * x + 0.1, flow)
  values = jax.jit(lambda f: [loss(f, n) for n in names[1:]])
  assert not np.any(np.isclose(values(flow), values(moved)))



def test_official_defaults_and_per_network_widths():
  assert FACConfig().discount == 0.995 and FACConfig().divergence == "exact"
  agent = FACAgent.create(0, np.zeros((1, OBS)), np.zeros((1, ACT)),
                          FACConfig(hidden_dims=(8,), critic_hidden_dims=(6, 5),
                                    flow_hidden_dims=(7,)))
  widths = lambda net: sorted({leaf.shape[-1] for leaf in jax.tree.leaves(net.params)
                               if leaf.ndim == 2})
  assert {6, 5} <= set(widths(agent.critic)) and 8 not in widths(agent.critic)
  assert 7 in widths(agent.flow) and 8 not in widths(agent.flow)
  assert 8 in widths(agent.actor)
  with pytest.raises(ValueError, match="actor_hidden_dims"):
    FACAgent.create(0, np.zeros((1, OBS)), np.zeros((1, ACT)), FACConfig(actor_hidden_dims=()))

