"""Offline training pipeline: jitted ``lax.scan`` chunks, seeds vmapped, orbax checkpoints.

``make_train(agent_cls, config, dataset, train_config, evaluate_fn) -> train``
builds the whole pipeline of a flow actor-critic agent:

1. behavior-flow pre-training (``config.pretrain_steps`` steps of
   ``agent.pretrain_update``; skipped when 0),
2. caching ``log beta(a|s)`` of every dataset transition (agents that have
   ``behavior_log_prob`` and use the penalty),
3. ``train_config.num_steps`` actor-critic steps of ``agent.update``, in chunks
   of ``eval_every`` steps, each chunk one jitted scan followed by a vmapped
   evaluation.

Every chunk is ``jax.jit(jax.vmap(...))`` over seeds. ``train(keys,
checkpoint_dir=...)`` saves the whole carry (agents, samplers, cached
densities, history) with orbax after every chunk and, when called again with
the same directory, resumes after the last saved chunk: the result is the same
as an uninterrupted run, bit for bit on a given device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.rng import split_key_data as split
from jaxlab.training.chunks import run_chunks

DATASET_KEYS = ("observations", "actions", "rewards", "next_observations", "masks", "terminals")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Pipeline sizes (the agent's own hyperparameters live in its config)."""

  num_steps: int = 100_000  # actor-critic steps
  eval_every: int = 5_000  # steps per jitted chunk; evaluation + checkpoint after each
  eval_episodes: int = 50  # parallel evaluation episodes per seed
  log_prob_chunk: int = 4096  # transitions per density-caching call


class Carry(NamedTuple):
  """Per-seed training state (vmapped over seeds)."""

  agent: Any
  sampler: jax.Array  # raw key data of the batch sampler
  log_prob: jax.Array  # (N,) cached behavior log-densities (zeros if unused)


def check_dataset(dataset: dict[str, Any]) -> dict[str, jax.Array]:
  """Validates an offline dataset dict and returns it as float32 jax arrays."""
  if not isinstance(dataset, dict):
    raise TypeError(f"dataset must be a dict of arrays, got {type(dataset).__name__}")
  missing = [k for k in DATASET_KEYS if k not in dataset]
  if missing:
    raise ValueError(f"dataset is missing keys {missing}; needs {DATASET_KEYS}")
  n = len(dataset["observations"])
  if n == 0:
    raise ValueError("dataset is empty (0 transitions); sampling needs at least one")
  for k in DATASET_KEYS:
    if len(dataset[k]) != n:
      raise ValueError(f"dataset[{k!r}] has {len(dataset[k])} rows, observations has {n}")
  # One NaN reward or observation turns every critic parameter NaN after one
  # update, so every field must be finite (in float32, the training dtype).
  for k in DATASET_KEYS:
    with np.errstate(over="ignore", invalid="ignore"):
      values = np.asarray(dataset[k], np.float32)
    if not np.all(np.isfinite(values)):
      raise ValueError(f"dataset[{k!r}] has non-finite values (NaN, inf, or beyond float32)")
    if k in ("masks", "terminals") and not np.all((values == 0) | (values == 1)):
      bad = values[(values != 0) & (values != 1)][0]
      raise ValueError(f"dataset[{k!r}] must hold only 0 and 1, got {bad}")
  return {k: jnp.asarray(dataset[k], jnp.float32) for k in DATASET_KEYS}


def sample_batch(data: dict[str, jax.Array], log_prob: jax.Array, key: jax.Array,
                 batch_size: int) -> dict[str, jax.Array]:
  """Uniformly sampled transitions (with replacement), with their cached ``log_prob``."""
  idx = jax.random.randint(key, (batch_size,), 0, data["observations"].shape[0])
  return {**{k: v[idx] for k, v in data.items()}, "log_prob": log_prob[idx]}


def _uses_density(agent_cls: Any, config: Any) -> bool:
  return hasattr(agent_cls, "behavior_log_prob") and getattr(config, "alpha", 0) > 0


