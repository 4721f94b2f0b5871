"""FAC / FQL agents and the training pipeline: hand-checked pieces, jit/vmap, exact resume."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.rl.agents import FACAgent, FACConfig, FQLAgent, FQLConfig, common, unregularized
from jaxlab.rl.train import TrainConfig, make_train

SMALL = dict(hidden_dims=(16,), batch_size=32)  # one layer: every code path, less to compile


@pytest.fixture(scope="module")
def dataset():
  return envs.make_dataset(jax.random.key(0), 40)


def _batch(dataset, n=32):
  return {k: jnp.asarray(v[:n]) for k, v in dataset.items()}


def test_penalty_weight_by_hand(dataset):
  agent = FACAgent.create(0, dataset["observations"][:1], dataset["actions"][:1],
                          FACConfig(**SMALL))
  lp_eps = jnp.zeros(4)
  lp_pi = jnp.log(jnp.array([0.0 + 1e-30, 0.25, 1.0, 4.0]))  # beta / eps
  np.testing.assert_allclose(agent.penalty_weight(lp_pi, lp_eps), [1.0, 0.75, 0.0, 0.0],
                             atol=1e-6)
  log_agent = agent.replace(config=FACConfig(**SMALL, weight="log", weight_tau=2.0))
  want = [max(0.0, 1 - math.log1p(r**2) / math.log(2)) for r in (0.0, 0.25, 1.0, 4.0)]
  np.testing.assert_allclose(log_agent.penalty_weight(lp_pi, lp_eps), want, atol=1e-6)


def test_td_target_by_hand():
  batch = {"rewards": jnp.array([-1.0, 0.0]), "masks": jnp.array([1.0, 0.0])}
  np.testing.assert_allclose(common.td_target(batch, jnp.array([-5.0, -7.0]), 0.9), [-5.5, 0.0])
  qs = jnp.array([[1.0, -2.0], [3.0, -4.0]])
  np.testing.assert_allclose(common.aggregate(qs, "min"), [1.0, -4.0])
  np.testing.assert_allclose(common.aggregate(qs, "mean"), [2.0, -3.0])


def test_penalty_off_is_plain_td_plus_actor(dataset):
  """alpha = 0: FAC's loss has no penalty term; alpha > 0 adds alpha * mean(w * Q(s, a_pi))."""
  batch = _batch(dataset)
  batch["log_prob"] = jnp.zeros(32)
  keys = tuple(jax.random.split(jax.random.key(3), 4))
  on = FACAgent.create(1, batch["observations"], batch["actions"], FACConfig(**SMALL, alpha=2.0))
  off = on.replace(config=unregularized.get_config(**SMALL))
  params = {"critic": on.critic.params, "actor": on.actor.params}
  loss_on, info_on = on.losses(params, batch, keys)
  loss_off, info_off = off.losses(params, batch, keys)
  assert float(info_off["critic/penalty"]) == 0.0
  np.testing.assert_allclose(loss_on - loss_off, info_on["critic/penalty"], rtol=1e-5)
  assert 0.0 <= float(info_on["penalty/w_mean"]) <= 1.0


@pytest.mark.parametrize("agent_cls,config", [
    (FACAgent, FACConfig(**SMALL)), (FQLAgent, FQLConfig(**SMALL))])
def test_update_jits_and_vmaps_over_seeds(dataset, agent_cls, config):
  batch = _batch(dataset)
  batch["log_prob"] = jnp.zeros(32)
  create = lambda k: agent_cls.create(k, batch["observations"][:1], batch["actions"][:1], config)
  agents = jax.vmap(create)(jax.random.split(jax.random.key(0), 2))
  new, info = jax.jit(jax.vmap(lambda a: a.update(batch)))(agents)
  assert all(np.all(np.isfinite(v)) for v in info.values())
  assert not np.allclose(info["critic/td_loss"][0], info["critic/td_loss"][1])  # seeds differ
  before = jax.tree.leaves(agents.actor.params)[0]
  assert not np.allclose(jax.tree.leaves(new.actor.params)[0], before)
  actions = jax.vmap(lambda a: a.sample_actions(batch["observations"], jax.random.key(1)))(new)
  assert actions.shape == (2, 32, 2) and np.all(np.abs(actions) <= 1)
  assert new.get_config()["batch_size"] == 32


