"""Behavior-flow pre-training by epochs (the official FAC loop): plan, shuffled epochs, weights."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxlab.nn import flows
from jaxlab.rl.agents import FACAgent, FACConfig, FQLConfig
from jaxlab.rl.train import (
    PretrainPlan,
    TrainConfig,
    epoch_batch,
    epoch_order,
    make_train,
    pretrain_batch_size,
    pretrain_plan,
)


def test_pretrain_plan_by_hand():
  """Official main.py: batch 256 x1 / x4 / x16 below 100k / below 500k / above, and
  250 * ceil(N / batch) steps."""
  cfg = FACConfig()
  assert (cfg.pretrain_steps, cfg.pretrain_epochs, cfg.pretrain_shuffle) == (None, 250, False)
  # 50,000 / 256 = 195.3 -> 196 batches per epoch
  assert pretrain_plan(cfg, 50_000) == PretrainPlan(250 * 196, 256, 196, False)
  # 200,000 / 1024 = 195.3 -> 196
  assert pretrain_plan(cfg, 200_000) == PretrainPlan(250 * 196, 1024, 196, False)
  # 1,000,000 / 4096 = 244.1 -> 245
  assert pretrain_plan(cfg, 1_000_000) == PretrainPlan(250 * 245, 4096, 245, False)
  assert [pretrain_batch_size(256, n) for n in (99_999, 100_000, 499_999, 500_000)] == [
      256, 1024, 1024, 4096]
  small = FACConfig(batch_size=32, pretrain_epochs=3, pretrain_shuffle=True)
  assert pretrain_plan(small, 100) == PretrainPlan(12, 32, 4, True)  # 100 / 32 -> 4
  # an explicit step count keeps the config's batch (the experiments' recorded schedule)
  assert pretrain_plan(FACConfig(pretrain_steps=7), 1_000_000) == PretrainPlan(7, 256, 3907,
                                                                                False)
  assert pretrain_plan(FQLConfig(), 1000).steps == 0  # FQL trains its flow jointly


def test_epoch_batches_visit_every_transition_once():
  n, b = 10, 4
  order = jax.jit(epoch_order, static_argnums=(1, 2))(jax.random.key(0), n, b)
  assert order.shape == (12,)
  idx, w = zip(*[epoch_batch(order, jnp.int32(j), b, n) for j in range(3)], strict=True)
  idx, w = np.concatenate(idx), np.concatenate(w)
  assert sorted(idx[w > 0].tolist()) == list(range(n))
  np.testing.assert_array_equal(w, [1.0] * n + [0.0] * 2)  # the padding weighs nothing


@dataclasses.dataclass(frozen=True)
class CountConfig:
  batch_size: int = 4
  pretrain_steps: int | None = None
  pretrain_epochs: int = 3
  pretrain_shuffle: bool = True


class Counter(struct.PyTreeNode):
  """A stand-in agent whose pre-training counts how often (by weight) each row is seen."""

  counts: jax.Array

  @classmethod
  def create(cls, seed, obs, actions, config):
    return cls(counts=jnp.zeros(N_ROWS, jnp.float32))

  def pretrain_update(self, batch):
    w = batch.get("weights", jnp.ones(batch["rewards"].shape))
    return self.replace(counts=self.counts.at[batch["observations"][:, 0].astype(int)].add(w)), {}

  def update(self, batch):
    return self, {}


N_ROWS = 10


def _rows():
  obs = jnp.arange(N_ROWS, dtype=jnp.float32)[:, None]
  zeros = jnp.zeros(N_ROWS)
  return {"observations": obs, "next_observations": obs, "actions": obs, "rewards": zeros,
          "masks": zeros + 1, "terminals": zeros}


def test_trainer_draws_with_replacement_by_default():
  """3 epochs of 10 rows in batches of 4: 9 steps of 4 draws, unevenly spread."""
  train = make_train(Counter, CountConfig(pretrain_shuffle=False), _rows(),
                     TrainConfig(num_steps=1, eval_every=4))
  counts = np.asarray(train(jax.random.split(jax.random.key(3), 2))[0].counts)
  assert counts.shape == (2, N_ROWS) and np.all(counts.sum(1) == 9 * 4)
  assert not np.all(counts == 3.0)


def test_shuffled_epochs_visit_every_row_once_and_resume_mid_epoch(tmp_path):
  """Shuffled: 9 steps in chunks of 4 that straddle epochs; stopped after 8 (mid-epoch) and
  resumed from the checkpoint (which holds the epoch's order), every row of every seed is
  seen exactly 3 times and the padding (2 rows per epoch) never."""
  train = make_train(Counter, CountConfig(), _rows(), TrainConfig(num_steps=1, eval_every=4))
  keys = jax.random.split(jax.random.key(3), 2)
  train(keys, checkpoint_dir=str(tmp_path), stop_after=2)
  agents, _ = train(keys, checkpoint_dir=str(tmp_path))
  np.testing.assert_array_equal(agents.counts, np.full((2, N_ROWS), 3.0))


def test_flow_matching_loss_weights():
  kv, ko, ka, kl = jax.random.split(jax.random.key(0), 4)
  w_mat = jax.random.normal(kv, (3, 2))
  field = lambda o, x, t: jnp.tanh(x @ w_mat[:2] + o * w_mat[2] + t)
  obs, act = jax.random.normal(ko, (6, 1)), jax.random.normal(ka, (6, 2))
  loss = jax.jit(flows.flow_matching_loss, static_argnums=0)
  plain = loss(field, obs, act, kl)
  np.testing.assert_allclose(loss(field, obs, act, kl, jnp.ones(6)), plain, rtol=1e-6)
  np.testing.assert_allclose(loss(field, obs, act, kl, 3 * jnp.ones(6)), plain, rtol=1e-6)
  w = jnp.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
  dropped = loss(field, obs, act, kl, w)
  garbage = act.at[4:].set(1e3)
  np.testing.assert_array_equal(loss(field, obs, garbage, kl, w), dropped)
  assert float(loss(field, obs, garbage, kl)) > 1e4 * float(dropped)
  assert float(loss(field, obs, act, kl, jnp.zeros(6))) == 0.0
  with pytest.raises(ValueError, match="weights"):
    flows.flow_matching_loss(field, obs, act, kl, jnp.ones(5))


def test_fac_pretraining_ignores_rows_of_weight_zero():
  obs, act = jax.random.normal(jax.random.key(1), (2, 6, 2))
  agent = FACAgent.create(0, obs[:1], act[:1], FACConfig(hidden_dims=(8,)))
  w = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
  step = jax.jit(FACAgent.pretrain_update)
  a, info = step(agent, {"observations": obs, "actions": act, "weights": w})
  b, info_b = step(agent, {"observations": obs, "actions": act.at[3:].set(5.0), "weights": w})
  np.testing.assert_array_equal(info["flow/loss"], info_b["flow/loss"])
  jax.tree.map(np.testing.assert_array_equal, a.flow.params, b.flow.params)
  moved = [np.abs(np.asarray(x) - np.asarray(y)).max() for x, y in zip(
      jax.tree.leaves(a.flow.params), jax.tree.leaves(agent.flow.params), strict=True)]
  assert max(moved) > 0


@pytest.mark.parametrize("field,value", [
    ("pretrain_steps", -1), ("pretrain_steps", 2.5), ("pretrain_steps", True),
    ("pretrain_epochs", -1), ("pretrain_epochs", "250"), ("pretrain_epochs", None),
    ("pretrain_shuffle", 1)])
def test_bad_pretrain_fields_are_rejected(field, value):
  cfg = FACConfig(hidden_dims=(8,), **{field: value})
  with pytest.raises(ValueError, match=f"config.{field}"):
    FACAgent.create(0, np.zeros((1, 2)), np.zeros((1, 2)), cfg)
  if field != "pretrain_epochs" or cfg.pretrain_steps is None:
    with pytest.raises(ValueError, match=f"config.{field}"):
      pretrain_plan(cfg, 100)
