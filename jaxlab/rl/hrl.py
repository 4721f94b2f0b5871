"""Goal-conditioned hierarchical RL: FLAT, HIER and DIPPER in one scanned, seed-vmapped loop.

Every iteration collects ``num_envs`` fixed-length episodes with vmapped
environments, stores them in an episode replay buffer, and trains:

* the low level (:class:`~jaxlab.rl.agents.gcsac.SACAgent`) on
  hindsight-relabelled transitions ("future" strategy: with probability
  ``her_prob`` the goal becomes an achieved goal later in the episode; reward
  ``-1[||achieved(s') - g|| > threshold]``);
* ``agent="flat"``: nothing else (the low level pursues the task goal);
* ``agent="hier"``: a high-level SAC proposing a subgoal every ``c`` steps,
  trained on the environment's sparse reward summed over each window (with
  the same hindsight relabelling of the task goal), the non-stationary
  baseline;
* ``agent="dipper"``: the high level trained by DPO on preferences between
  pairs of its episodes plus the low-level value term
  (:mod:`jaxlab.rl.agents.dipper`); ``V^L_m`` is the low level after ``m``
  extra SAC steps on fresh batches, recomputed every iteration.

After every iteration an evaluation on ``eval_envs`` episodes (deterministic
low level; high level by ``eval_high``: its mean subgoal by default, or sampled)
reports the success rate and DIPPER's diagnostics: subgoal distance (the
state reached at the end of a window vs the subgoal proposed for it), the
low-level Q of proposed subgoals, the fraction of subgoals inside walls and
the mean subgoal step length. ``make_train(env, env_params, config)`` returns
``train(keys, checkpoint_dir=None, stop_after=None)``: chunks of
``iters_per_chunk`` iterations are one ``jax.jit(jax.vmap(lax.scan))`` each,
checkpointed with orbax after each chunk and resumed exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.rng import split_key_data as split
from jaxlab.rl.agents.dipper import DipperConfig, DipperHigh, preference_labels, window_scores
from jaxlab.rl.agents.gcsac import SACAgent, SACConfig
from jaxlab.training.chunks import run_chunks

AGENTS = ("flat", "hier", "dipper")
HIGH_MODES = ("mean", "sample", "uniform")  # rollout's high-level subgoal choices
EVAL_HIGH = ("mean", "sample")  # HRLConfig.eval_high


@dataclasses.dataclass(frozen=True)
class HRLConfig:
  """The hierarchy, the data collection and the update schedule."""

  agent: str = "dipper"  # "flat", "hier" or "dipper"
  subgoal_period: int = 15  # c: low-level steps per subgoal (15 maze, 7 push)
  num_windows: int = 15  # H: subgoals per episode; episode length T = c * H
  num_envs: int = 16  # training episodes collected per iteration
  iterations: int = 100  # total iterations (env steps = iterations * num_envs * T)
  iters_per_chunk: int = 10  # iterations per jitted chunk (checkpoint after each)
  low_updates: int = 50  # low-level SAC steps per iteration
  high_updates: int = 10  # high-level steps per iteration (HIER, DIPPER)
  buffer_episodes: int = 512  # replay capacity in episodes
  her_prob: float = 0.8  # hindsight relabelling probability
  eval_envs: int = 32  # deterministic evaluation episodes per iteration
  # evaluation's high-level subgoals: "mean" (tanh of the Gaussian mean, the recorded
  # default) or "sample" (the stochastic policy, as in training); the low level is
  # deterministic in evaluation either way
  eval_high: str = "mean"
  low: SACConfig = SACConfig(hidden_dims=(64, 64))
  high: SACConfig = SACConfig(hidden_dims=(64, 64))  # HIER's high level
  dipper: DipperConfig = DipperConfig(hidden_dims=(64, 64))  # DIPPER's high level


class Buffer(NamedTuple):
  """Episode replay: ``E`` episodes of ``T`` steps each (ring buffer)."""

  obs: jax.Array  # (E, T + 1, obs_dim)
  ach: jax.Array  # (E, T + 1, g) achieved goals
  act: jax.Array  # (E, T, A) low-level actions
  sub: jax.Array  # (E, T, g) goal the low level pursued at each step
  high_act: jax.Array  # (E, H, g) high-level actions in [-1, 1]
  desired: jax.Array  # (E, g) task goal
  ptr: jax.Array
  size: jax.Array


class HRLState(NamedTuple):
  low: SACAgent
  high: Any  # SACAgent (hier), DipperHigh (dipper) or None (flat)
  buffer: Buffer
  rng: jax.Array  # raw key data


def check_config(config: HRLConfig) -> None:
  if config.agent not in AGENTS:
    raise ValueError(f"config.agent must be one of {AGENTS}, got {config.agent!r}")
  for name in ("subgoal_period", "num_windows", "num_envs", "iterations", "iters_per_chunk",
               "low_updates", "buffer_episodes", "eval_envs"):
    if int(getattr(config, name)) < 1:
      raise ValueError(f"config.{name} must be >= 1, got {getattr(config, name)}")
  if config.eval_high not in EVAL_HIGH:
    raise ValueError(f"config.eval_high must be one of {EVAL_HIGH}, got {config.eval_high!r}")
  if config.high_updates < 0 or not 0 <= config.her_prob <= 1:
    raise ValueError(f"config.high_updates must be >= 0 and her_prob in [0, 1], got "
                     f"{config.high_updates}, {config.her_prob}")


# -- replay sampling: pure functions of a buffer (the random draws, then the relabelling) ----
# A buffer's shapes fix the hierarchy: T = buffer.act.shape[1] low-level steps, H =
# buffer.high_act.shape[1] windows of c = T // H steps; window k starts at step k * c.


def future_index(t: jax.Array, u: jax.Array, last: int) -> jax.Array:
  """HER's "future" index, uniform over ``t + 1 .. last`` given ``u`` uniform in [0, 1)."""
  return t + 1 + jnp.floor(u * (last - t)).astype(jnp.int32)


