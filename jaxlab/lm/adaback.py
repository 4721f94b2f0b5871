r"""AdaBack: per-sample curricula that reveal part of the answer, for RL on reasoning.

RL from outcome rewards stalls when a correct answer is almost never sampled (latent
parity of length L: a random answer is right with probability 2^-L). AdaBack
reveals the first ``floor(rho * m)`` tokens of sample ``i``'s ``m``-token reference
answer as a forced prefix; the policy completes the rest and the reward scores
prefix + completion. Each sample keeps its own reveal ratio, adapted from its last
group's mean reward ``r``:

* no history yet: ``rho ~ U(rho_bar_min, rho_bar_max)``;
* ``r < tau`` (failing): ``rho ~ U(rho_last, rho_max_i)`` (reveal more);
* ``r >= tau`` (succeeding): ``rho_max_i <- rho_last``, then ``rho ~ U(0, rho_last)``
  (reveal less, and never again as much).

The global bounds follow the samples updated this step by an EMA (``alpha = 0.8``):
``rho_bar_max <- 0.8 rho_bar_max + 0.2 mean(upper_i)`` and the same for
``rho_bar_min`` with the interval's lower ends (0 for successes). Optionally
``zero_prob`` forces ``rho = 0`` (the test condition) for a share of the draws.
Training is GRPO on the completions (:mod:`jaxlab.models.policy_gradient`), learning
only from the sampled tokens.

Defaults are the official code's (``PerSampleCurriculumDatasetWrapper``): ``tau = 0.5``,
``rho_max_i = 0.9`` at first, ``alpha = 0.8``. The initial global bounds
``(0, 0.9)`` are our assumption (not read in code).

Example:
  >>> state = init_state(num_samples=1024)
  >>> rho, state = draw_ratios(state, idx, key)          # idx: this step's sample ids
  >>> k = reveal_lengths(rho, answer_len)                # tokens forced per sample
  >>> ... GRPO on completions after the forced prefix; r: each sample's group mean reward
  >>> state = record(state, idx, rho, r)

Reference:
  Amani, Lotfi, et al., "RL for Reasoning by Adaptively Revealing Rationales",
  arXiv:2506.18110 (ICLR 2026); code mh-amani/LLM-RL.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.models import policy_gradient as pg
from jaxlab.nn import Net


@dataclasses.dataclass(frozen=True)
class AdaBackConfig:
  """The curriculum's constants (hashable)."""

  tau: float = 0.5  # success threshold on a group's mean reward
  rho_max_init: float = 0.9  # initial per-sample ceiling rho_max_i
  ema: float = 0.8  # alpha of the global bounds' EMA
  bar_min_init: float = 0.0  # initial global lower bound [assumed]
  bar_max_init: float = 0.9  # initial global upper bound [assumed]
  zero_prob: float = 0.0  # share of draws forced to rho = 0

  def __post_init__(self):
    for name in ("tau", "rho_max_init", "ema", "bar_min_init", "bar_max_init", "zero_prob"):
      v = getattr(self, name)
      if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
    if self.bar_min_init > self.bar_max_init:
      raise ValueError(f"bar_min_init must be <= bar_max_init, got {self.bar_min_init} > "
                       f"{self.bar_max_init}")


class CurriculumState(struct.PyTreeNode):
  """Per-sample reveal history and the two global bounds (a pytree: jit / scan friendly)."""

  rho_last: jax.Array  # (N,) the ratio of the sample's last group
  rho_max: jax.Array  # (N,) the sample's ceiling rho_max_i
  last_reward: jax.Array  # (N,) mean reward of its last group
  seen: jax.Array  # (N,) bool: has a history
  bar_min: jax.Array  # () global lower bound
  bar_max: jax.Array  # () global upper bound


def init_state(num_samples: int, config: AdaBackConfig = AdaBackConfig()) -> CurriculumState:
  """No sample has a history; the bounds start at the config's values."""
  if not isinstance(num_samples, int) or num_samples < 1:
    raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
  z = jnp.zeros(num_samples)
  return CurriculumState(z, jnp.full(num_samples, config.rho_max_init), z,
                         jnp.zeros(num_samples, bool),
                         jnp.asarray(config.bar_min_init, jnp.float32),  # not weak-typed: the
                         jnp.asarray(config.bar_max_init, jnp.float32))  # carry keeps its type


def intervals(state: CurriculumState, idx: jax.Array,
              config: AdaBackConfig = AdaBackConfig()) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(lower, upper, rho_max)`` of the samples ``idx``: the interval each draws from and
  its ceiling after the update (lowered to ``rho_last`` on success)."""
  seen, r = state.seen[idx], state.last_reward[idx]
  last, ceiling = state.rho_last[idx], state.rho_max[idx]
  success, failure = seen & (r >= config.tau), seen & (r < config.tau)
  ceiling = jnp.where(success, last, ceiling)
  lower = jnp.where(failure, last, jnp.where(success, 0.0, state.bar_min))
  upper = jnp.where(failure, ceiling, jnp.where(success, last, state.bar_max))
  return lower, jnp.maximum(upper, lower), ceiling


def draw_ratios(state: CurriculumState, idx: jax.Array, key: jax.Array,
                config: AdaBackConfig = AdaBackConfig()) -> tuple[jax.Array, CurriculumState]:
  """Reveal ratios ``rho (len(idx),)`` for this step's samples, and the state with their
  ceilings lowered and the global bounds' EMA taken over the samples with a history."""
  lower, upper, ceiling = intervals(state, idx, config)
  k_u, k_z = jax.random.split(key)
  rho = jax.random.uniform(k_u, lower.shape, minval=lower, maxval=upper)
  if config.zero_prob > 0:
    rho = jnp.where(jax.random.uniform(k_z, rho.shape) < config.zero_prob, 0.0, rho)
  seen = state.seen[idx]
  count = jnp.sum(seen)
  mean = lambda x: jnp.sum(jnp.where(seen, x, 0.0)) / jnp.maximum(count, 1)  # noqa: E731
  a = config.ema
  bar_min = jnp.where(count > 0, a * state.bar_min + (1 - a) * mean(lower), state.bar_min)
  bar_max = jnp.where(count > 0, a * state.bar_max + (1 - a) * mean(upper), state.bar_max)
  return rho, state.replace(rho_max=state.rho_max.at[idx].set(ceiling), bar_min=bar_min,
                            bar_max=bar_max)


