r"""LLMs are greedy agents: measuring greediness, frequency bias and the knowing-doing gap of a
sequence policy on K-armed bandits, and closing them by RL fine-tuning.

The paper finds three failure modes of LLM agents on bandits and fixes them by RL fine-tuning
(RLFT) on self-generated rationales:

* **greediness**: the action coverage :math:`C_t = |\{a : N_t(a) > 0\}| / K` stays low;
* **frequency bias**: an action repeated in the context is picked again regardless of its
  reward (the share of picks going to the repeated action, and the action entropy);
* **knowing-doing gap**: the rationale computes the UCB arm correctly, yet the action
  taken is another (the greedy one): :math:`P(a = \text{rationale} \mid \text{rationale
  correct})` is low.

RLFT samples :math:`z = [\text{CoT}; a]` per step and maximises the clipped surrogate minus
:math:`\beta\,\mathrm{KL}(\pi_\theta \| \pi_{\mathrm{ref}})` with Monte-Carlo returns-to-go
as advantages; the per-step reward is

.. math::
  r_t = r^{\mathrm{env}}_t / s \;-\; 5\cdot\mathbb 1[a_t \text{ invalid}]
        \;+\; b\cdot\mathbb 1[a_t \text{ untried}],

with the optional exploration bonus :math:`b = 1` for an arm not pulled before.

What is the paper's and what is ours. The paper fine-tunes Gemma-2 (2B-27B) whose
rationales are free text and whose biases come from pretraining. Here the policy is a small
:class:`jaxlab.models.transformer.Transformer` over action-reward tokens (per step: a
rationale token ``why_k`` = "the UCB arm is k", an action token ``arm_a``, then the
environment's reward-bin token); the biases are *given* to it by behaviour cloning of greedy
and copy traces with a share of UCB episodes (:func:`behaviour_traces`), the rationale
supervised by the true UCB arm (:func:`ucb_arm`), so the model "knows" UCB but mostly
"does" greedy/copy: the gap is built in, and what is tested is whether RLFT closes it. The
clipped surrogate, the k3 KL and the update are the toolkit's
(:mod:`jaxlab.models.policy_gradient`). Our choices: UCB's exploration constant ``c``
(UCB1's :math:`\sqrt 2` by default), returns-to-go standardised per step over the episodes
played on the same arm means (a group baseline; the paper states Monte-Carlo returns), and
an invalid action (any non-arm token in the action slot) pulling no arm (the environment's
rule).

Example:
  >>> spec = TokenSpec(num_arms=5)
  >>> trace = behaviour_traces(key, params, 1024, c=0.5)           # greedy / copy, UCB labels
  >>> tokens = episode_tokens(spec, trace.actions, trace.ucb, trace.rewards)
  >>> params, _ = tfm.fit_next_token(key, cfg, tokens, loss_mask(spec, 50), opt, ...)
  >>> iteration = make_rlft(net, opt, ref_params, spec, env_params, RLFTConfig())
  >>> state, info = iteration(RLState(params, opt.init(params)), key, Shaping(5.0, 1.0), True)
  >>> ep = rollout(net, key, means, spec, env_params, c=0.5)
  >>> episode_metrics(ep.actions, ep.means, ep.ucb, ep.greedy, ep.rationales)

References:
  Schmied et al., "LLMs are Greedy Agents: Effects of RL Fine-tuning on Decision-Making
  Abilities", arXiv:2504.16078 (ICLR 2026).
  Auer, Cesa-Bianchi, Fischer, "Finite-time Analysis of the Multiarmed Bandit Problem",
  Machine Learning 47, 2002 (UCB1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.envs import bandits
from jaxlab.envs.bandits import BanditParams
from jaxlab.models import decoding
from jaxlab.models import policy_gradient as pg
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

UCB1_C = math.sqrt(2.0)  # UCB1: mean + sqrt(2 ln t / N)
BASELINES = ("ucb", "random", "greedy", "copy")


# ---------------------------------------------------------------------------
# Statistics of a history and the UCB / greedy choices.


def arm_stats(actions: jax.Array, rewards: jax.Array, num_arms: int
              ) -> tuple[jax.Array, jax.Array]:
  """``(counts, sums)`` ``(..., K)`` of a history ``actions, rewards (..., T)``; an action
  outside ``[0, K)`` (invalid, or -1 for "none") counts for no arm."""
  onehot = jax.nn.one_hot(actions, num_arms)  # an out-of-range id gives a zero row
  return onehot.sum(-2), jnp.sum(onehot * rewards[..., None], -2)


def prefix_stats(actions: jax.Array, rewards: jax.Array, num_arms: int
                 ) -> tuple[jax.Array, jax.Array]:
  """``(counts, sums)`` ``(..., T, K)`` of the history *before* each step (step 0: zeros)."""
  onehot = jax.nn.one_hot(actions, num_arms)
  paid = onehot * rewards[..., None]
  return jnp.cumsum(onehot, -2) - onehot, jnp.cumsum(paid, -2) - paid


def ucb_index(counts: jax.Array, sums: jax.Array, c: float | jax.Array = UCB1_C) -> jax.Array:
  r"""``mean_a + c sqrt(ln t / N_a)`` with ``t = sum_a N_a``; ``+inf`` for an untried arm."""
  t = jnp.maximum(counts.sum(-1, keepdims=True), 1.0)
  n = jnp.maximum(counts, 1.0)
  return jnp.where(counts > 0, sums / n + c * jnp.sqrt(jnp.log(t) / n), jnp.inf)


def ucb_arm(counts: jax.Array, sums: jax.Array, c: float | jax.Array = UCB1_C) -> jax.Array:
  """UCB's choice (the first untried arm, else the highest index; ties: the lowest arm)."""
  return jnp.argmax(ucb_index(counts, sums, c), -1).astype(jnp.int32)