def low_batch(buffer: Buffer, e: jax.Array, t: jax.Array, future: jax.Array, her: jax.Array,
              threshold: Any) -> dict:
  """Low-level transitions ``(e, t)`` with hindsight relabelling.

  The goal is the achieved goal at step ``future`` where ``her``, else the goal the
  low level pursued at ``t``; reward ``-1[||achieved(s_{t+1}) - goal|| > threshold]``.
  """
  goal = jnp.where(her[:, None], buffer.ach[e, future], buffer.sub[e, t])
  far = jnp.linalg.norm(buffer.ach[e, t + 1] - goal, axis=-1) > threshold
  return {"observations": buffer.obs[e, t], "goals": goal, "actions": buffer.act[e, t],
          "rewards": -far.astype(jnp.float32), "next_observations": buffer.obs[e, t + 1],
          "masks": jnp.ones(e.shape[0])}


def _draw(buffer: Buffer, key: jax.Array, batch_size: int, length: int,
          her_prob: Any) -> tuple[jax.Array, ...]:
  """Uniform stored episodes ``e`` and positions ``i < length``, a future index per
  position and the HER coin: what both levels' samplers draw, in this key order."""
  k_e, k_i, k_f, k_her = jax.random.split(key, 4)
  e = jax.random.randint(k_e, (batch_size,), 0, buffer.size)
  i = jax.random.randint(k_i, (batch_size,), 0, length)
  future = future_index(i, jax.random.uniform(k_f, (batch_size,)), length)
  her = jax.random.uniform(k_her, (batch_size,)) < her_prob
  return e, i, future, her


def sample_low(buffer: Buffer, key: jax.Array, batch_size: int, her_prob: Any,
               threshold: Any) -> dict:
  """:func:`low_batch` at uniform stored episodes and steps, HER with ``her_prob``."""
  e, t, future, her = _draw(buffer, key, batch_size, buffer.act.shape[1], her_prob)
  return low_batch(buffer, e, t, future, her, threshold)


