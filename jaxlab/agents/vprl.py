r"""VPRL: visual planning by generating the next image, trained by SFT then GRPO.

A plan is a sequence of images: given the rendered current state (image tokens), the model
generates the next state's image, then generates again from that one, until the goal.
The action is never written down: it is read off the pair of images (:func:`parse_action`).
Training, as the paper's two stages:

1. **Stage 1** (policy initialization): supervised next-image prediction on transitions of
   *random* trajectories (:func:`random_walk`), so the model renders valid moves in every
   direction and samples diverse ones (exploration for stage 2);
2. **Stage 2**: GRPO (:mod:`jaxlab.models.policy_gradient`) on the **progress reward** of
   each generated image (:func:`progress_reward`), with :math:`d(\cdot)` the BFS distance
   to the goal (:func:`jaxlab.envs.grid_world.distance_map`):

   .. math::
     r(s, \hat s') = \begin{cases}
       +1 & \text{valid move and } (\hat s' \text{ is the goal or } d(\hat s') = d(s) - 1) \\
       0 & \text{valid move without progress} \\
       -5 & \text{invalid, into a hole or wall (not in the distance map), or a token}
            \text{ outside the image codebook.}
     \end{cases}

The baseline **VPFT** is the same supervised loss on *optimal* transitions
(:func:`optimal_path`).

Action parser (:func:`parse_action`). The paper decodes both images, finds the grid cells
that changed most (MSE) and the agent patch (IoU) to get the agent's new cell; the move is
its offset from the old cell: up, down, left, right, else invalid. Our images are exact
per-cell tokens, so the same rule is exact: a transition is a valid move when every token is
in the codebook, each image shows exactly one agent, the cell kinds are unchanged (only the
two agent cells changed) and the agent's offset is a unit step.

What is the paper's and what is ours: the parser's rule, the reward's three values, the
two stages, the arms (VPRL, VPFT, stage 1 only) and GRPO's group size 10, temperature 1.1
and KL coefficient 0.001 are the paper's (official code ``yix8/VisualPlanning``). Its model
is LVM-3B over VQ image tokens (256 per image) fine-tuned with LoRA; ours is a small
:class:`jaxlab.models.transformer.Transformer` trained from scratch over one token per cell
(36 per image, :mod:`jaxlab.envs.grid_world`), and our mazes have wall cells instead of
wall lines.

Sequences: ``[current image (36)] SEP [next image (36)]``, 73 tokens; the loss and the
policy gradient cover the 36 generated tokens.

Example:
  >>> seq, mask = sft_data(prev, nxt)                          # (N, 73), (N, 72)
  >>> params, losses = jax.jit(functools.partial(tfm.fit_next_token, cfg=model_config(),
  ...     optimizer=optax.adam(1e-3), num_steps=500, batch_size=64))(key, tokens=seq,
  ...     loss_mask=mask)
  >>> step = make_grpo_iteration(net, optax.adam(1e-4), prompts, GRPOConfig())
  >>> state, metrics = jax.jit(step)(GRPOState(params, opt.init(params)), key)
  >>> plan = rollout(net.replace(params=params), cells, start, horizon=12)

References:
  Xu, Li, et al., "Visual Planning: Let's Think Only with Images", arXiv:2505.11409, 2025;
  code yix8/VisualPlanning.
  Shao et al., "DeepSeekMath" (GRPO), arXiv:2402.03300, 2024.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.envs import grid_world as gw
from jaxlab.models import decoding
from jaxlab.models import policy_gradient as pg
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

SEP = gw.NUM_TOKENS  # separates the current image from the next; outside the image codebook
VOCAB_SIZE = gw.NUM_TOKENS + 1
IMAGE_LEN = gw.NUM_CELLS  # 36 tokens per image
PROMPT_LEN = IMAGE_LEN + 1  # current image + SEP
SEQ_LEN = PROMPT_LEN + IMAGE_LEN  # 73
INVALID = -1  # parse_action's action for an invalid transition
REWARD_PROGRESS, REWARD_NONE, REWARD_INVALID = 1.0, 0.0, -5.0  # the paper's reward values


class Parse(NamedTuple):
  """What :func:`parse_action` reads off an image pair (batched over leading axes)."""

  action: jax.Array  # int32: 0 up, 1 down, 2 left, 3 right, INVALID (-1)
  new_pos: jax.Array  # (..., 2) int32: the agent's cell in the next image ((-1, -1) if none)
  in_vocab: jax.Array  # bool: every token of the next image is in the codebook


def _agent_cell(agent: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(pos (..., 2), exactly_one)``: the agent's cell (the first, if several) and whether
  the image shows exactly one agent."""
  flat = agent.reshape(*agent.shape[:-2], gw.NUM_CELLS)
  idx = jnp.argmax(flat, -1)
  pos = jnp.stack([idx // gw.MAX_SIZE, idx % gw.MAX_SIZE], -1).astype(jnp.int32)
  one = jnp.sum(flat, -1) == 1
  return jnp.where(one[..., None], pos, -1), one


def parse_action(prev: jax.Array, nxt: jax.Array) -> Parse:
  """The move from image tokens ``prev (..., 36)`` to ``nxt (..., 36)``.

  Valid iff both images are in the codebook and show exactly one agent each, every cell
  keeps its kind (so exactly the old and the new agent cells changed) and the new cell is
  one step up, down, left or right of the old one. Moving onto a hole, a wall or off the
  grid parses as the move (the reward then finds the cell outside the distance map).
  """
  k0, a0, v0 = gw.decode(prev)
  k1, a1, v1 = gw.decode(nxt)
  p0, one0 = _agent_cell(a0)
  p1, one1 = _agent_cell(a1)
  same_map = jnp.all(k0 == k1, axis=(-2, -1))
  offset = p1 - p0
  match = jnp.all(offset[..., None, :] == gw.MOVES, -1)  # (..., 4)
  valid = v0 & v1 & one0 & one1 & same_map & jnp.any(match, -1)
  action = jnp.where(valid, jnp.argmax(match, -1), INVALID).astype(jnp.int32)
  return Parse(action, p1, v1)


def progress_reward(prev: jax.Array, nxt: jax.Array) -> tuple[jax.Array, Parse]:
  """The paper's progress reward of generating ``nxt`` from ``prev`` (module docstring),
  with the distance map computed from ``prev``'s layout; returns ``(reward, parse)``."""
  parse = parse_action(prev, nxt)
  kinds, agent, _ = gw.decode(prev)
  dist = gw.distance_map(kinds)
  p0, _ = _agent_cell(agent)
  flat = dist.reshape(*dist.shape[:-2], gw.NUM_CELLS)
  at = lambda p: jnp.take_along_axis(  # noqa: E731
      flat, (jnp.clip(p[..., 0], 0) * gw.MAX_SIZE + jnp.clip(p[..., 1], 0))[..., None],
      -1)[..., 0]
  d0, d1 = at(p0), at(parse.new_pos)
  valid = parse.action != INVALID
  in_map = d1 != gw.UNREACHABLE
  progress = (d1 == 0) | (d1 == d0 - 1)
  reward = jnp.where(valid & in_map, jnp.where(progress, REWARD_PROGRESS, REWARD_NONE),
                     REWARD_INVALID)
  return reward.astype(jnp.float32), parse


# ------------------------------------------------------------------ data
def sft_data(prev: jax.Array, nxt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Training rows ``[prev SEP nxt] (N, 73)`` and the next-token loss mask ``(N, 72)``
  over the 36 next-image targets."""
  n = prev.shape[0]
  seq = jnp.concatenate([prev, jnp.full((n, 1), SEP, prev.dtype), nxt], 1).astype(jnp.int32)
  mask = (jnp.arange(SEQ_LEN - 1) >= PROMPT_LEN - 1).astype(jnp.float32)
  return seq, jnp.broadcast_to(mask, (n, SEQ_LEN - 1))


def prompts_of(images: jax.Array) -> jax.Array:
  """``[image SEP]`` prompts ``(N, 37)``."""
  n = images.shape[0]
  return jnp.concatenate([images, jnp.full((n, 1), SEP, images.dtype)], 1).astype(jnp.int32)


class Transitions(NamedTuple):
  """Image pairs ``prev, nxt (T, 36)`` of one trajectory and which steps are real."""

  prev: jax.Array
  nxt: jax.Array
  mask: jax.Array  # (T,) bool


def _open_moves(cells: jax.Array, pos: jax.Array) -> jax.Array:
  """``(4,)`` bool: the moves that change the agent's cell (on the grid, not into a wall)."""
  target = pos + gw.MOVES
  on = jnp.all((target >= 0) & (target < gw.MAX_SIZE), -1)
  t = jnp.clip(target, 0, gw.MAX_SIZE - 1)
  kind = cells[t[:, 0], t[:, 1]]
  return on & (kind != gw.WALL) & (kind != gw.OUTSIDE)


def random_walk(key: jax.Array, cells: jax.Array, start: jax.Array, steps: int) -> Transitions:
  """Stage 1's data: a random trajectory of ``steps`` moves on one layout, each uniform over
  the moves that change the agent's cell (holes included: a walk that falls in, or reaches
  the goal, restarts at ``start``). Every step is a real transition (``mask`` all True)."""

  def step(pos, k):
    open_ = _open_moves(cells, pos)
    a = jax.random.categorical(k, jnp.where(open_, 0.0, -jnp.inf))
    new = pos + gw.MOVES[a]
    kind = cells[new[0], new[1]]
    out = (gw.render(cells, pos), gw.render(cells, new))
    return jnp.where((kind == gw.HOLE) | (kind == gw.GOAL), start, new), out

  _, (prev, nxt) = jax.lax.scan(step, start, jax.random.split(key, steps))
  return Transitions(prev, nxt, jnp.ones(steps, bool))


def optimal_path(key: jax.Array, cells: jax.Array, start: jax.Array, dist: jax.Array,
                 max_len: int) -> Transitions:
  """VPFT's data: a shortest path from ``start`` to the goal (each step uniform among the
  neighbours one move closer), padded to ``max_len`` steps (``mask`` False after the goal)."""
  flat = dist.reshape(-1)

  def step(pos, k):
    target = jnp.clip(pos + gw.MOVES, 0, gw.MAX_SIZE - 1)
    on = jnp.all((pos + gw.MOVES >= 0) & (pos + gw.MOVES < gw.MAX_SIZE), -1)
    d = flat[target[:, 0] * gw.MAX_SIZE + target[:, 1]]
    here = dist[pos[0], pos[1]]
    closer = on & (d == here - 1) & (d >= 0)
    a = jax.random.categorical(k, jnp.where(closer, 0.0, -jnp.inf))
    live = here > 0
    new = jnp.where(live, pos + gw.MOVES[a], pos)
    return new, (gw.render(cells, pos), gw.render(cells, new), live)

  _, (prev, nxt, live) = jax.lax.scan(step, start, jax.random.split(key, max_len))
  return Transitions(prev, nxt, live)


# ------------------------------------------------------------------ model
def model_config(d_model: int = 128, num_layers: int = 4, num_heads: int = 4
                 ) -> tfm.TransformerConfig:
  """The next-image transformer (spec: 4 layers, d = 128) over the 73-token transition.
  RoPE: a next-image token sits a fixed 36 positions after the same cell of the current
  image, a relative offset attention learns quickly (in our runs the copy formed in about
  60 steps with RoPE, far later with learned absolute positions)."""
  return tfm.TransformerConfig(VOCAB_SIZE, d_model, num_heads, num_layers, SEQ_LEN)


def next_image(net: Net, images: jax.Array, key: jax.Array, temperature: float = 0.0
               ) -> jax.Array:
  """The generated next images ``(N, 36)`` from ``images (N, 36)`` (KV-cached decoding)."""
  return decoding.generate(net, prompts_of(images), key, IMAGE_LEN,
                           temperature=temperature).tokens


class Rollout(NamedTuple):
  """A multi-step visual plan per layout (leading axis: layouts)."""

  rewards: jax.Array  # (N, H) progress reward of each generated step (0 after the end)
  alive: jax.Array  # (N, H) bool: the step was generated (no earlier failure or goal)
  success: jax.Array  # (N,) bool: goal reached with no invalid step (exact match)
  progress_rate: jax.Array  # (N,) consecutive progress steps from the start / optimal length
  images: jax.Array  # (N, H + 1, 36) the plan's images (the last valid one repeated)


def plan(step_fn: Callable[[jax.Array, jax.Array], jax.Array], cells: jax.Array,
         start: jax.Array, horizon: int, key: jax.Array | None = None) -> Rollout:
  """Plans on layouts ``cells (N, 6, 6)`` from ``start (N, 2)``: ``step_fn(images (N, 36),
  key) -> next images (N, 36)`` generates the next image from the plan's last image,
  ``horizon`` times; a plan stops at the goal or at its first step with reward -5
  (invalid, hole, wall, off the codebook).

  Exact match: the goal was reached with no such step. Progress rate (the paper's PR):
  the number of consecutive +1 steps from the start over the optimal plan's length.
  """
  if not isinstance(horizon, int) or horizon < 1:
    raise ValueError(f"horizon must be a positive int, got {horizon!r}")
  key = jax.random.key(0) if key is None else key
  n = cells.shape[0]
  rows = jnp.arange(n)
  dist = gw.distance_map(cells)
  optimal = dist[rows, start[:, 0], start[:, 1]]
  first = gw.render(cells, start)

  def step(c: _PlanCarry, k):
    gen = step_fn(c.image, k)
    r, parse = progress_reward(c.image, gen)
    ok = c.alive & (r > REWARD_INVALID)
    goal = ok & (dist[rows, jnp.clip(parse.new_pos[:, 0], 0),
                      jnp.clip(parse.new_pos[:, 1], 0)] == 0)
    streak = c.streak & c.alive & (r == REWARD_PROGRESS)
    image = jnp.where(ok[:, None], gen, c.image)
    new = _PlanCarry(image, ok & ~goal, streak, c.progress + streak, c.success | goal)
    return new, (jnp.where(c.alive, r, 0.0), c.alive, image)

  init = _PlanCarry(first, jnp.ones(n, bool), jnp.ones(n, bool), jnp.zeros(n, jnp.int32),
                    jnp.zeros(n, bool))
  last, (rewards, alive, images) = jax.lax.scan(step, init, jax.random.split(key, horizon))
  rate = jnp.minimum(last.progress / jnp.maximum(optimal, 1), 1.0)
  return Rollout(rewards.T, alive.T, last.success, rate,
                 jnp.concatenate([first[:, None], jnp.swapaxes(images, 0, 1)], 1))


class _PlanCarry(NamedTuple):
  image: jax.Array  # (N, 36) the plan's last valid image
  alive: jax.Array  # (N,) still planning
  streak: jax.Array  # (N,) every step so far made progress
  progress: jax.Array  # (N,) consecutive progress steps from the start
  success: jax.Array  # (N,) reached the goal


def rollout(net: Net, cells: jax.Array, start: jax.Array, horizon: int,
            key: jax.Array | None = None, temperature: float = 0.0) -> Rollout:
  """:func:`plan` with the model: each next image decoded by :func:`next_image` (greedy by
  default) from the model's own previous image."""
  return plan(lambda images, k: next_image(net, images, k, temperature), cells, start,
              horizon, key)


# ------------------------------------------------------------------ stage 2: GRPO
@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """Stage 2's settings (hashable). The paper's: G = 10, temperature 1.1, beta = 0.001."""

  group_size: int = 10  # G generations per prompt
  temperature: float = 1.1  # sampling temperature of the generations
  kl_coef: float = 1e-3  # beta of the k3 KL to the stage-1 reference
  prompts_per_step: int = 16  # prompts (current images) per iteration
  minibatch_size: int | None = None  # rows per optimizer step (None: the whole batch)
  epochs: int = 1  # passes over each iteration's generations
  clip_eps: float = 0.2  # PPO clip

  def __post_init__(self):
    for name in ("group_size", "prompts_per_step", "epochs"):
      v = getattr(self, name)
      if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    if self.group_size < 2:
      raise ValueError(f"group_size must be >= 2 (GRPO normalizes within a group), got "
                       f"{self.group_size}")
    if not isinstance(self.temperature, (int, float)) or self.temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
    if not isinstance(self.kl_coef, (int, float)) or self.kl_coef < 0:
      raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef!r}")
    batch = self.group_size * self.prompts_per_step
    if self.minibatch_size is not None and (not isinstance(self.minibatch_size, int)
                                            or self.minibatch_size < 1
                                            or batch % self.minibatch_size):
      raise ValueError(f"minibatch_size must be a positive int dividing group_size * "
                       f"prompts_per_step = {batch}, got {self.minibatch_size!r}")


class GRPOState(struct.PyTreeNode):
  """What one GRPO iteration carries."""

  params: Any
  opt_state: Any


def make_grpo_iteration(net: Net, optimizer: optax.GradientTransformation, images: jax.Array,
                        config: GRPOConfig = GRPOConfig(), ref_params: Any = None):
  """One stage-2 iteration over training states ``images (N, 36)``.

  Draws ``prompts_per_step`` states, samples ``group_size`` next images each at
  ``temperature`` (:func:`jaxlab.models.policy_gradient.sample_groups`), scores them with
  :func:`progress_reward`, takes GRPO's group-normalized advantages and one
  :func:`jaxlab.models.policy_gradient.pg_update` (KL to ``ref_params``, default the
  parameters ``net`` holds: the stage-1 model). Returns ``iteration(state: GRPOState, key)
  -> (state, metrics)``, pure (jit or scan it).
  """
  n = images.shape[0]
  if config.prompts_per_step > n:
    raise ValueError(f"prompts_per_step must be <= the {n} training states, got "
                     f"{config.prompts_per_step}")
  g, p = config.group_size, config.prompts_per_step
  minibatch = g * p if config.minibatch_size is None else config.minibatch_size
  ref_params = net.params if ref_params is None else ref_params
  apply = lambda prm, x: net(x, params=prm)  # noqa: E731
  logp_fn = functools.partial(pg.token_log_probs, apply)
  prompts = prompts_of(images)

  def iteration(state: GRPOState, key: jax.Array):
    k_idx, k_sample, k_update = jax.random.split(key, 3)
    idx = jax.random.choice(k_idx, n, (p,), replace=False)
    groups = pg.sample_groups(net.replace(params=state.params), prompts[idx], k_sample, g,
                              IMAGE_LEN, temperature=config.temperature)
    gen = groups.tokens[:, PROMPT_LEN:]
    reward, parse = progress_reward(jnp.repeat(images[idx], g, axis=0), gen)
    grouped = reward.reshape(p, g)
    adv = pg.group_advantages(grouped).reshape(-1)
    batch = pg.make_batch(logp_fn, state.params, ref_params, groups, adv)
    params, opt_state, info = pg.pg_update(logp_fn, optimizer, state.params, state.opt_state,
                                           batch, minibatch_size=minibatch, key=k_update,
                                           epochs=config.epochs, clip_eps=config.clip_eps,
                                           kl_coef=config.kl_coef)
    metrics = {"reward": reward.mean(), "progress": jnp.mean(reward == REWARD_PROGRESS),
               "invalid": jnp.mean(reward == REWARD_INVALID),
               "valid_parse": jnp.mean(parse.action != INVALID),
               "live_groups": jnp.mean(grouped.std(-1) > 0),
               "kl": info["kl"].mean(), "loss": info["loss"].mean()}
    return GRPOState(params, opt_state), metrics

  return iteration