def record(state: CurriculumState, idx: jax.Array, rho: jax.Array,
           mean_reward: jax.Array) -> CurriculumState:
  """Stores each sample's ratio and its group's mean reward after the rollouts."""
  return state.replace(rho_last=state.rho_last.at[idx].set(rho),
                       last_reward=state.last_reward.at[idx].set(mean_reward),
                       seen=state.seen.at[idx].set(True))


def reveal_lengths(rho: jax.Array, answer_len: int | jax.Array) -> jax.Array:
  """``floor(rho * m)``: how many answer tokens are revealed (forced)."""
  return jnp.floor(rho * answer_len).astype(jnp.int32)


class RLState(struct.PyTreeNode):
  """What one GRPO iteration carries: parameters, optimizer state, the curriculum."""

  params: Any
  opt_state: Any
  curriculum: CurriculumState


def make_iteration(net: Net, optimizer: optax.GradientTransformation, prompts: jax.Array,
                   answers: jax.Array, reward_fn: Callable[[jax.Array, jax.Array], jax.Array],
                   *, prompts_per_step: int, group_size: int,
                   adaptive: bool | jax.Array = True,
                   config: AdaBackConfig = AdaBackConfig(), minibatch_size: int | None = None,
                   kl_coef: float = 1e-3, ref_params: Any = None, eos_id: int | None = None):
  """One AdaBack (or plain GRPO, ``adaptive=False``: nothing revealed) iteration.

  ``prompts (N, T_p)`` and reference ``answers (N, m)`` (EOS included) are the training
  set; ``reward_fn(completions (B, m), sample_ids (B,)) -> (B,)`` scores prefix +
  completion. ``adaptive`` may be traced (one compiled program for both arms). The
  iteration draws ``prompts_per_step`` samples, their reveal ratios,
  ``group_size`` completions each with the revealed prefix forced, GRPO advantages per
  group, one :func:`jaxlab.models.policy_gradient.pg_update` pass, and records each
  sample's group mean reward. Returns ``iteration(state: RLState, key) -> (state,
  metrics)``, pure (jit or scan it).
  """
  if not isinstance(prompts_per_step, int) or not 1 <= prompts_per_step <= prompts.shape[0]:
    raise ValueError(f"prompts_per_step must be an int in [1, {prompts.shape[0]}], got "
                     f"{prompts_per_step!r}")
  if not isinstance(group_size, int) or group_size < 2:
    raise ValueError(f"group_size must be an int >= 2 (GRPO normalizes within a group), got "
                     f"{group_size!r}")
  n, m = answers.shape
  batch = prompts_per_step * group_size
  minibatch_size = batch if minibatch_size is None else minibatch_size
  ref_params = net.params if ref_params is None else ref_params
  apply = lambda p, x: net(x, params=p)  # noqa: E731
  logp_fn = functools.partial(pg.token_log_probs, apply)

  def iteration(state: RLState, key: jax.Array):
    k_idx, k_rho, k_sample, k_update = jax.random.split(key, 4)
    idx = jax.random.choice(k_idx, n, (prompts_per_step,), replace=False)
    drawn, curriculum = draw_ratios(state.curriculum, idx, k_rho, config)
    rho = jnp.where(adaptive, drawn, 0.0)
    revealed = reveal_lengths(rho, m - 1)  # EOS is never revealed
    groups = pg.sample_groups(net.replace(params=state.params), prompts[idx], k_sample,
                              group_size, m, eos_id=eos_id, forced=answers[idx],
                              forced_len=revealed)
    ids = jnp.repeat(idx, group_size)
    reward = reward_fn(groups.tokens[:, prompts.shape[1]:], ids)
    group_reward = reward.reshape(prompts_per_step, group_size)
    adv = pg.group_advantages(group_reward).reshape(-1)
    data = pg.make_batch(logp_fn, state.params, ref_params, groups, adv)
    params, opt_state, info = pg.pg_update(logp_fn, optimizer, state.params, state.opt_state,
                                           data, minibatch_size=minibatch_size, key=k_update,
                                           kl_coef=kl_coef)
    curriculum = jax.tree.map(lambda new, old: jnp.where(adaptive, new, old),
                              record(curriculum, idx, rho, group_reward.mean(1)),
                              state.curriculum)
    metrics = {"reward": reward.mean(), "rho": rho.mean(), "revealed": revealed.mean(),
               "kl": info["kl"].mean(), "loss": info["loss"].mean()}
    return RLState(params, opt_state, curriculum), metrics

  return iteration