def greedy_arm(counts: jax.Array, sums: jax.Array) -> jax.Array:
  """The arm of highest empirical mean among the tried ones (ties: the lowest); -1 when
  nothing was tried."""
  mean = jnp.where(counts > 0, sums / jnp.maximum(counts, 1.0), -jnp.inf)
  return jnp.where(counts.sum(-1) > 0, jnp.argmax(mean, -1), -1).astype(jnp.int32)


# ---------------------------------------------------------------------------
# The paper's metrics.


def coverage(actions: jax.Array, num_arms: int) -> jax.Array:
  """``C_t = |{a : N_t(a) > 0}| / K`` after each step, ``(..., T)``."""
  pulled = jnp.cumsum(jax.nn.one_hot(actions, num_arms), -2) > 0
  return pulled.mean(-1)


def step_regret(actions: jax.Array, means: jax.Array) -> jax.Array:
  """``max(mu) - mu_{a_t}`` per step ``(..., T)`` (``means (..., K)``); an invalid action
  counts as the worst arm (the environment's rule)."""
  k = means.shape[-1]
  valid = (actions >= 0) & (actions < k)
  mu = jnp.take_along_axis(means, jnp.clip(actions, 0, k - 1), -1)
  best, worst = means.max(-1, keepdims=True), means.min(-1, keepdims=True)
  return jnp.where(valid, best - mu, best - worst)


def cumulative_regret(actions: jax.Array, means: jax.Array) -> jax.Array:
  """Pseudo-regret ``sum_{s <= t} (max(mu) - mu_{a_s})`` after each step, ``(..., T)``."""
  return jnp.cumsum(step_regret(actions, means), -1)


def _rate(hit: jax.Array, where: jax.Array) -> jax.Array:
  where = jnp.asarray(where, jnp.float32)
  count = where.sum()
  return jnp.where(count > 0, jnp.sum(hit * where) / jnp.maximum(count, 1.0), jnp.nan)


def knowing_doing(rationales: jax.Array, actions: jax.Array, ucb: jax.Array,
                  greedy: jax.Array) -> dict[str, jax.Array]:
  """The knowing-doing gap over all steps given: the rationale is *correct* when it names
  the UCB arm ``ucb``.

  Returns:
    ``rationale_correct`` ``P(rationale = UCB)``, ``act_rationale_given_correct``
    ``P(a = rationale | correct)`` (the paper's "optimal action" rate),
    ``act_greedy_given_correct`` ``P(a = greedy | correct)`` and ``act_ucb`` ``P(a = UCB)``
    (NaN where the condition never holds).
  """
  correct = rationales == ucb
  return {"rationale_correct": correct.mean(),
          "act_rationale_given_correct": _rate(actions == rationales, correct),
          "act_greedy_given_correct": _rate(actions == greedy, correct),
          "act_ucb": (actions == ucb).mean()}