def make_train(
    agent_cls: Any,
    config: Any,
    dataset: dict[str, Any],
    train_config: TrainConfig = TrainConfig(),
    evaluate_fn: Callable[[jax.Array, Any], dict[str, jax.Array]] | None = None,
) -> Callable[..., tuple[Any, dict[str, np.ndarray]]]:
  """Builds ``train(keys, checkpoint_dir=None, stop_after=None) -> (agents, history)``.

  Args:
    agent_cls: an agent class with ``create(seed, obs, actions, config)``,
      ``update(batch)`` and, for ``config.pretrain_steps > 0``,
      ``pretrain_update(batch)`` and ``behavior_log_prob(obs, actions, key)``.
    config: the agent's frozen config.
    dataset: dict with :data:`DATASET_KEYS` (numpy or jax arrays).
    train_config: sizes of the pipeline.
    evaluate_fn: ``(key, agent) -> dict of scalars`` run after every chunk
      (vmapped over seeds), e.g. a closure over ``jaxlab.envs.evaluate``.

  Returns:
    ``train``: takes ``keys`` (a batch of PRNG keys, one per seed), an
    optional checkpoint directory and ``stop_after`` (number of chunks to run
    before returning, to simulate an interruption). Returns the agents
    (leading seed axis) and the history: a dict of ``(chunks, seeds)`` arrays
    with ``step``, the chunk means of the agent's ``info`` and the evaluation.
  """
  data = check_dataset(dataset)
  tc = train_config
  for name in ("num_steps", "eval_every", "eval_episodes", "log_prob_chunk"):
    if int(getattr(tc, name)) < 1:
      raise ValueError(f"train_config.{name} must be >= 1, got {getattr(tc, name)}")
  n = data["observations"].shape[0]
  batch_size = config.batch_size
  pretrain_steps = int(getattr(config, "pretrain_steps", 0))
  density = _uses_density(agent_cls, config)
  plan = ([("pretrain", s) for s in _chunks(pretrain_steps, tc.eval_every)]
          + ([("cache", 0)] if density else [])
          + [("train", s) for s in _chunks(tc.num_steps, tc.eval_every)])

  def init(key):
    key_agent, key_sampler = jax.random.split(key)
    agent = agent_cls.create(key_agent, data["observations"][:1], data["actions"][:1], config)
    return Carry(agent, jax.random.key_data(key_sampler), jnp.zeros(n, jnp.float32))

  def scan_steps(method: str, num: int):
    def run(carry: Carry, data) -> tuple[Carry, dict[str, jax.Array]]:
      def step(c: Carry, _):
        sampler, key = split(c.sampler, 2)
        batch = sample_batch(data, c.log_prob, key, batch_size)
        agent, info = getattr(c.agent, method)(batch)
        return c._replace(agent=agent, sampler=sampler), info
      carry, infos = jax.lax.scan(step, carry, None, length=num)
      return carry, jax.tree.map(jnp.mean, infos)
    return jax.jit(jax.vmap(run, in_axes=(0, None)))

  def cache(carry: Carry, data) -> Carry:
    sampler, key = split(carry.sampler, 2)
    pad = -n % tc.log_prob_chunk
    obs = jnp.pad(data["observations"], ((0, pad), (0, 0))).reshape(
        -1, tc.log_prob_chunk, data["observations"].shape[-1])
    act = jnp.pad(data["actions"], ((0, pad), (0, 0))).reshape(
        -1, tc.log_prob_chunk, data["actions"].shape[-1])
    keys = jax.random.split(key, obs.shape[0])
    lp = jax.lax.map(lambda x: carry.agent.behavior_log_prob(*x), (obs, act, keys))
    lp = lp.reshape(-1)[:n]
    agent = carry.agent.replace(log_prob_min=jnp.min(lp))
    return Carry(agent, sampler, lp)

  compiled = {("pretrain", s): scan_steps("pretrain_update", s) for k, s in plan if k == "pretrain"}
  compiled.update({("train", s): scan_steps("update", s) for k, s in plan if k == "train"})
  cache_fn = jax.jit(jax.vmap(cache, in_axes=(0, None)))
  init_fn = jax.jit(jax.vmap(init))  # built once: every train() call reuses its compilation
  eval_fn = None
  if evaluate_fn is not None:
    eval_fn = jax.jit(jax.vmap(lambda key, agent: evaluate_fn(key, agent)))

  def train(keys: jax.Array, checkpoint_dir: str | None = None, stop_after: int | None = None):
    eval_keys = jax.random.split(jax.random.fold_in(keys[0], 1), len(plan))

    def run_chunk(i, carry, steps_done):
      kind, size = plan[i]
      if kind == "cache":
        return cache_fn(carry, data), None, steps_done
      carry, record = compiled[(kind, size)](carry, data)
      if kind == "pretrain":
        return carry, None, steps_done
      steps_done += size
      record["step"] = jnp.full((len(keys),), steps_done)
      if eval_fn is not None:
        seed_keys = jax.random.split(eval_keys[i], len(keys))
        record.update({f"eval/{k}": v for k, v in eval_fn(seed_keys, carry.agent).items()})
      return carry, record, steps_done

    fingerprint = {"agent": agent_cls.__name__, "config": config, "train_config": tc,
                   "plan": plan, "keys": keys, "dataset": data,
                   "evaluate": getattr(evaluate_fn, "__qualname__", repr(evaluate_fn))}
    carry, history = run_chunks(init_fn(keys), len(plan), run_chunk,
                                checkpoint_dir=checkpoint_dir, stop_after=stop_after,
                                fingerprint=fingerprint)
    stacked = {k: np.stack([h[k] for h in history]) for k in (history[0] if history else {})}
    return carry.agent, stacked

  return train


def _chunks(total: int, size: int) -> list[int]:
  return [size] * (total // size) + ([total % size] if total % size else [])