def high_batch(buffer: Buffer, e: jax.Array, k: jax.Array, future: jax.Array, her: jax.Array,
               threshold: Any) -> dict:
  """HIER's high-level transitions: window ``k`` of episode ``e``, hindsight-relabelled.

  The goal is the achieved goal at the end of window ``future - 1`` (step ``future * c``)
  where ``her``, else the task goal; the reward sums ``-1[far from the goal]`` over the
  window's ``c`` states.
  """
  c = buffer.act.shape[1] // buffer.high_act.shape[1]
  goal = jnp.where(her[:, None], buffer.ach[e, future * c], buffer.desired[e])
  steps = k[:, None] * c + 1 + jnp.arange(c)[None, :]  # (B, c) states inside the window
  far = jnp.linalg.norm(buffer.ach[e[:, None], steps] - goal[:, None], axis=-1) > threshold
  return {"observations": buffer.obs[e, k * c], "goals": goal, "actions": buffer.high_act[e, k],
          "rewards": -jnp.sum(far, axis=-1).astype(jnp.float32),
          "next_observations": buffer.obs[e, (k + 1) * c], "masks": jnp.ones(e.shape[0])}


def sample_high(buffer: Buffer, key: jax.Array, batch_size: int, her_prob: Any,
                threshold: Any) -> dict:
  """:func:`high_batch` at uniform stored episodes and windows, HER with ``her_prob``."""
  e, k, future, her = _draw(buffer, key, batch_size, buffer.high_act.shape[1], her_prob)
  return high_batch(buffer, e, k, future, her, threshold)


def preference_pairs(buffer: Buffer, e1: jax.Array, e2: jax.Array, end: jax.Array,
                     relabel: jax.Array, threshold: Any) -> dict:
  """DIPPER's pairs of whole high-level episodes, relabelled to one shared goal.

  The shared goal is episode ``e1``'s achieved goal at the end of window ``end``
  (``1 <= end <= H``) where ``relabel``, else ``e1``'s task goal; both episodes are scored
  against it (:func:`~jaxlab.rl.agents.dipper.window_scores` on the states at the ends
  of their windows) and labelled by :func:`~jaxlab.rl.agents.dipper.preference_labels`.
  """
  num_windows = buffer.high_act.shape[1]
  c = buffer.act.shape[1] // num_windows
  goal = jnp.where(relabel[:, None], buffer.ach[e1, end * c], buffer.desired[e1])
  ends = (jnp.arange(num_windows) + 1) * c
  starts = jnp.arange(num_windows) * c
  s1 = window_scores(buffer.ach[e1][:, ends], goal, threshold)
  s2 = window_scores(buffer.ach[e2][:, ends], goal, threshold)
  return {"obs1": buffer.obs[e1][:, starts], "obs2": buffer.obs[e2][:, starts],
          "act1": buffer.high_act[e1], "act2": buffer.high_act[e2], "goal": goal,
          "label": preference_labels(s1, s2)}


def value_gap(low: Any, low_m: Any, obs: jax.Array, act: jax.Array, key: jax.Array
              ) -> jax.Array:
  """``(V^L - V^L_m)(s_t, g_t)`` per window, ``(B, H)``, without gradient.

  ``obs`` ``(B, H, obs_dim)`` window starts, ``act`` ``(B, H, g)`` high-level actions in
  [-1, 1] (subgoal ``g = (a + 1) / 2``); both values use the same noise ``key``.
  """
  o = obs.reshape(-1, obs.shape[-1])
  g = ((act + 1.0) / 2.0).reshape(-1, act.shape[-1])
  gap = low.value(o, g, key) - low_m.value(o, g, key)
  return jax.lax.stop_gradient(gap.reshape(act.shape[:2]))


def sample_pairs(buffer: Buffer, key: jax.Array, low: Any, low_m: Any, batch_size: int,
                 relabel_prob: Any, threshold: Any) -> dict:
  """:func:`preference_pairs` of two uniform stored episodes (shared goal with
  ``relabel_prob``, at a uniform window end), with each side's :func:`value_gap`."""
  num_windows = buffer.high_act.shape[1]
  k1, k2, k_r, k_k, k_v = jax.random.split(key, 5)
  e1 = jax.random.randint(k1, (batch_size,), 0, buffer.size)
  e2 = jax.random.randint(k2, (batch_size,), 0, buffer.size)
  relabel = jax.random.uniform(k_r, (batch_size,)) < relabel_prob
  end = jax.random.randint(k_k, (batch_size,), 1, num_windows + 1)
  pairs = preference_pairs(buffer, e1, e2, end, relabel, threshold)
  for i in ("1", "2"):
    pairs["dv" + i] = value_gap(low, low_m, pairs["obs" + i], pairs["act" + i], k_v)
  return pairs


