"""VPRL: the action parser and the progress reward on hand-built transitions (each with a
known answer), the trajectories' data, multi-step planning with scripted generators, and one
GRPO iteration on a tiny model."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.agents import vprl
from jaxlab.envs import grid_world as gw
from jaxlab.models import transformer as tfm

F, H, W, G, O = gw.FLOOR, gw.HOLE, gw.WALL, gw.GOAL, gw.OUTSIDE


_grid = gw.layout_from_rows


# distances to the goal at (3, 3):      6 5 4 5 / 5 - 3 - / 4 3 2 - / - 2 1 0
LAKE = _grid([[F, F, F, F],
              [F, H, F, H],
              [F, F, F, H],
              [H, F, F, G]])
MAZE = _grid([[F, F, W, F],
              [F, F, W, F],
              [F, F, F, F],
              [W, F, F, G]])


def img(cells, pos):
  return gw.render(cells, jnp.array(pos))


def edit(tokens, cell, value):
  return tokens.at[cell[0] * 6 + cell[1]].set(value)


# (name, prev image, next image, expected action, expected reward)
CASES = [
    ("down, closer", img(LAKE, [0, 2]), img(LAKE, [1, 2]), 1, 1.0),
    ("right, onto the goal", img(LAKE, [3, 2]), img(LAKE, [3, 3]), 3, 1.0),
    ("left, away from the goal", img(LAKE, [2, 2]), img(LAKE, [2, 1]), 2, 0.0),  # 2 -> 3
    ("up, away from the goal", img(LAKE, [2, 2]), img(LAKE, [1, 2]), 0, 0.0),
    ("up, away from the goal", img(LAKE, [3, 1]), img(LAKE, [2, 1]), 0, 0.0),  # 2 -> 3
    ("down, closer in the maze", img(MAZE, [0, 1]), img(MAZE, [1, 1]), 1, 1.0),
    ("down into a hole", img(LAKE, [0, 1]), img(LAKE, [1, 1]), 1, -5.0),
    ("right into a wall", img(MAZE, [0, 1]), img(MAZE, [0, 2]), 3, -5.0),
    ("right off the 4 x 4 grid", img(LAKE, [0, 3]), img(LAKE, [0, 4]), 3, -5.0),
    ("no move", img(LAKE, [0, 2]), img(LAKE, [0, 2]), vprl.INVALID, -5.0),
    ("two cells at once", img(LAKE, [0, 0]), img(LAKE, [0, 2]), vprl.INVALID, -5.0),
    ("diagonal", img(LAKE, [0, 0]), img(LAKE, [1, 1]), vprl.INVALID, -5.0),
    ("agent vanished", img(LAKE, [0, 2]), edit(img(LAKE, [0, 2]), [0, 2], 0), vprl.INVALID,
     -5.0),
    ("two agents", img(LAKE, [0, 2]), edit(img(LAKE, [1, 2]), [0, 2], 1), vprl.INVALID, -5.0),
    ("the map changed", img(LAKE, [0, 2]), edit(img(LAKE, [1, 2]), [1, 1], 0), vprl.INVALID,
     -5.0),
    ("a token off the codebook", img(LAKE, [0, 2]), edit(img(LAKE, [1, 2]), [5, 5], vprl.SEP),
     vprl.INVALID, -5.0),
]


@pytest.fixture(scope="module")
def reward_fn():
  return jax.jit(vprl.progress_reward)


def test_parser_and_reward_on_hand_built_transitions(reward_fn):
  prev = jnp.stack([c[1] for c in CASES])
  nxt = jnp.stack([c[2] for c in CASES])
  reward, parse = reward_fn(prev, nxt)
  for i, (name, *_, action, r) in enumerate(CASES):
    assert int(parse.action[i]) == action, name
    assert float(reward[i]) == r, name
  assert parse.new_pos[0].tolist() == [1, 2] and parse.new_pos[12].tolist() == [-1, -1]
  assert not bool(parse.in_vocab[-1]) and bool(parse.in_vocab[0])


def test_trajectory_data(reward_fn):
  params = gw.GridParams()

  @jax.jit
  def data(key):
    cells, start, dist = jax.vmap(lambda k: gw.make_layout(k, params))(
        jax.random.split(jax.random.key(0), 8))
    k1, k2 = jax.random.split(key)
    keys1, keys2 = jax.random.split(k1, 8), jax.random.split(k2, 8)
    walk = jax.vmap(lambda k, c, s: vprl.random_walk(k, c, s, 12))(keys1, cells, start)
    opt = jax.vmap(lambda k, c, s, d: vprl.optimal_path(k, c, s, d, 12))(keys2, cells, start,
                                                                         dist)
    return (walk, opt, reward_fn(walk.prev, walk.nxt), reward_fn(opt.prev, opt.nxt), start,
            dist)

  walk, opt, (r_walk, p_walk), (r_opt, _), start, dist = data(jax.random.key(1))
  assert bool(jnp.all(p_walk.action != vprl.INVALID))  # random moves always parse
  # a random walk never bumps a wall or leaves the grid: -5 only for holes
  kinds = jax.vmap(jax.vmap(lambda p: gw.decode(p)[0]))(walk.nxt)
  pos = p_walk.new_pos
  landed = np.asarray(kinds)[np.arange(8)[:, None], np.arange(12)[None], pos[..., 0], pos[..., 1]]
  assert set(np.asarray(r_walk)[landed == H]) <= {-5.0}
  assert set(np.asarray(r_walk)[landed != H]) <= {0.0, 1.0}
  # the optimal path: every real step +1, exactly the start's distance of them, ends at goal
  d0 = np.asarray(dist)[np.arange(8), start[:, 0], start[:, 1]]
  np.testing.assert_array_equal(np.asarray(opt.mask).sum(1), d0)
  assert bool(jnp.all(jnp.where(opt.mask, r_opt, 1.0) == 1.0))
  seq, mask = vprl.sft_data(walk.prev[0], walk.nxt[0])
  assert seq.shape == (12, vprl.SEQ_LEN) and mask.shape == (12, vprl.SEQ_LEN - 1)
  assert bool(jnp.all(seq[:, 36] == vprl.SEP)) and float(mask.sum()) == 12 * 36


def _oracle(cells):
  """Scripted generators: the optimal move, or always down."""
  dist = gw.distance_map(cells)

  def best(images, _):
    kinds, agent, _ = gw.decode(images)
    pos, _ = vprl._agent_cell(agent)
    tgt = jnp.clip(pos[:, None] + gw.MOVES, 0, 5)
    d = dist[jnp.arange(len(images))[:, None], tgt[..., 0], tgt[..., 1]]
    d = jnp.where(d < 0, 99, d)
    new = tgt[jnp.arange(len(images)), jnp.argmin(d, -1)]
    return gw.render(kinds, new)

  def down(images, _):
    kinds, agent, _ = gw.decode(images)
    pos, _ = vprl._agent_cell(agent)
    return gw.render(kinds, jnp.clip(pos + jnp.array([1, 0]), 0, 5))

  return best, down


def test_plan_with_scripted_generators():
  cells = jnp.stack([LAKE, MAZE, LAKE])
  start = jnp.array([[0, 0], [0, 0], [0, 2]])
  best, down = _oracle(cells)
  run = jax.jit(lambda f: vprl.plan(f, cells, start, 8), static_argnums=0)
  out = run(best)
  assert out.success.tolist() == [True, True, True]
  np.testing.assert_allclose(out.progress_rate, 1.0)
  # the plan stops at the goal: 6, 6 and 4 generated steps
  assert np.asarray(out.alive).sum(1).tolist() == [6, 6, 4]
  out = run(down)
  # LAKE from (0,0): (1,0) d 5, (2,0) d 4, then (3,0) is a hole: +1, +1, -5
  assert out.success.tolist() == [False, False, False]
  assert np.asarray(out.rewards[0, :3]).tolist() == [1.0, 1.0, -5.0]
  np.testing.assert_allclose(out.progress_rate, [2 / 6, 2 / 6, 3 / 4])  # (0,2): 3 then off
  # MAZE from (0,0): down, down (+1, +1), then (3,0) is a wall: -5
  assert np.asarray(out.rewards[1, :3]).tolist() == [1.0, 1.0, -5.0]
  with pytest.raises(ValueError, match="horizon"):
    vprl.plan(best, cells, start, 0)


def test_grpo_config_and_iteration_check_their_input():
  # (one GRPO iteration runs in the experiment's smoke test: tests/experiments/test_vprl.py)
  cfg = vprl.model_config(d_model=16, num_layers=1, num_heads=2)
  net = tfm.graph(cfg)
  images = jnp.stack([img(LAKE, [0, 2]), img(MAZE, [0, 1])])
  opt = optax.adam(1e-3)
  with pytest.raises(ValueError, match="minibatch_size"):
    vprl.GRPOConfig(group_size=4, prompts_per_step=4, minibatch_size=3)
  with pytest.raises(ValueError, match="group_size"):
    vprl.GRPOConfig(group_size=1)
  with pytest.raises(ValueError, match="temperature"):
    vprl.GRPOConfig(temperature=0.0)
  with pytest.raises(ValueError, match="prompts_per_step"):
    vprl.make_grpo_iteration(net, opt, images, vprl.GRPOConfig(prompts_per_step=3))