def frequency_histories(key: jax.Array, params: BanditParams, num: int, repeats: int
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Histories for the frequency-bias probe: every arm once in a random order, then one
  target arm ``repeats`` times; all rewards are drawn from one distribution (Bernoulli(0.5)
  or ``N(0, noise^2)``), so the repeated arm is no better than the others.

  Returns:
    ``(actions, rewards, targets)``: ``(num, K + repeats)`` twice and ``(num,)``.
  """
  if not isinstance(num, int) or num < 1:
    raise ValueError(f"num must be a positive int, got {num!r}")
  if not isinstance(repeats, int) or repeats < 0:
    raise ValueError(f"repeats must be a non-negative int, got {repeats!r}")
  return _frequency_histories(key, params, num, repeats)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _frequency_histories(key, params, num, repeats):
  k = params.num_arms
  k_perm, k_target, k_reward = jax.random.split(key, 3)
  first = jax.vmap(lambda kk: jax.random.permutation(kk, k))(jax.random.split(k_perm, num))
  targets = jax.random.randint(k_target, (num,), 0, k)
  actions = jnp.concatenate([first, jnp.repeat(targets[:, None], repeats, 1)], 1)
  shape = actions.shape
  if params.kind == "bernoulli":
    rewards = jax.random.bernoulli(k_reward, 0.5, shape).astype(jnp.float32)
  else:
    rewards = params.noise * jax.random.normal(k_reward, shape)
  return actions.astype(jnp.int32), rewards, targets.astype(jnp.int32)


def frequency_bias(action_probs: jax.Array, targets: jax.Array) -> dict[str, jax.Array]:
  """Share of the pick probability on the repeated arm, and the mean action entropy (nats)
  of the distributions over the arms ``action_probs (..., K)`` (renormalised over the arms)."""
  share = jnp.take_along_axis(action_probs, targets[..., None], -1)[..., 0]
  p = action_probs / jnp.maximum(action_probs.sum(-1, keepdims=True), 1e-12)
  entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), -1)
  return {"share": share.mean(), "entropy": entropy.mean()}


def episode_metrics(actions: jax.Array, means: jax.Array, ucb: jax.Array, greedy: jax.Array,
                    rationales: jax.Array | None = None) -> dict[str, jax.Array]:
  """Means over episodes ``(E, T)``: the regret and coverage curves ``(T,)``, the final
  regret and coverage, the share of invalid actions, and (with rationales) the
  knowing-doing rates; without rationales ``act_ucb`` and ``act_greedy`` only."""
  k = means.shape[-1]
  regret = cumulative_regret(actions, means)
  cov = coverage(actions, k)
  out = {"regret_curve": regret.mean(0), "coverage_curve": cov.mean(0),
         "regret": regret[:, -1].mean(), "coverage": cov[:, -1].mean(),
         "invalid": ((actions < 0) | (actions >= k)).mean(),
         "act_ucb": (actions == ucb).mean(), "act_greedy": (actions == greedy).mean()}
  if rationales is not None:
    out.update(knowing_doing(rationales, actions, ucb, greedy))
  return out


# ---------------------------------------------------------------------------
# Baselines and behaviour policies, rolled out in one scan (vmapped over episodes).


class Trace(NamedTuple):
  """Episodes ``(E, T)`` of a scripted policy, with UCB's and greedy's choice at each step
  (from the history before it) and the arm means ``(E, K)``."""

  actions: jax.Array
  rewards: jax.Array
  ucb: jax.Array
  greedy: jax.Array
  means: jax.Array


def _choose(policy: str, key: jax.Array, counts: jax.Array, sums: jax.Array, t: jax.Array,
            c: float, eps: float) -> jax.Array:
  k = counts.shape[-1]
  k_rand, k_eps, k_tie = jax.random.split(key, 3)
  rand = jax.random.randint(k_rand, (), 0, k)
  if policy == "ucb":
    return ucb_arm(counts, sums, c)
  if policy == "random":
    return rand
  if policy == "greedy":  # epsilon-greedy over the tried arms, ties broken at random
    score = jnp.where(counts > 0, sums / jnp.maximum(counts, 1.0), -jnp.inf)
  else:  # "copy": repeat the most frequent action
    score = counts
  tie = jax.random.uniform(k_tie, (k,)) * 1e-6  # below any gap between distinct scores
  pick = jnp.argmax(jnp.where(score == score.max(), 1.0 + tie, 0.0))
  explore = (t == 0) | (jax.random.uniform(k_eps) < eps)
  return jnp.where(explore, rand, pick).astype(jnp.int32)


def _play(key: jax.Array, means: jax.Array, params: BanditParams, horizon: int,
          choose: Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array],
          c: float):
  k = params.num_arms

  def step(carry, inp):
    counts, sums = carry
    key, t = inp
    k_a, k_r = jax.random.split(key)
    a = choose(k_a, counts, sums, t)
    r, _, _ = bandits.pull(k_r, means, a, params)
    hot = jax.nn.one_hot(a, k)
    out = (a, r, ucb_arm(counts, sums, c), greedy_arm(counts, sums))
    return (counts + hot, sums + hot * r), out

  zeros = jnp.zeros(k)
  _, (a, r, u, g) = jax.lax.scan(step, (zeros, zeros),
                                 (jax.random.split(key, horizon), jnp.arange(horizon)))
  return a, r, u, g


def _check_policy(policy: str) -> None:
  if policy not in BASELINES:
    raise ValueError(f"policy must be one of {BASELINES}, got {policy!r}")


def run_baseline(key: jax.Array, params: BanditParams, policy: str, num_episodes: int, *,
                 c: float = UCB1_C, eps: float = 0.1, horizon: int = bandits.HORIZON,
                 means: jax.Array | None = None) -> Trace:
  """``num_episodes`` episodes of a scripted policy: ``"ucb"`` (index with constant
  ``c``), ``"random"``, ``"greedy"`` (epsilon-greedy on the tried arms) or ``"copy"``
  (epsilon-random, else the most frequent action), on fresh arm means or on the given
  ``means (num_episodes, K)``. ``Trace.ucb`` uses ``c``."""
  _check_policy(policy)
  if not isinstance(num_episodes, int) or num_episodes < 1:
    raise ValueError(f"num_episodes must be a positive int, got {num_episodes!r}")
  if means is not None and jnp.shape(means) != (num_episodes, params.num_arms):
    raise ValueError(f"means must have shape ({num_episodes}, {params.num_arms}), got "
                     f"{jnp.shape(means)}")
  return _run_baseline(key, params, policy, num_episodes, float(c), float(eps), horizon, means)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _run_baseline(key, params, policy, num_episodes, c, eps, horizon, means=None):
  k_means, k_play = jax.random.split(key)
  if means is None:
    means = jax.vmap(bandits.arm_means, (0, None))(jax.random.split(k_means, num_episodes),
                                                   params)
  choose = lambda kk, n, s, t: _choose(policy, kk, n, s, t, c, eps)  # noqa: E731
  a, r, u, g = jax.vmap(lambda kk, m: _play(kk, m, params, horizon, choose, c))(
      jax.random.split(k_play, num_episodes), means)
  return Trace(a, r, u, g, means)


def behaviour_traces(key: jax.Array, params: BanditParams, num_episodes: int, *,
                     greedy_share: float = 0.4, ucb_share: float = 0.2, eps: float = 0.1,
                     c: float = UCB1_C, horizon: int = bandits.HORIZON) -> Trace:
  """Behaviour-cloning data: each episode is epsilon-greedy (probability ``greedy_share``),
  UCB with constant ``c`` (probability ``ucb_share``: the cloned policy acts on its
  rationale in some episodes, as the paper's LLMs do at a low rate) or copy (repeat the
  most frequent action; the rest), epsilon ``eps``; ``Trace.ucb`` (UCB's arm) is the
  rationale label."""
  for name, v in (("greedy_share", greedy_share), ("ucb_share", ucb_share), ("eps", eps)):
    if not 0.0 <= v <= 1.0:
      raise ValueError(f"{name} must be in [0, 1], got {v!r}")
  if greedy_share + ucb_share > 1.0:
    raise ValueError(f"greedy_share + ucb_share must be <= 1, got {greedy_share + ucb_share}")
  if not isinstance(num_episodes, int) or num_episodes < 1:
    raise ValueError(f"num_episodes must be a positive int, got {num_episodes!r}")
  return _behaviour(key, params, num_episodes, float(greedy_share), float(ucb_share),
                    float(eps), float(c), horizon)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6, 7))
def _behaviour(key, params, num_episodes, greedy_share, ucb_share, eps, c, horizon):
  k_means, k_kind, k_play = jax.random.split(key, 3)
  means = jax.vmap(bandits.arm_means, (0, None))(jax.random.split(k_means, num_episodes), params)
  u = jax.random.uniform(k_kind, (num_episodes,))
  kind = jnp.where(u < greedy_share, 0, jnp.where(u < greedy_share + ucb_share, 1, 2))

  def one(kk, m, which):
    choose = lambda k2, n, s, t: jnp.select(  # noqa: E731
        [which == 0, which == 1],
        [_choose("greedy", k2, n, s, t, c, eps), _choose("ucb", k2, n, s, t, c, eps)],
        _choose("copy", k2, n, s, t, c, eps))
    return _play(kk, m, params, horizon, choose, c)

  a, r, u_arm, g = jax.vmap(one)(jax.random.split(k_play, num_episodes), means, kind)
  return Trace(a, r, u_arm, g, means)


# ---------------------------------------------------------------------------
# The sequence policy's tokens.


@dataclasses.dataclass(frozen=True)
class TokenSpec:
  """Token ids of the action-reward sequence (hashable).

  ``PAD = 0`` (also the *blank* rationale of the no-rationale ablation), ``BOS = 1``, then
  ``K`` action tokens ``arm_a``, ``K`` rationale tokens ``why_k`` ("the UCB arm is k") and
  ``reward_bins`` reward tokens (``[low, high]`` cut into equal bins, clipped). One step is
  three tokens ``why, arm, reward``; without a rationale the first is the blank, neither
  generated nor trained, so both variants share every shape (and every compiled program).
  """

  num_arms: int
  reward_bins: int = 2  # Bernoulli rewards: bins {0, 1}
  reward_low: float = 0.0
  reward_high: float = 1.0

  def __post_init__(self):
    if not isinstance(self.num_arms, int) or self.num_arms < 2:
      raise ValueError(f"num_arms must be an int >= 2, got {self.num_arms!r}")
    if not isinstance(self.reward_bins, int) or self.reward_bins < 2:
      raise ValueError(f"reward_bins must be an int >= 2, got {self.reward_bins!r}")
    if not self.reward_high > self.reward_low:
      raise ValueError(f"reward_high must exceed reward_low, got {self.reward_low}, "
                       f"{self.reward_high}")

  PAD = 0
  BOS = 1
  STEP_LEN = 3  # why, arm, reward

  @property
  def arm0(self) -> int:
    return 2

  @property
  def why0(self) -> int:
    return 2 + self.num_arms

  @property
  def reward0(self) -> int:
    return 2 + 2 * self.num_arms

  @property
  def vocab_size(self) -> int:
    return 2 + 2 * self.num_arms + self.reward_bins

  def seq_len(self, horizon: int) -> int:
    """Tokens of a whole episode: ``BOS`` and three per step."""
    return 1 + self.STEP_LEN * horizon


def token_spec(params: BanditParams, gaussian_bins: int = 8) -> TokenSpec:
  """The spec of a bandit: two reward tokens for Bernoulli arms; ``gaussian_bins`` over
  ``+-3`` reward standard deviations (means and noise together) for Gaussian arms."""
  if params.kind == "bernoulli":
    return TokenSpec(params.num_arms, 2, 0.0, 1.0)
  spread = 3.0 * math.sqrt(float(params.mean_scale) ** 2 + float(params.noise) ** 2)
  return TokenSpec(params.num_arms, gaussian_bins, -spread, spread)


def reward_token(spec: TokenSpec, reward: jax.Array) -> jax.Array:
  """The reward's bin token: ``floor((r - low) / (high - low) * bins)``, clipped."""
  x = (reward - spec.reward_low) / (spec.reward_high - spec.reward_low) * spec.reward_bins
  b = jnp.clip(jnp.floor(x), 0, spec.reward_bins - 1).astype(jnp.int32)
  return spec.reward0 + b


def episode_tokens(spec: TokenSpec, actions: jax.Array, rationales: jax.Array | None,
                   rewards: jax.Array) -> jax.Array:
  """``BOS`` then per step ``why_{rationale}, arm_{action}, reward_bin`` (``(E, 1 + 3 T)``);
  ``rationales=None`` puts the blank in every rationale slot. Actions and rationales must
  be valid arms here (a rollout keeps its own tokens)."""
  why = (jnp.full_like(actions, spec.PAD) if rationales is None
         else spec.why0 + jnp.asarray(rationales))
  body = jnp.stack([why, spec.arm0 + actions, reward_token(spec, rewards)], -1)
  body = body.reshape(*actions.shape[:-1], -1)
  bos = jnp.full((*actions.shape[:-1], 1), spec.BOS, body.dtype)
  return jnp.concatenate([bos, body], -1).astype(jnp.int32)


def loss_mask(spec: TokenSpec, horizon: int, rationale: bool | jax.Array = True) -> jax.Array:
  """``(3 T,)`` weights of the next-token targets: 1 where the target is an action token
  or (with ``rationale``) a rationale token, the policy's outputs; 0 for reward tokens."""
  offset = jnp.arange(spec.STEP_LEN * horizon) % spec.STEP_LEN  # target = token p + 1
  return ((offset == 1) | ((offset == 0) & jnp.asarray(rationale))).astype(jnp.float32)


# ---------------------------------------------------------------------------
# Rolling the sequence policy out on the bandit (KV cache, one scan over tokens).


class Episodes(NamedTuple):
  """Episodes of the sequence policy, ``(E, T)`` unless noted.

  ``actions`` are arm ids (-1: an invalid action token), ``rationales`` the named arm
  (-1: not a rationale token, or no rationale), ``ucb`` / ``greedy`` the choices of the
  history before each step, ``untried`` whether the pulled arm was new.
  """

  tokens: jax.Array  # (E, 1 + 3 T) as generated
  actions: jax.Array
  rationales: jax.Array
  rewards: jax.Array
  ucb: jax.Array
  greedy: jax.Array
  untried: jax.Array
  means: jax.Array  # (E, K)


class _Play(NamedTuple):
  """The token scan's carry: the cache, the token to feed, the arm statistics, and the
  current step's pulled arm and reward (written at its arm token, read at its reward)."""

  cache: Any
  token: jax.Array
  counts: jax.Array
  sums: jax.Array
  arm: jax.Array
  reward: jax.Array


def rollout(net: Net, key: jax.Array, means: jax.Array, spec: TokenSpec, params: BanditParams,
            *, rationale: bool | jax.Array = True, c: float = UCB1_C,
            temperature: float = 1.0, horizon: int = bandits.HORIZON) -> Episodes:
  """Plays ``means.shape[0]`` episodes, one token per scan step (one forward call site): a
  sampled rationale token (the blank when ``rationale`` is False; may be traced), a
  sampled action token (any token of the vocabulary: a non-arm token is an invalid
  action), then the bandit's reward-bin token. Pure; jit it."""
  if means.ndim != 2 or means.shape[1] != spec.num_arms:
    raise ValueError(f"means must be (episodes, {spec.num_arms}), got {means.shape}")
  if params.num_arms != spec.num_arms:
    raise ValueError(f"params.num_arms ({params.num_arms}) and spec.num_arms "
                     f"({spec.num_arms}) differ")
  e, k = means.shape
  cache = tfm.init_cache(net.module().cfg, e, spec.seq_len(horizon))
  rationale = jnp.asarray(rationale)

  def step(carry: _Play, inp):
    key, j = inp
    logits, cache = decoding.decode_step(net, carry.token[:, None], carry.cache)
    role = j % spec.STEP_LEN  # the role of the token produced here: 0 why, 1 arm, 2 reward
    k_s, k_env = jax.random.split(key)
    sampled = jax.random.categorical(k_s, logits / temperature).astype(jnp.int32)
    u, g = ucb_arm(carry.counts, carry.sums, c), greedy_arm(carry.counts, carry.sums)
    # role 1: the sampled action is pulled now
    valid = (sampled >= spec.arm0) & (sampled < spec.arm0 + k)
    a = jnp.where(valid, sampled - spec.arm0, -1)
    r, _, _ = jax.vmap(bandits.pull, (0, 0, 0, None))(jax.random.split(k_env, e), means, a,
                                                      params)
    hot = jax.nn.one_hot(carry.arm, k)
    is_reward = role == 2
    token = jnp.where(role == 0, jnp.where(rationale, sampled, spec.PAD),
                      jnp.where(role == 1, sampled, reward_token(spec, carry.reward)))
    new = _Play(cache, token,
                jnp.where(is_reward, carry.counts + hot, carry.counts),
                jnp.where(is_reward, carry.sums + hot * carry.reward[:, None], carry.sums),
                jnp.where(role == 1, a, carry.arm), jnp.where(role == 1, r, carry.reward))
    untried = (a >= 0) & (jnp.sum(jax.nn.one_hot(a, k) * carry.counts, -1) == 0)
    return new, (token, a, r, u, g, untried)

  n = spec.STEP_LEN * horizon
  bos = jnp.full((e,), spec.BOS, jnp.int32)
  init = _Play(cache, bos, jnp.zeros((e, k)), jnp.zeros((e, k)), jnp.full((e,), -1, jnp.int32),
               jnp.zeros(e))
  _, (tokens, a, r, u, g, untried) = jax.lax.scan(
      step, init, (jax.random.split(key, n), jnp.arange(n)))
  per_step = lambda x, role: jnp.moveaxis(x.reshape(horizon, spec.STEP_LEN, e, *x.shape[2:])[  # noqa: E731
      :, role], 0, 1)
  why_tok = per_step(tokens, 0)
  is_why = (why_tok >= spec.why0) & (why_tok < spec.why0 + k)
  return Episodes(jnp.concatenate([bos[:, None], jnp.moveaxis(tokens, 0, 1)], 1),
                  per_step(a, 1), jnp.where(is_why, why_tok - spec.why0, -1),
                  per_step(r, 1), per_step(u, 0), per_step(g, 0), per_step(untried, 1), means)


def frequency_probe(net: Net, key: jax.Array, spec: TokenSpec, params: BanditParams, num: int,
                    max_repeats: int, *, rationale: bool | jax.Array = True,
                    c: float = UCB1_C) -> dict[str, jax.Array]:
  """The policy's frequency bias after ``k = 0..max_repeats`` repeats of one arm
  (:func:`frequency_histories`), from one forward pass: past rationale slots hold the UCB
  arm of their step (the blank without ``rationale``), and the action is read with the
  rationale teacher-forced to the correct UCB arm. Returns ``share``, ``entropy`` and
  ``rationale_prob`` (the probability of the correct rationale) per ``k``,
  ``(max_repeats + 1,)`` each, and UCB's ``ucb_share``.
  """
  actions, rewards, targets = frequency_histories(key, params, num, max_repeats + 1)
  counts, sums = prefix_stats(actions, rewards, spec.num_arms)
  ucb = ucb_arm(counts, sums, c)  # (num, L)
  why = jnp.where(jnp.asarray(rationale), spec.why0 + ucb, spec.PAD)
  tokens = episode_tokens(spec, actions, why - spec.why0, rewards)
  logp = jax.nn.log_softmax(net(tokens[:, :-1]).astype(jnp.float32))
  k = spec.num_arms
  steps = k + jnp.arange(max_repeats + 1)  # the decision after k repeats is step K + k
  act_pos = spec.STEP_LEN * steps + 1
  probs = jnp.exp(logp[:, act_pos, spec.arm0:spec.arm0 + k])  # (num, R + 1, K)
  tgt = jnp.broadcast_to(targets[:, None], probs.shape[:2])
  share = jnp.take_along_axis(probs, tgt[..., None], -1)[..., 0].mean(0)
  p = probs / jnp.maximum(probs.sum(-1, keepdims=True), 1e-12)
  entropy = -jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), -1).mean(0)
  label = ucb[:, steps]
  right = jnp.take_along_axis(logp[:, spec.STEP_LEN * steps], (spec.why0 + label)[..., None],
                              -1)[..., 0]
  return {"share": share, "entropy": entropy,
          "rationale_prob": jnp.where(jnp.asarray(rationale), jnp.exp(right).mean(0), jnp.nan),
          "ucb_share": (label == targets[:, None]).mean(0)}


