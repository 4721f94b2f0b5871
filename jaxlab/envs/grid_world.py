"""Grid worlds with the layout in the state: frozen lakes and mazes, rendered as image tokens.

Built for VPRL (:mod:`jaxlab.agents.vprl`), whose paper plans on FrozenLake and Maze grids
of 3-6 cells a side with a new layout per example. gymnax's ``FrozenLake-misc`` fixes its
map when the environment is built (and is slippery by default), so it cannot give held-out
maps; here every reset draws a new layout from its key:

* a side ``n`` in ``[min_size, max_size]`` (at most :data:`MAX_SIZE` = 6); the grid is
  always ``6 x 6``, the cells beyond ``n`` are :data:`OUTSIDE`;
* the kind: a frozen lake (probability ``lake_prob``; obstacles are :data:`HOLE`, which the
  agent falls into: the episode ends) or a maze (obstacles are :data:`WALL`, which block:
  the agent stays where it is). Our maze stand-in is wall cells on the grid (the paper's
  mazes draw walls as lines between cells);
* each in-grid cell an obstacle with probability ``hole_prob`` / ``wall_prob``, a start and
  a goal on two distinct cells, redrawn (``lax.while_loop``, a fresh key per attempt) until
  the goal is reachable from the start in at least ``min_distance`` moves: the solvability
  check is :func:`distance_map`, a breadth-first search written in jnp.

Actions: 0 up, 1 down, 2 left, 3 right (:data:`MOVES`). Reward 1 on reaching the goal,
else 0; the episode ends at the goal or in a hole. A move off the grid or into a wall
leaves the agent in place (as does an action outside ``[0, 4)``, flagged in
``info["invalid_action"]``: a traced action cannot raise).

Rendering (:func:`render`): one token per cell, ``2 * kind + agent`` over the five cell
kinds (floor, hole, wall, goal, outside) times agent present or not: a fixed 10-entry
codebook (:data:`NUM_TOKENS`), 36 tokens per image. The paper renders 256 x 256 pixels and
VQ-tokenizes them into 256 tokens; a per-cell codebook is the same "image as a grid of
discrete codes" with a lossless decoder (:func:`decode`) and a 36-token sequence. A fixed
2 x 2-pixel codebook would quadruple the sequence (144 tokens) and carry no more
information (every 2 x 2 patch of a cell would repeat the cell's code), so we chose one
token per cell.

Example:
  >>> env = GridWorld()
  >>> obs, state = env.reset(jax.random.key(0), env.default_params)   # obs: (36,) tokens
  >>> obs, state, reward, done, info = env.step(key, state, 3, env.default_params)

References:
  Xu et al., "Visual Planning: Let's Think Only with Images", arXiv:2505.11409, 2025.
  Brockman et al., "OpenAI Gym" (FrozenLake), arXiv:1606.01540, 2016.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

MAX_SIZE = 6  # cells per side of the (padded) grid
FLOOR, HOLE, WALL, GOAL, OUTSIDE = 0, 1, 2, 3, 4  # cell kinds
NUM_KINDS = 5
NUM_TOKENS = 2 * NUM_KINDS  # image codebook: 2 * kind + agent present
NUM_CELLS = MAX_SIZE * MAX_SIZE
MOVES = jnp.array([[-1, 0], [1, 0], [0, -1], [0, 1]], jnp.int32)  # up, down, left, right
UNREACHABLE = -1  # distance_map's value off the goal's component


@struct.dataclass
class GridState(environment.EnvState):
  cells: jax.Array  # (6, 6) int32 cell kinds: the layout
  pos: jax.Array  # (2,) int32 (row, col) of the agent
  dist: jax.Array  # (6, 6) int32 BFS moves to the goal (UNREACHABLE off its component)
  time: int


@struct.dataclass
class GridParams(environment.EnvParams):
  min_size: int = 4  # smallest side
  max_size: int = 6  # largest side (<= MAX_SIZE)
  lake_prob: float = 0.5  # share of frozen lakes; the rest are mazes
  hole_prob: float = 0.2  # obstacle probability of a lake cell
  wall_prob: float = 0.3  # obstacle probability of a maze cell
  min_distance: int = 2  # start-goal BFS distance of an accepted layout
  max_steps_in_episode: int = 36

  def __post_init__(self):
    for name in ("min_size", "max_size", "min_distance", "max_steps_in_episode"):
      v = getattr(self, name)
      if isinstance(v, int) and v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(self.min_size, int) and isinstance(self.max_size, int) and not (
        2 <= self.min_size <= self.max_size <= MAX_SIZE):
      raise ValueError(f"need 2 <= min_size <= max_size <= {MAX_SIZE}, got min_size="
                       f"{self.min_size}, max_size={self.max_size}")
    for name in ("lake_prob", "hole_prob", "wall_prob"):
      v = getattr(self, name)
      if isinstance(v, (int, float)) and not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    if (isinstance(self.hole_prob, float) and isinstance(self.wall_prob, float)
        and max(self.hole_prob, self.wall_prob) >= 0.9):
      raise ValueError("hole_prob and wall_prob must be < 0.9 (layouts must be solvable), got "
                       f"{self.hole_prob}, {self.wall_prob}")


def layout_from_rows(rows) -> jax.Array:
  """A ``6 x 6`` layout from a hand-written ``(h, w)`` one (cell kinds, ``h, w <= 6``), the
  cells beyond it :data:`OUTSIDE`: custom maps for :func:`distance_map` and :func:`render`.
  """
  a = np.asarray(rows)
  if a.ndim != 2 or not 1 <= min(a.shape) <= max(a.shape) <= MAX_SIZE:
    raise ValueError(f"rows must be a 2-D grid of at most {MAX_SIZE} x {MAX_SIZE} cells, "
                     f"got shape {a.shape}")
  if not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() >= NUM_KINDS:
    raise ValueError(f"rows must hold cell kinds 0..{NUM_KINDS - 1} (FLOOR, HOLE, WALL, GOAL, "
                     f"OUTSIDE), got {a.dtype} values in [{a.min()}, {a.max()}]")
  out = np.full((MAX_SIZE, MAX_SIZE), OUTSIDE, np.int32)
  out[:a.shape[0], :a.shape[1]] = a
  return jnp.asarray(out)


def passable(cells: jax.Array) -> jax.Array:
  """Cells a shortest path may cross: floor and goal."""
  return (cells == FLOOR) | (cells == GOAL)


def _shift(x: jax.Array, dr: int, dc: int, fill) -> jax.Array:
  """``y[r, c] = x[r + dr, c + dc]`` over the last two axes, ``fill`` off the grid."""
  pad = [(0, 0)] * (x.ndim - 2) + [(max(-dr, 0), max(dr, 0)), (max(-dc, 0), max(dc, 0))]
  y = jnp.pad(x, pad, constant_values=fill)
  r0, c0 = max(dr, 0), max(dc, 0)
  return y[..., r0:r0 + x.shape[-2], c0:c0 + x.shape[-1]]


def distance_map(cells: jax.Array) -> jax.Array:
  """Moves from every cell to the goal over passable cells (BFS), :data:`UNREACHABLE`
  for obstacles, outside cells and cells cut off from the goal.

  Breadth-first search in synchronous layers: layer ``k`` is every passable cell next to
  layer ``k - 1`` not reached before, so after ``36`` expansions each reachable cell holds
  its shortest-path length. Batched over leading axes; jittable.
  """
  cells = jnp.asarray(cells, jnp.int32)
  big = NUM_CELLS + 1
  ok = passable(cells)
  dist = jnp.where(cells == GOAL, 0, big)

  def expand(_, d):
    best = d
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
      best = jnp.minimum(best, _shift(d, dr, dc, big) + 1)
    return jnp.where(ok, jnp.minimum(d, best), big)

  dist = jax.lax.fori_loop(0, NUM_CELLS, expand, dist)
  return jnp.where(dist >= big, UNREACHABLE, dist).astype(jnp.int32)


def render(cells: jax.Array, pos: jax.Array) -> jax.Array:
  """The image tokens ``(..., 36)``: ``2 * kind + [agent here]`` per cell, row-major."""
  cells = jnp.asarray(cells, jnp.int32)
  r = jnp.arange(MAX_SIZE)[:, None]
  c = jnp.arange(MAX_SIZE)[None, :]
  agent = (r == pos[..., 0, None, None]) & (c == pos[..., 1, None, None])
  return (2 * cells + agent).reshape(*cells.shape[:-2], NUM_CELLS).astype(jnp.int32)


def decode(tokens: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Inverse of :func:`render`: ``(kinds (..., 6, 6), agent (..., 6, 6) bool, in_vocab
  (...,) bool)``; a token outside the codebook (``>= NUM_TOKENS`` or negative) decodes to
  :data:`OUTSIDE` without agent and makes ``in_vocab`` False."""
  tokens = jnp.asarray(tokens, jnp.int32)
  grid = tokens.reshape(*tokens.shape[:-1], MAX_SIZE, MAX_SIZE)
  ok = (grid >= 0) & (grid < NUM_TOKENS)
  kinds = jnp.where(ok, grid // 2, OUTSIDE)
  agent = ok & (grid % 2 == 1)
  return kinds, agent, jnp.all(ok, axis=(-2, -1))


def _random_layout(key: jax.Array, params: GridParams) -> tuple[jax.Array, jax.Array]:
  """One draw (maybe unsolvable): ``(cells, start)``."""
  k_size, k_kind, k_obs, k_pick = jax.random.split(key, 4)
  n = jax.random.randint(k_size, (), params.min_size, params.max_size + 1)
  lake = jax.random.uniform(k_kind) < params.lake_prob
  r = jnp.arange(MAX_SIZE)[:, None]
  c = jnp.arange(MAX_SIZE)[None, :]
  inside = (r < n) & (c < n)
  prob = jnp.where(lake, params.hole_prob, params.wall_prob)
  obstacle = jax.random.uniform(k_obs, (MAX_SIZE, MAX_SIZE)) < prob
  cells = jnp.where(inside, jnp.where(obstacle, jnp.where(lake, HOLE, WALL), FLOOR), OUTSIDE)
  # start and goal: two distinct in-grid cells, uniformly (they become floor / goal)
  scores = jnp.where(inside, jax.random.uniform(k_pick, (MAX_SIZE, MAX_SIZE)), -1.0)
  _, idx = jax.lax.top_k(scores.reshape(-1), 2)
  start = jnp.stack([idx[0] // MAX_SIZE, idx[0] % MAX_SIZE]).astype(jnp.int32)
  flat = cells.reshape(-1).at[idx[0]].set(FLOOR).at[idx[1]].set(GOAL)
  return flat.reshape(MAX_SIZE, MAX_SIZE).astype(jnp.int32), start


def make_layout(key: jax.Array, params: GridParams) -> tuple[jax.Array, jax.Array, jax.Array]:
  """A solvable layout ``(cells (6, 6), start (2,), dist (6, 6))``: draws until the start
  is at BFS distance ``>= min_distance`` from the goal (attempt ``i`` uses
  ``fold_in(key, i)``)."""

  def draw(i):
    cells, start = _random_layout(jax.random.fold_in(key, i), params)
    dist = distance_map(cells)
    return cells, start, dist

  def unsolved(carry):
    _, start, dist, _ = carry
    return dist[start[0], start[1]] < params.min_distance  # UNREACHABLE (-1) included

  def retry(carry):
    i = carry[3] + 1
    return (*draw(i), i)

  cells, start, dist, _ = jax.lax.while_loop(unsolved, retry, (*draw(0), 0))
  return cells, start, dist


class GridWorld(environment.Environment[GridState, GridParams]):
  """Frozen-lake and maze grids with a new solvable layout per episode (module docstring)."""

  @property
  def default_params(self) -> GridParams:
    return GridParams()

  def step_env(self, key: jax.Array, state: GridState, action: jax.Array, params: GridParams):
    del key
    action = jnp.asarray(action, jnp.int32)
    if action.shape != ():
      raise ValueError(f"action must be a scalar int in [0, 4), got shape {action.shape}")
    move = MOVES[jnp.clip(action, 0, 3)]
    target = state.pos + move
    on_grid = jnp.all((target >= 0) & (target < MAX_SIZE))
    t = jnp.clip(target, 0, MAX_SIZE - 1)
    kind = state.cells[t[0], t[1]]
    blocked = ~on_grid | (kind == WALL) | (kind == OUTSIDE) | (action < 0) | (action > 3)
    pos = jnp.where(blocked, state.pos, t)
    here = state.cells[pos[0], pos[1]]
    reached, fell = here == GOAL, here == HOLE
    new_state = state.replace(pos=pos, time=state.time + 1)
    done = reached | fell | (new_state.time >= params.max_steps_in_episode)
    info = {"success": reached, "hole": fell, "blocked": blocked,
            "invalid_action": (action < 0) | (action > 3)}
    return render(state.cells, pos), new_state, reached.astype(jnp.float32), done, info

  def reset_env(self, key: jax.Array, params: GridParams):
    cells, start, dist = make_layout(key, params)
    state = GridState(cells=cells, pos=start, dist=dist, time=0)
    return self.get_obs(state, params), state

  def get_obs(self, state: GridState, params: GridParams | None = None, key=None) -> jax.Array:
    return render(state.cells, state.pos)

  def is_terminal(self, state: GridState, params: GridParams) -> jax.Array:
    here = state.cells[state.pos[0], state.pos[1]]
    return (here == GOAL) | (here == HOLE) | (state.time >= params.max_steps_in_episode)

  @property
  def name(self) -> str:
    return "GridWorld"

  @property
  def num_actions(self) -> int:
    return 4

  def action_space(self, params: GridParams | None = None) -> spaces.Discrete:
    return spaces.Discrete(4)

  def observation_space(self, params: GridParams | None = None) -> spaces.Box:
    return spaces.Box(0, NUM_TOKENS - 1, (NUM_CELLS,), jnp.int32)
