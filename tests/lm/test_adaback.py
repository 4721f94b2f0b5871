"""AdaBack's curriculum on hand-built histories, and one iteration end to end."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.data import lm_tasks as lt
from jaxlab.lm import adaback as ab
from jaxlab.models import transformer as tfm

CFG = ab.AdaBackConfig()


def test_intervals_follow_the_three_rules():
  state = ab.init_state(4)
  # sample 0: no history; 1: failed at 0.3 (ceiling 0.9); 2: succeeded at 0.6; 3: failed at
  # 0.5 with ceiling 0.7 from an earlier success
  state = ab.record(state, jnp.array([1, 2, 3]), jnp.array([0.3, 0.6, 0.5]),
                    jnp.array([0.2, 0.75, 0.0]))
  state = state.replace(rho_max=state.rho_max.at[3].set(0.7))
  lower, upper, ceiling = ab.intervals(state, jnp.arange(4))
  np.testing.assert_allclose(lower, [0.0, 0.3, 0.0, 0.5])  # global min, last, 0, last
  np.testing.assert_allclose(upper, [0.9, 0.9, 0.6, 0.7])  # global max, ceiling, last, ceiling
  np.testing.assert_allclose(ceiling, [0.9, 0.9, 0.6, 0.7])  # success lowers the ceiling
  rho, new = ab.draw_ratios(state, jnp.arange(4), jax.random.key(0))
  assert np.all((np.asarray(rho) >= np.asarray(lower)) & (np.asarray(rho) <= np.asarray(upper)))
  np.testing.assert_allclose(new.rho_max, [0.9, 0.9, 0.6, 0.7])
  # EMA over the three samples with a history: lower mean 0.8/3, upper mean 2.2/3
  assert float(new.bar_min) == pytest.approx(0.8 * 0.0 + 0.2 * (0.8 / 3))
  assert float(new.bar_max) == pytest.approx(0.8 * 0.9 + 0.2 * (2.2 / 3))


def test_draws_are_uniform_on_the_interval_and_zero_prob():
  state = ab.record(ab.init_state(1), jnp.array([0]), jnp.array([0.4]), jnp.array([0.0]))
  idx = jnp.zeros(20_000, jnp.int32)
  rho, _ = ab.draw_ratios(state, idx, jax.random.key(1))
  assert float(rho.min()) >= 0.4 and float(rho.max()) <= 0.9
  assert float(rho.mean()) == pytest.approx(0.65, abs=0.01)
  rho, _ = ab.draw_ratios(state, idx, jax.random.key(1), ab.AdaBackConfig(zero_prob=0.25))
  assert float(jnp.mean(rho == 0)) == pytest.approx(0.25, abs=0.01)
  np.testing.assert_array_equal(ab.reveal_lengths(jnp.array([0.0, 0.5, 0.99, 1.0]), 24),
                                [0, 12, 23, 24])
  with pytest.raises(ValueError, match="tau must be a number in"):
    ab.AdaBackConfig(tau=1.5)


def test_iteration_reveals_the_drawn_prefix_and_records_rewards():
  length = 3
  data = lt.latent_parity(jax.random.key(2), num=8, length=length)
  prompts, answers = data.tokens[:, :data.prompt_len], data.tokens[:, data.prompt_len:]
  x_bits = prompts[:, 1:-1] - lt.FIRST_SYMBOL
  cfg = tfm.TransformerConfig(vocab_size=7, d_model=16, num_heads=2, num_layers=1, seq_len=16)
  net = tfm.create(cfg, jax.random.key(3))
  opt = optax.adam(1e-3)
  reward = lambda comp, ids: lt.parity_reward(comp, x_bits[ids])  # noqa: E731
  it = jax.jit(ab.make_iteration(net, opt, prompts, answers, reward, prompts_per_step=4,
                                 group_size=4, eos_id=lt.EOS))
  state = ab.RLState(net.params, opt.init(net.params), ab.init_state(8))
  # a curriculum that reveals everything but EOS: every completion is the valid answer
  full = state.curriculum.replace(bar_min=jnp.asarray(1.0), bar_max=jnp.asarray(1.0))
  new, metrics = it(state.replace(curriculum=full), jax.random.key(4))
  assert float(metrics["rho"]) == 1.0 and float(metrics["revealed"]) == 2 * length
  # all 2L bits are forced; the rewards are 1 when the model then ends with EOS, else 0
  seen = np.asarray(new.curriculum.seen)
  assert seen.sum() == 4 and np.all(np.asarray(new.curriculum.rho_last)[seen] == 1.0)
  new, metrics = it(state, jax.random.key(5))  # from the initial bounds: rho in [0, 0.9]
  assert 0.0 <= float(metrics["rho"]) <= 0.9
  assert jax.tree.leaves(new.params)[0].shape == jax.tree.leaves(net.params)[0].shape