# ---------------------------------------------------------------------------
# RL fine-tuning.


@dataclasses.dataclass(frozen=True)
class RLFTConfig:
  """RLFT's constants (hashable); the reward shaping is :class:`Shaping` (traced).

  Each iteration draws ``episodes / group_size`` bandit instances and plays each
  ``group_size`` times; the returns-to-go are standardised per step within the instance's
  group (GRPO's group baseline applied per step; the paper states Monte-Carlo returns).
  """

  episodes: int = 64  # episodes rolled out per iteration
  minibatch_size: int = 32  # episodes per optimizer step
  epochs: int = 1  # passes over an iteration's episodes
  clip_eps: float = 0.2  # PPO clip
  kl_coef: float = 0.05  # beta of the k3 KL to the reference (the BC policy)
  gamma: float = 1.0  # discount of the returns-to-go (the paper: Monte-Carlo returns)
  reward_scale: float = 1.0  # r_env is divided by it (the paper normalises r_env)
  temperature: float = 1.0  # sampling temperature of the rollouts
  ucb_c: float = UCB1_C  # UCB's constant (the rationale's label, the metrics)
  group_size: int = 8  # episodes per bandit instance; advantages are standardised per group
  horizon: int = bandits.HORIZON

  def __post_init__(self):
    if self.episodes % self.minibatch_size:
      raise ValueError(f"minibatch_size must divide episodes, got {self.minibatch_size} and "
                       f"{self.episodes}")
    if self.group_size < 2 or self.episodes % self.group_size:
      raise ValueError(f"group_size must be >= 2 and divide episodes, got {self.group_size} "
                       f"and {self.episodes}")
    if not 0.0 < self.gamma <= 1.0:
      raise ValueError(f"gamma must be in (0, 1], got {self.gamma!r}")


