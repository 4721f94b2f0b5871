"""Goal-conditioned tasks for hierarchical RL: a four-room point maze and a point that pushes a box.

``PointMaze`` follows PIPER's maze generator (the environment DIPPER is
evaluated on): an 11 x 11 grid whose outer ring is wall, one horizontal wall
at a row in [3, 7] and one vertical wall at a column in [4, 7], redrawn every
episode from the reset key, with one random gate in each of the four wall
segments, so the four rooms are always connected. The agent is a point with a
continuous position in cell units; an action in ``[-1, 1]^2`` moves it by at
most ``max_step`` cells per axis, one axis after the other, and a move into a
wall cell is cancelled on that axis (sliding along walls). It starts in cell
(1, 3) and must reach cell (9, 9): reward ``-1[||pos - goal|| > threshold]``,
termination at the goal. Observation: position / 11 and the walls, either as
the six numbers that determine them (``wall_obs="layout"``, the default: 8
floats, 8x faster to step than the map in ``experiments.bench_envs``) or as
PIPER's flattened 121-cell map (``wall_obs="grid"``); ``achieved_goal`` /
``desired_goal`` are positions / 11.

``PointPush`` (standing in for the paper's push / pick-and-place): a point in
the unit square pushes a disc-shaped box by kinematic contact (after the
point moves, an overlapping box is moved along the line of centres until the
two just touch); the box must reach a goal disc. Observation: point, box and
goal; the achieved goal is the box position.

Both follow gymnax 1.0's API and are built with no arguments::

  env = PointMaze()
  obs, state = env.reset(key, env.default_params)
  obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``info`` holds ``achieved_goal`` and ``desired_goal`` for hindsight relabelling.

References:
  Singh et al., "PIPER: Primitive-Informed Preference-based Hierarchical
  Reinforcement Learning via Hindsight Relabeling", arXiv:2404.13423, 2024.
  Singh et al., "Direct Preference Optimization for Primitive-Enabled
  Hierarchical RL: A Bilevel Approach", arXiv:2411.00361 (ICLR 2026).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxlab.envs.actions import check_action

SIZE = 11


@struct.dataclass
class MazeState(environment.EnvState):
  pos: jax.Array  # (2,) (row, col) position in cell units, float
  layout: jax.Array  # (6,) int32: wall row, wall column, gates left/right/up/down
  time: int


WALL_OBS = ("layout", "grid", "none")


@struct.dataclass
class MazeParams(environment.EnvParams):
  max_step: float = 0.95  # cells per axis per step (< 1: a step never jumps a wall cell)
  threshold: float = 1.0  # goal distance in cells
  start_cell: tuple[int, int] = (1, 3)
  goal_cell: tuple[int, int] = (9, 9)
  # Redraw walls every episode (False: always the layout of key 0). Static.
  random_walls: bool = struct.field(pytree_node=False, default=True)
  # How the observation shows the walls (static): "layout" = the 6 numbers
  # that determine the maze, / 11 (lossless, fast); "grid" = PIPER's
  # flattened 121-cell map; "none" = position only (for fixed walls).
  wall_obs: str = struct.field(pytree_node=False, default="layout")
  max_steps_in_episode: int = 225  # 15 subgoals x 15 steps, as PIPER

  def __post_init__(self):
    if self.wall_obs not in WALL_OBS:
      raise ValueError(f"wall_obs must be one of {WALL_OBS}, got {self.wall_obs!r}")


def make_layout(key: jax.Array) -> jax.Array:
  """A random layout ``(wall row, wall col, gate left, gate right, gate up, gate down)``.

  The wall row is in [3, 7] and the wall column in [4, 7]; each gate is a
  uniformly random interior cell of its wall segment (left / right of the
  column on the wall row, above / below the row on the wall column), never at
  the crossing, so the four rooms are always connected.
  """
  k_row, k_col, k_gates = jax.random.split(key, 3)
  row = jax.random.randint(k_row, (), 3, 8)
  col = jax.random.randint(k_col, (), 4, 8)
  u = jax.random.uniform(k_gates, (4,))
  gate_left = 1 + jnp.floor(u[0] * (col - 1)).astype(jnp.int32)  # cols 1 .. col-1
  gate_right = col + 1 + jnp.floor(u[1] * (SIZE - 2 - col)).astype(jnp.int32)  # col+1 .. 9
  gate_up = 1 + jnp.floor(u[2] * (row - 1)).astype(jnp.int32)  # rows 1 .. row-1
  gate_down = row + 1 + jnp.floor(u[3] * (SIZE - 2 - row)).astype(jnp.int32)  # row+1 .. 9
  return jnp.stack([row, col, gate_left, gate_right, gate_up, gate_down]).astype(jnp.int32)


def is_wall(layout: jax.Array, r: jax.Array, c: jax.Array) -> jax.Array:
  """Whether cell ``(r, c)`` is wall (broadcasts); the map is never stored per state."""
  row, col, gl, gr, gu, gd = (layout[..., i] for i in range(6))
  border = (r <= 0) | (r >= SIZE - 1) | (c <= 0) | (c >= SIZE - 1)
  return border | ((r == row) & (c != gl) & (c != gr)) | ((c == col) & (r != gu) & (r != gd))


def wall_map(layout: jax.Array) -> jax.Array:
  """The ``(11, 11)`` bool wall map of a layout."""
  r = jnp.arange(SIZE)[:, None]
  c = jnp.arange(SIZE)[None, :]
  return is_wall(layout, r, c)


def make_walls(key: jax.Array) -> jax.Array:
  """The ``(11, 11)`` bool wall map of a random layout."""
  return wall_map(make_layout(key))


def _cell_center(cell) -> jax.Array:
  return jnp.asarray(cell, jnp.float32) + 0.5


class PointMaze(environment.Environment[MazeState, MazeParams]):
  """Four-room point maze after PIPER's generator (see the module docstring)."""

  @property
  def default_params(self) -> MazeParams:
    return MazeParams()

  def step_env(self, key: jax.Array, state: MazeState, action: jax.Array, params: MazeParams):
    del key
    action, valid = check_action(action)
    move = params.max_step * jnp.clip(action, -1.0, 1.0)
    pos = state.pos
    for axis in range(2):  # axis-separated: slide along walls
      trial = pos.at[axis].add(move[axis])
      cell = jnp.floor(trial).astype(jnp.int32)
      pos = jnp.where(is_wall(state.layout, cell[0], cell[1]), pos, trial)
    new_state = MazeState(pos=pos, layout=state.layout, time=state.time + 1)
    reached = self._reached(pos, params)
    obs = self.get_obs(new_state, params)
    info = {"achieved_goal": pos / SIZE, "desired_goal": self.goal(params), "success": reached,
            "invalid_action": ~valid}
    return obs, new_state, jnp.where(reached, 0.0, -1.0), reached, info

  def reset_env(self, key: jax.Array, params: MazeParams):
    layout = make_layout(key if params.random_walls else jax.random.key(0))
    state = MazeState(pos=_cell_center(params.start_cell), layout=layout, time=0)
    return self.get_obs(state, params), state

  def get_obs(self, state: MazeState, params: MazeParams | None = None, key=None) -> jax.Array:
    mode = (params or self.default_params).wall_obs
    if mode == "none":
      return state.pos / SIZE
    if mode == "grid":
      walls = wall_map(state.layout).reshape(-1).astype(jnp.float32)
    else:
      walls = state.layout.astype(jnp.float32) / SIZE
    return jnp.concatenate([state.pos / SIZE, walls])

  def goal(self, params: MazeParams) -> jax.Array:
    """The desired goal in observation units (position / 11)."""
    return _cell_center(params.goal_cell) / SIZE

  def achieved_goal(self, state: MazeState, params: MazeParams | None = None) -> jax.Array:
    return state.pos / SIZE

  def desired_goal(self, state: MazeState, params: MazeParams) -> jax.Array:
    return self.goal(params)

  def goal_threshold(self, params: MazeParams) -> jax.Array:
    """Success distance in goal units."""
    return params.threshold / SIZE

  def subgoal_in_wall(self, state: MazeState, subgoal: jax.Array) -> jax.Array:
    """Whether a subgoal (goal units) lies in a wall cell of this episode's maze."""
    cell = jnp.clip(jnp.floor(subgoal * SIZE).astype(jnp.int32), 0, SIZE - 1)
    return is_wall(state.layout, cell[..., 0], cell[..., 1])

  def _reached(self, pos: jax.Array, params: MazeParams) -> jax.Array:
    return jnp.linalg.norm(pos - _cell_center(params.goal_cell)) <= params.threshold

  def is_terminated(self, state: MazeState, params: MazeParams) -> jax.Array:
    return self._reached(state.pos, params)

  @property
  def name(self) -> str:
    return "PointMaze"

  @property
  def num_actions(self) -> int:
    return 2

  def action_space(self, params: MazeParams | None = None) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

  def observation_space(self, params: MazeParams | None = None) -> spaces.Box:
    extra = {"none": 0, "layout": 6, "grid": SIZE * SIZE}[(params or self.default_params).wall_obs]
    return spaces.Box(0.0, 1.0, (2 + extra,), jnp.float32)