def test_fac_freezes_its_flow_after_pretraining(dataset):
  batch = _batch(dataset)
  batch["log_prob"] = jnp.zeros(32)
  agent = FACAgent.create(0, batch["observations"], batch["actions"], FACConfig(**SMALL))
  pre, info = jax.jit(FACAgent.pretrain_update)(agent, batch)
  assert np.isfinite(info["flow/loss"])
  assert not np.allclose(jax.tree.leaves(pre.flow.params)[0], jax.tree.leaves(agent.flow.params)[0])
  post, _ = jax.jit(FACAgent.update)(pre, batch)
  chex.assert_trees_all_equal(post.flow.params, pre.flow.params)


def test_bad_configs(dataset):
  obs, act = dataset["observations"][:1], dataset["actions"][:1]
  with pytest.raises(ValueError, match="threshold"):
    FACAgent.create(0, obs, act, FACConfig(threshold="median"))
  with pytest.raises(ValueError, match="q_agg"):
    FQLAgent.create(0, obs, act, FQLConfig(q_agg="max"))
  with pytest.raises(ValueError, match="discount"):
    FACAgent.create(0, obs, act, FACConfig(discount=1.0))
  with pytest.raises(TypeError, match="FACConfig"):
    FACAgent.create(0, obs, act, FQLConfig())
  with pytest.raises(ValueError, match="example_obs"):
    FACAgent.create(0, np.zeros((1, 1, 2)), act, FACConfig())


def _trainer(dataset, eval_every=3, **config):
  cfg = FACConfig(**{**SMALL, **config}, pretrain_steps=6)
  ev = lambda key, agent: envs.evaluate(key, agent.sample_actions, 4)
  return make_train(FACAgent, cfg, dataset,
                    TrainConfig(num_steps=9, eval_every=eval_every, eval_episodes=4,
                                log_prob_chunk=64), ev)


def test_train_pipeline_and_exact_resume(dataset, tmp_path):
  keys = jax.random.split(jax.random.key(7), 2)
  train = _trainer(dataset)
  agents, history = train(keys)
  assert history["step"][:, 0].tolist() == [3, 6, 9]
  assert history["eval/success"].shape == (3, 2)
  assert np.all(np.isfinite(history["critic/q_pi_mean"]))
  assert np.all(np.isfinite(np.asarray(agents.log_prob_min)))
  # Interrupted after 4 of 6 chunks (2 pretrain, cache, 1 train), then resumed.
  _, partial = train(keys, checkpoint_dir=str(tmp_path), stop_after=4)
  assert partial["step"].shape[0] == 1
  resumed, history2 = train(keys, checkpoint_dir=str(tmp_path))
  chex.assert_trees_all_equal(resumed, agents)
  for k in history:
    np.testing.assert_array_equal(history2[k], history[k])


def test_make_train_rejects_bad_data(dataset):
  bad = dict(dataset)
  del bad["masks"]
  with pytest.raises(ValueError, match="masks"):
    make_train(FACAgent, FACConfig(**SMALL), bad)
  with pytest.raises(ValueError, match="eval_every"):
    make_train(FACAgent, FACConfig(**SMALL), dataset, TrainConfig(eval_every=0))


def test_resume_refuses_a_checkpoint_of_another_run(dataset, tmp_path):
  """Other hidden sizes once returned the old agent, another eval_every ran 12 steps for
  num_steps=9, other keys returned the old seeds' result: each now names the field."""
  keys = jax.random.split(jax.random.key(7), 2)
  _trainer(dataset)(keys, checkpoint_dir=str(tmp_path), stop_after=1)
  with pytest.raises(ValueError, match=r"run\.config\.hidden_dims\[0\] is 16 there, 8 now"):
    _trainer(dataset, hidden_dims=(8,))(keys, checkpoint_dir=str(tmp_path))
  with pytest.raises(ValueError, match=r"run\.train_config\.eval_every is 3 there, 4 now"):
    _trainer(dataset, eval_every=4)(keys, checkpoint_dir=str(tmp_path))
  with pytest.raises(ValueError, match=r"run\.keys"):
    _trainer(dataset)(jax.random.split(jax.random.key(8), 2), checkpoint_dir=str(tmp_path))
