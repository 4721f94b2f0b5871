"""Offline training pipeline: jitted ``lax.scan`` chunks, seeds vmapped, orbax checkpoints.

``make_train(agent_cls, config, dataset, train_config, evaluate_fn) -> train``
builds the whole pipeline of a flow actor-critic agent:

1. behavior-flow pre-training (``agent.pretrain_update`` for the steps and
   batch size of :func:`pretrain_plan`: ``config.pretrain_steps`` steps of
   ``batch_size``, or, when ``pretrain_steps`` is None, the official FAC
   epoch loop over the dataset; skipped when 0),
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
import math
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
  order: jax.Array | None = None  # shuffled pre-training: this epoch's padded permutation


class PretrainPlan(NamedTuple):
  """How the behavior flow pre-trains on a dataset (see :func:`pretrain_plan`)."""

  steps: int  # pretrain_update calls (0: no pre-training)
  batch_size: int  # transitions per pre-training batch
  steps_per_epoch: int  # ceil(N / batch_size)
  shuffle: bool  # a permutation per epoch (True) or uniform draws with replacement


def pretrain_batch_size(batch_size: int, num_transitions: int) -> int:
  """The official FAC pre-training batch: ``batch_size`` x1 / x4 / x16 by dataset size.

  x1 below 100,000 transitions, x4 below 500,000, x16 from there (``main.py`` of
  github.com/JongseongChae/FAC, its ``bc_batch_size`` for state-based tasks).
  """
  scale = 1 if num_transitions < 100_000 else 4 if num_transitions < 500_000 else 16
  return int(batch_size) * scale


def pretrain_plan(config: Any, num_transitions: int) -> PretrainPlan:
  r"""The pre-training schedule of ``config`` on a dataset of ``num_transitions`` rows.

  ``config.pretrain_steps`` given (an int): that many steps of ``config.batch_size``.
  ``None``: the official FAC loop, ``config.pretrain_epochs`` epochs of
  :func:`pretrain_batch_size` batches,

  .. math::
    \text{steps} = \text{epochs} \cdot \lceil N / B_{\text{pre}} \rceil .

  Configs without the fields (FQL) do not pre-train. ``config.pretrain_shuffle``
  chooses sampling without replacement (:func:`epoch_batch`).

  Example:
    >>> pretrain_plan(FACConfig(), 200_000)   # 250 epochs of 1024: 250 * 196 steps
    PretrainPlan(steps=49000, batch_size=1024, steps_per_epoch=196, shuffle=False)
  """
  n = int(num_transitions)
  if n < 1:
    raise ValueError(f"num_transitions must be >= 1, got {num_transitions}")
  steps = getattr(config, "pretrain_steps", 0)
  shuffle = getattr(config, "pretrain_shuffle", False)
  if not isinstance(shuffle, bool):
    raise ValueError(f"config.pretrain_shuffle must be True or False, got {shuffle!r}")
  if steps is None:
    epochs = config.pretrain_epochs
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
      raise ValueError(f"config.pretrain_epochs must be an int >= 0, got {epochs!r}")
    batch = pretrain_batch_size(config.batch_size, n)
    per_epoch = math.ceil(n / batch)
    return PretrainPlan(int(epochs) * per_epoch, batch, per_epoch, shuffle)
  if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
    raise ValueError(f"config.pretrain_steps must be None or an int >= 0, got {steps!r}")
  batch = int(config.batch_size)
  return PretrainPlan(int(steps), batch, math.ceil(n / batch), shuffle)


def epoch_order(key: jax.Array, num_transitions: int, batch_size: int) -> jax.Array:
  """One epoch's visiting order: a permutation of the rows, padded with row 0 to whole batches.

  Returns ``(ceil(N / B) * B,)`` int32; :func:`epoch_batch` weights the padding 0.
  """
  pad = -num_transitions % batch_size
  perm = jax.random.permutation(key, num_transitions).astype(jnp.int32)
  return jnp.concatenate([perm, jnp.zeros((pad,), jnp.int32)])


def epoch_batch(order: jax.Array, position: jax.Array, batch_size: int,
                num_transitions: int) -> tuple[jax.Array, jax.Array]:
  """Rows and weights of batch ``position`` of an epoch: ``(B,)`` indices, ``(B,)`` 0/1 weights.

  Batch ``j`` holds ``order[jB : (j+1)B]``; rows past ``N`` (the padding of the last,
  partial batch) get weight 0, so every transition counts exactly once per epoch.
  """
  start = position * batch_size
  idx = jax.lax.dynamic_slice(order, (start,), (batch_size,))
  weights = (start + jnp.arange(batch_size) < num_transitions).astype(jnp.float32)
  return idx, weights


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
      ``update(batch)`` and, when it pre-trains (:func:`pretrain_plan`),
      ``pretrain_update(batch)`` (shuffled batches carry ``batch["weights"]``)
      and ``behavior_log_prob(obs, actions, key)``.
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
  pre = pretrain_plan(config, n)
  density = _uses_density(agent_cls, config)
  plan = ([("pretrain", s) for s in _chunks(pre.steps, tc.eval_every)]
          + ([("cache", 0)] if density else [])
          + [("train", s) for s in _chunks(tc.num_steps, tc.eval_every)])
  # pre-training steps done before each chunk (where a shuffled epoch stands)
  starts = np.cumsum([0] + [s if k == "pretrain" else 0 for k, s in plan[:-1]]).tolist()

  def init(key):
    key_agent, key_sampler = jax.random.split(key)
    agent = agent_cls.create(key_agent, data["observations"][:1], data["actions"][:1], config)
    order = jnp.zeros(pre.steps_per_epoch * pre.batch_size, jnp.int32) if pre.shuffle else None
    return Carry(agent, jax.random.key_data(key_sampler), jnp.zeros(n, jnp.float32), order)

  def shuffled_batch(c: Carry, data, key: jax.Array, step: jax.Array):
    """Batch ``step`` of the epoch loop without replacement; a new order at each epoch start."""
    position = step % pre.steps_per_epoch
    order = jax.lax.cond(position == 0, lambda: epoch_order(key, n, pre.batch_size),
                         lambda: c.order)
    idx, weights = epoch_batch(order, position, pre.batch_size, n)
    batch = {**{k: v[idx] for k, v in data.items()}, "log_prob": c.log_prob[idx],
             "weights": weights}
    return batch, order

  def scan_steps(method: str, num: int):
    shuffle = method == "pretrain_update" and pre.shuffle
    size = pre.batch_size if method == "pretrain_update" else batch_size

    def run(carry: Carry, data, start) -> tuple[Carry, dict[str, jax.Array]]:
      def step(c: Carry, i):
        sampler, key = split(c.sampler, 2)
        if shuffle:
          batch, order = shuffled_batch(c, data, key, start + i)
          c = c._replace(order=order)
        else:
          batch = sample_batch(data, c.log_prob, key, size)
        agent, info = getattr(c.agent, method)(batch)
        return c._replace(agent=agent, sampler=sampler), info
      carry, infos = jax.lax.scan(step, carry, jnp.arange(num, dtype=jnp.int32))
      return carry, jax.tree.map(jnp.mean, infos)
    return jax.jit(jax.vmap(run, in_axes=(0, None, None)))

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
    return carry._replace(agent=agent, sampler=sampler, log_prob=lp)

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
      carry, record = compiled[(kind, size)](carry, data, jnp.int32(starts[i]))
      if kind == "pretrain":
        return carry, None, steps_done
      steps_done += size
      record["step"] = jnp.full((len(keys),), steps_done)
      if eval_fn is not None:
        seed_keys = jax.random.split(eval_keys[i], len(keys))
        record.update({f"eval/{k}": v for k, v in eval_fn(seed_keys, carry.agent).items()})
      return carry, record, steps_done

    fingerprint = {"agent": agent_cls.__name__, "config": config, "train_config": tc,
                   "plan": plan, "pretrain": pre._asdict(), "keys": keys, "dataset": data,
                   "evaluate": getattr(evaluate_fn, "__qualname__", repr(evaluate_fn))}
    carry, history = run_chunks(init_fn(keys), len(plan), run_chunk,
                                checkpoint_dir=checkpoint_dir, stop_after=stop_after,
                                fingerprint=fingerprint)
    stacked = {k: np.stack([h[k] for h in history]) for k in (history[0] if history else {})}
    return carry.agent, stacked

  return train


def _chunks(total: int, size: int) -> list[int]:
  return [size] * (total // size) + ([total % size] if total % size else [])