@struct.dataclass
class PushState(environment.EnvState):
  agent: jax.Array  # (2,)
  box: jax.Array  # (2,)
  goal: jax.Array  # (2,)
  time: int


@struct.dataclass
class PushParams(environment.EnvParams):
  max_step: float = 0.05  # agent displacement per step per axis
  agent_radius: float = 0.03
  box_radius: float = 0.05
  threshold: float = 0.07  # box-to-goal distance counted as success
  max_steps_in_episode: int = 105  # 15 subgoals x 7 steps


class PointPush(environment.Environment[PushState, PushParams]):
  """A point pushes a box to a goal in the unit square (kinematic contact)."""

  @property
  def default_params(self) -> PushParams:
    return PushParams()

  def step_env(self, key: jax.Array, state: PushState, action: jax.Array, params: PushParams):
    del key
    lo, hi = params.agent_radius, 1.0 - params.agent_radius
    action, valid = check_action(action)
    agent = jnp.clip(state.agent + params.max_step * jnp.clip(action, -1.0, 1.0), lo, hi)
    contact = params.agent_radius + params.box_radius
    offset = state.box - agent
    dist = jnp.linalg.norm(offset)
    pushed = agent + contact * offset / jnp.maximum(dist, 1e-6)
    box = jnp.where(dist < contact, pushed, state.box)
    box = jnp.clip(box, params.box_radius, 1.0 - params.box_radius)
    new_state = PushState(agent=agent, box=box, goal=state.goal, time=state.time + 1)
    reached = jnp.linalg.norm(box - state.goal) <= params.threshold
    info = {"achieved_goal": box, "desired_goal": state.goal, "success": reached,
            "invalid_action": ~valid}
    return self.get_obs(new_state), new_state, jnp.where(reached, 0.0, -1.0), reached, info

  def reset_env(self, key: jax.Array, params: PushParams):
    k_agent, k_box, k_goal = jax.random.split(key, 3)
    agent = jax.random.uniform(k_agent, (2,), minval=0.1, maxval=0.9)
    box = jax.random.uniform(k_box, (2,), minval=0.25, maxval=0.75)
    # Keep the box off the agent at the start.
    away = box - agent
    box = jnp.where(jnp.linalg.norm(away) < 0.1, jnp.clip(agent + 0.1 * jnp.sign(away + 1e-6),
                                                          0.1, 0.9), box)
    goal = jax.random.uniform(k_goal, (2,), minval=0.15, maxval=0.85)
    state = PushState(agent=agent, box=box, goal=goal, time=0)
    return self.get_obs(state), state

  def get_obs(self, state: PushState, params=None, key=None) -> jax.Array:
    return jnp.concatenate([state.agent, state.box, state.box - state.agent])

  def achieved_goal(self, state: PushState, params: PushParams | None = None) -> jax.Array:
    return state.box

  def desired_goal(self, state: PushState, params: PushParams) -> jax.Array:
    return state.goal

  def goal_threshold(self, params: PushParams) -> jax.Array:
    return params.threshold

  def subgoal_in_wall(self, state: PushState, subgoal: jax.Array) -> jax.Array:
    return jnp.zeros(subgoal.shape[:-1], bool)  # no walls

  def is_terminated(self, state: PushState, params: PushParams) -> jax.Array:
    return jnp.linalg.norm(state.box - state.goal) <= params.threshold

  @property
  def name(self) -> str:
    return "PointPush"

  @property
  def num_actions(self) -> int:
    return 2

  def action_space(self, params: PushParams | None = None) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

  def observation_space(self, params: PushParams | None = None) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (6,), jnp.float32)