def make_train(env: Any, env_params: Any, config: HRLConfig):
  """Builds ``train(keys, checkpoint_dir=None, stop_after=None) -> (state, history)``.

  ``train.rollout(key, low, high, high_mode, low_deterministic) -> (episode, metrics)``
  is the one-episode rollout that training and evaluation share (one seed's agents).
  """
  check_config(config)
  c, num_windows = config.subgoal_period, config.num_windows
  horizon = c * num_windows
  hierarchical = config.agent != "flat"
  threshold = env.goal_threshold(env_params)

  def init(key) -> HRLState:
    k_low, k_high, k_env, rng = jax.random.split(key, 4)
    obs, state = env.reset_env(k_env, env_params)
    goal = env.desired_goal(state, env_params)
    action = jnp.zeros(env.action_space(env_params).shape)
    low = SACAgent.create(k_low, obs, goal, action, config.low)
    high = None
    if config.agent == "hier":
      high = SACAgent.create(k_high, obs, goal, goal, config.high)
    elif config.agent == "dipper":
      high = DipperHigh.create(k_high, obs, goal, goal.shape[-1], config.dipper)
    e = config.buffer_episodes
    buffer = Buffer(
        obs=jnp.zeros((e, horizon + 1) + obs.shape), ach=jnp.zeros((e, horizon + 1) + goal.shape),
        act=jnp.zeros((e, horizon) + action.shape), sub=jnp.zeros((e, horizon) + goal.shape),
        high_act=jnp.zeros((e, num_windows) + goal.shape), desired=jnp.zeros((e,) + goal.shape),
        ptr=jnp.int32(0), size=jnp.int32(0))
    return HRLState(low, high, buffer, jax.random.key_data(rng))

  def rollout(key, low: SACAgent, high: Any, high_mode: str | jax.Array,
              low_deterministic: bool | jax.Array):
    """One episode of T steps (no early reset): its arrays and its diagnostics.

    ``high_mode`` (one of :data:`HIGH_MODES`) picks each window's high-level action:
    ``"mean"`` tanh of the policy's Gaussian mean, ``"sample"`` a draw from the policy,
    ``"uniform"`` uniform in [-1, 1] (ignoring the policy: a random-subgoal baseline).
    Training uses ``("sample", False)``, evaluation ``(config.eval_high, True)``.

    Either choice may also be a run-time value: ``high_mode`` an integer array indexing
    :data:`HIGH_MODES`, ``low_deterministic`` a boolean array. The rollout then branches
    at run time (``lax.switch`` / ``lax.cond``: the chosen branch computes what the static
    choice does), so one compiled program serves every choice.
    """
    if isinstance(high_mode, str):
      if high_mode not in HIGH_MODES:
        raise ValueError(f"high_mode must be one of {HIGH_MODES}, got {high_mode!r}")
    elif not jnp.issubdtype(jnp.result_type(high_mode), jnp.integer):
      raise TypeError(f"high_mode must be one of {HIGH_MODES} or an integer array indexing "
                      f"them, got {high_mode!r}")
    k_reset, k_run = jax.random.split(key)
    obs, state = env.reset_env(k_reset, env_params)
    desired = env.desired_goal(state, env_params)

    def step(carry, inp):
      obs, state, sub, hact, success = carry
      t, key = inp
      k_high, k_low, k_env = jax.random.split(key, 3)
      if hierarchical:
        def high_action(mode: str) -> jax.Array:
          if mode == "uniform":
            return jax.random.uniform(k_high, desired.shape, minval=-1.0, maxval=1.0)
          return high.sample_actions(obs[None], desired[None], k_high, mode == "mean")[0]

        new = (high_action(high_mode) if isinstance(high_mode, str) else jax.lax.switch(
            high_mode, [functools.partial(high_action, m) for m in HIGH_MODES]))
        start = t % c == 0
        hact = jnp.where(start, new, hact)
        sub = jnp.where(start, (hact + 1.0) / 2.0, sub)
      else:
        sub, start = desired, t % c == 0
      low_action = lambda det: low.sample_actions(obs[None], sub[None], k_low, det)[0]
      action = (low_action(bool(low_deterministic))
                if isinstance(low_deterministic, (bool, np.bool_)) else
                jax.lax.cond(low_deterministic, lambda: low_action(True),
                             lambda: low_action(False)))
      record = {"obs": obs, "ach": env.achieved_goal(state, env_params), "act": action,
                "sub": sub, "hact": hact, "start": start,
                "in_wall": env.subgoal_in_wall(state, sub)}
      obs, state, _, reached, _ = env.step_env(k_env, state, action, env_params)
      return (obs, state, sub, hact, success | reached), record

    init_carry = (obs, state, desired, jnp.zeros_like(desired), jnp.bool_(False))
    (obs_T, state_T, _, _, success), rec = jax.lax.scan(
        step, init_carry, (jnp.arange(horizon), jax.random.split(k_run, horizon)))
    ach = jnp.concatenate([rec["ach"], env.achieved_goal(state_T, env_params)[None]])
    episode = {"obs": jnp.concatenate([rec["obs"], obs_T[None]]), "ach": ach,
               "act": rec["act"], "sub": rec["sub"], "high_act": rec["hact"][::c],
               "desired": desired}
    starts = jnp.arange(num_windows) * c
    sub_k = rec["sub"][starts]
    q = low.q(rec["obs"][starts], sub_k, low.sample_actions(rec["obs"][starts], sub_k, k_run,
                                                             True))
    metrics = {"success": success.astype(jnp.float32),
               "subgoal_distance": jnp.linalg.norm(ach[starts + c] - sub_k, axis=-1).mean(),
               "subgoal_step": jnp.linalg.norm(sub_k - ach[starts], axis=-1).mean(),
               "lower_q": jnp.min(q, axis=0).mean(),
               "subgoal_in_wall": rec["in_wall"][starts].astype(jnp.float32).mean()}
    return episode, metrics

  def add(buffer: Buffer, ep: dict) -> Buffer:
    n = ep["obs"].shape[0]
    idx = (buffer.ptr + jnp.arange(n)) % config.buffer_episodes
    return Buffer(obs=buffer.obs.at[idx].set(ep["obs"]), ach=buffer.ach.at[idx].set(ep["ach"]),
                  act=buffer.act.at[idx].set(ep["act"]), sub=buffer.sub.at[idx].set(ep["sub"]),
                  high_act=buffer.high_act.at[idx].set(ep["high_act"]),
                  desired=buffer.desired.at[idx].set(ep["desired"]),
                  ptr=(buffer.ptr + n) % config.buffer_episodes,
                  size=jnp.minimum(buffer.size + n, config.buffer_episodes))

  def scan_updates(agent, sampler, key, num: int):
    def body(a, k):
      a, info = a.update(sampler(k))
      return a, info
    agent, infos = jax.lax.scan(body, agent, jax.random.split(key, num))
    return agent, jax.tree.map(jnp.mean, infos)

  # DIPPER's V^L_m is the low level after m more SAC steps (keys from k_m) than its
  # low_updates steps (keys from k_low). One scan runs all low_updates + m steps and keeps
  # the agent after the first low_updates: one SAC update in the compiled program instead of
  # two (the same steps, batches and keys as two scans; the info averages the first ones).
  extra_m = config.dipper.m if config.agent == "dipper" and config.high_updates else 0

  def low_level_updates(low, sampler, k_low, k_m):
    """``(low after low_updates steps, its info, low after m more steps)``."""
    n = config.low_updates
    if not extra_m:
      low, info = scan_updates(low, sampler, k_low, n)
      return low, info, low

    def body(carry, inp):
      a, kept = carry
      k, i = inp
      a, info = a.update(sampler(k))
      kept = jax.tree.map(lambda new, old: jnp.where(i == n - 1, new, old), a, kept)
      return (a, kept), info

    keys = jnp.concatenate([jax.random.split(k_low, n), jax.random.split(k_m, extra_m)])
    (low_m, low), infos = jax.lax.scan(body, (low, low), (keys, jnp.arange(n + extra_m)))
    return low, jax.tree.map(lambda x: jnp.mean(x[:n]), infos), low_m

  def iteration(s: HRLState, eval_mode: jax.Array) -> tuple[HRLState, dict]:
    rng, k_roll, k_low, k_high, k_m, k_eval = split(s.rng, 6)
    episodes, train_m = jax.vmap(lambda k: rollout(k, s.low, s.high, "sample", False))(
        jax.random.split(k_roll, config.num_envs))
    buffer = add(s.buffer, episodes)
    low_sampler = lambda k: sample_low(buffer, k, config.low.batch_size, config.her_prob,
                                       threshold)
    low, info, low_m = low_level_updates(s.low, low_sampler, k_low, k_m)
    high = s.high
    if config.agent == "hier" and config.high_updates:
      high, high_info = scan_updates(
          high, lambda k: sample_high(buffer, k, config.high.batch_size, config.her_prob,
                                      threshold), k_high, config.high_updates)
      info.update({k.replace("low/", "high/"): v for k, v in high_info.items()})
    elif config.agent == "dipper" and config.high_updates:
      high, high_info = scan_updates(
          high, lambda k: sample_pairs(buffer, k, low, low_m, config.dipper.batch_size,
                                       config.dipper.relabel_prob, threshold),
          k_high, config.high_updates)
      info.update(high_info)
    _, eval_m = jax.vmap(lambda k: rollout(k, low, high, eval_mode, True))(
        jax.random.split(k_eval, config.eval_envs))
    metrics = {**info, **{f"eval/{k}": v.mean() for k, v in eval_m.items()},
               "train/success": train_m["success"].mean()}
    return HRLState(low, high, buffer, rng), metrics

  def chunk(s: HRLState, eval_mode: jax.Array, num: int):
    return jax.lax.scan(lambda s, _: iteration(s, eval_mode), s, None, length=num)

  sizes = [config.iters_per_chunk] * (config.iterations // config.iters_per_chunk)
  if config.iterations % config.iters_per_chunk:
    sizes.append(config.iterations % config.iters_per_chunk)
  # The evaluation's high-level choice (config.eval_high) is an argument, not a constant
  # of the program: one compilation serves both (JAX's persistent cache, where it is on,
  # shares it between runs that differ only there or in DIPPER's lambda).
  compiled = {n: jax.jit(jax.vmap(lambda s, mode, n=n: chunk(s, mode, n), in_axes=(0, None)))
              for n in set(sizes)}
  eval_mode = np.int32(HIGH_MODES.index(config.eval_high))
  init_fn = jax.jit(jax.vmap(init))  # built once: every train() call reuses its compilation
  steps_per_iter = config.num_envs * horizon

  def train(keys: jax.Array, checkpoint_dir: str | None = None, stop_after: int | None = None):
    def run_chunk(i, state, done_iters):
      state, metrics = compiled[sizes[i]](state, eval_mode)  # metrics: (seeds, iters)
      iters = done_iters + 1 + np.arange(sizes[i])
      record = {k: np.asarray(v).T for k, v in metrics.items()}  # (iters, seeds)
      record["env_steps"] = np.repeat((iters * steps_per_iter)[:, None], len(keys), axis=1)
      return state, record, done_iters + sizes[i]

    fingerprint = {"env": type(env).__name__, "env_params": env_params, "config": config,
                   "chunks": sizes, "keys": keys}
    state, history = run_chunks(init_fn(keys), len(sizes), run_chunk,
                                checkpoint_dir=checkpoint_dir, stop_after=stop_after,
                                desc=config.agent, fingerprint=fingerprint)
    stacked = {k: np.concatenate([h[k] for h in history]) for k in (history[0] if history else {})}
    return state, stacked

  train.rollout = rollout  # for diagnostics: evaluate trained agents in other modes
  return train