class Shaping(NamedTuple):
  """The reward terms (may be traced, so ablation arms vmap): the invalid-action
  ``penalty`` (the paper's 5) and the exploration ``bonus`` for an untried arm (1 or 0)."""

  penalty: jax.Array | float
  bonus: jax.Array | float


class RLState(struct.PyTreeNode):
  params: Any
  opt_state: Any


def step_rewards(episodes: Episodes, shaping: Shaping, reward_scale: float = 1.0) -> jax.Array:
  """``r_env / s - penalty 1[invalid] + bonus 1[untried]`` per step ``(E, T)``."""
  invalid = (episodes.actions < 0).astype(jnp.float32)
  return (episodes.rewards / reward_scale - shaping.penalty * invalid
          + shaping.bonus * episodes.untried.astype(jnp.float32))


def step_advantages(rewards: jax.Array, gamma: float = 1.0, group_size: int | None = None
                    ) -> jax.Array:
  """Returns-to-go ``(E, T)`` standardised per step over each group of ``group_size``
  consecutive episodes (played on the same arm means; None: over all episodes), our
  baseline: it removes the luck of the instance from the advantage."""
  g = pg.returns_to_go(rewards, gamma)
  e = g.shape[0]
  group = e if group_size is None else group_size
  if e % group:
    raise ValueError(f"group_size must divide the {e} episodes, got {group_size}")
  g = g.reshape(e // group, group, -1)
  return ((g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-6)).reshape(e, -1)


def token_advantages(spec: TokenSpec, advantages: jax.Array) -> jax.Array:
  """Each step's advantage on its three next-token positions, ``(E, 3 T)``."""
  return jnp.repeat(advantages, spec.STEP_LEN, -1)


def make_rlft(net: Net, optimizer: optax.GradientTransformation, ref_params: Any,
              spec: TokenSpec, params: BanditParams, config: RLFTConfig = RLFTConfig()):
  """One RLFT iteration: ``config.episodes`` rollouts on fresh arm means, per-step rewards,
  returns-to-go advantages on the rationale (if any) and action tokens, and one
  :func:`jaxlab.models.policy_gradient.pg_update` (clipped surrogate + ``kl_coef`` k3 KL to
  ``ref_params``). Returns ``iteration(state: RLState, key, shaping: Shaping, rationale)
  -> (state, metrics)``, pure (jit, scan or vmap it; ``rationale`` may be traced).

  The old and reference log-probabilities come from one forward pass vmapped over the two
  parameter sets (what :func:`~jaxlab.models.policy_gradient.make_batch` computes with two).
  """
  apply = lambda p, x: net(x, params=p)  # noqa: E731
  logp_fn = functools.partial(pg.token_log_probs, apply)

  def iteration(state: RLState, key: jax.Array, shaping: Shaping,
                rationale: bool | jax.Array = True):
    k_means, k_roll, k_update = jax.random.split(key, 3)
    instances = config.episodes // config.group_size
    means = jnp.repeat(jax.vmap(bandits.arm_means, (0, None))(
        jax.random.split(k_means, instances), params), config.group_size, axis=0)
    ep = rollout(net.replace(params=state.params), k_roll, means, spec, params,
                 rationale=rationale, c=config.ucb_c, temperature=config.temperature,
                 horizon=config.horizon)
    rewards = step_rewards(ep, shaping, config.reward_scale)
    adv = token_advantages(spec, step_advantages(rewards, config.gamma, config.group_size))
    mask = jnp.broadcast_to(loss_mask(spec, config.horizon, rationale), adv.shape)
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), state.params, ref_params)
    old, ref = jax.lax.stop_gradient(jax.vmap(logp_fn, (0, None))(both, ep.tokens))
    batch = pg.PGBatch(ep.tokens, mask, adv, old, ref)
    new_params, opt_state, info = pg.pg_update(
        logp_fn, optimizer, state.params, state.opt_state, batch,
        minibatch_size=config.minibatch_size, key=k_update, epochs=config.epochs,
        clip_eps=config.clip_eps, kl_coef=config.kl_coef)
    metrics = {"regret": cumulative_regret(ep.actions, means)[:, -1].mean(),
               "coverage": coverage(ep.actions, spec.num_arms)[:, -1].mean(),
               "invalid": (ep.actions < 0).mean(), "reward": rewards.sum(-1).mean(),
               "act_ucb": (ep.actions == ep.ucb).mean(), "kl": info["kl"].mean(),
               "loss": info["loss"].mean()}
    return RLState(new_params, opt_state), metrics

  return iteration
