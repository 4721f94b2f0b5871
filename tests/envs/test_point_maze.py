"""PointMaze and PointPush: walls, reachability, rewards, termination, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse import csgraph, lil_matrix

from jaxlab import envs
from jaxlab.envs.point_maze import SIZE


def _free_graph(walls):
  free = ~walls
  graph = lil_matrix((SIZE * SIZE, SIZE * SIZE))
  for r in range(SIZE):
    for c in range(SIZE):
      for dr, dc in ((0, 1), (1, 0)):
        if free[r, c] and r + dr < SIZE and c + dc < SIZE and free[r + dr, c + dc]:
          graph[r * SIZE + c, (r + dr) * SIZE + c + dc] = 1
  return graph.tocsr()


def test_layouts_follow_the_generator_and_goal_is_reachable():
  # jitted: op by op, each operation of the vmapped generator would compile on its own
  layouts, maps = jax.jit(jax.vmap(lambda k: (envs.make_layout(k), envs.make_walls(k))))(
      jax.random.split(jax.random.key(0), 200))
  maps = np.asarray(maps)
  lay = np.asarray(layouts)
  assert lay[:, 0].min() >= 3 and lay[:, 0].max() <= 7  # wall row
  assert lay[:, 1].min() >= 4 and lay[:, 1].max() <= 7  # wall column
  assert len(set(map(tuple, lay))) > 100  # redrawn per key
  params = envs.MazeParams()
  for walls in maps[:60]:
    assert walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()
    assert not walls[params.start_cell] and not walls[params.goal_cell]
    dist = csgraph.shortest_path(_free_graph(walls), directed=False,
                                 indices=params.start_cell[0] * SIZE + params.start_cell[1])
    assert np.isfinite(dist[params.goal_cell[0] * SIZE + params.goal_cell[1]])


def test_walls_block_and_slide():
  env = envs.PointMaze()
  params = env.default_params
  _, state = env.reset(jax.random.key(1), params)
  walls = np.asarray(envs.wall_map(state.layout))
  # Into the top border: the row move is cancelled, the column move still happens.
  state = state.replace(pos=jnp.array([1.2, 2.5]))
  out = env.step(jax.random.key(0), state, jnp.array([-1.0, 1.0]), params)
  new_pos = np.asarray(out[1].pos)
  assert new_pos[0] == pytest.approx(1.2) and walls[int(new_pos[0]), int(new_pos[1])] == 0
  assert new_pos[1] == pytest.approx(2.5 + params.max_step) or walls[1, 3]
  # A random walk never enters a wall cell.
  def walk(carry, key):
    s = carry
    a = jax.random.uniform(key, (2,), minval=-1, maxval=1)
    _, s, *_ = env.step_env(key, s, a, params)
    return s, s.pos
  _, path = jax.lax.scan(walk, state, jax.random.split(jax.random.key(2), 2000))
  cells = np.floor(np.asarray(path)).astype(int)
  assert not walls[cells[:, 0], cells[:, 1]].any()


def test_goal_reward_and_termination():
  env = envs.PointMaze()
  params = env.default_params
  _, state = env.reset(jax.random.key(1), params)
  far = env.step(jax.random.key(0), state, jnp.zeros(2), params)
  assert float(far[2]) == -1.0 and not bool(far[3])
  near = state.replace(pos=jnp.array([9.5, 9.5]) - 0.3)
  obs, _, reward, terminated, _, info = env.step(jax.random.key(0), near, jnp.zeros(2), params)
  assert float(reward) == 0.0 and bool(terminated)
  np.testing.assert_allclose(info["desired_goal"], np.array([9.5, 9.5]) / SIZE, rtol=1e-6)
  grid = env.observation_space(params.replace(wall_obs="grid")).shape
  assert grid == (2 + SIZE * SIZE,)
  o_grid, _ = env.reset(jax.random.key(1), params.replace(wall_obs="grid"))
  np.testing.assert_array_equal(o_grid[2:].reshape(SIZE, SIZE),
                                envs.wall_map(state.layout).astype(np.float32))


@pytest.mark.parametrize("env_cls", [envs.PointMaze, envs.PointPush])
def test_vmap_over_1000_envs(env_cls):
  env = env_cls()
  params = env.default_params
  keys = jax.random.split(jax.random.key(0), 1000)
  obs, states = jax.vmap(env.reset, (0, None))(keys, params)
  actions = jax.random.uniform(jax.random.key(1), (1000, 2), minval=-1, maxval=1)
  obs2, _, reward, terminated, truncated, info = jax.jit(
      jax.vmap(env.step, (0, 0, 0, None)))(keys, states, actions, params)
  assert obs2.shape == obs.shape == (1000,) + env.observation_space(params).shape
  assert reward.shape == (1000,) and info["achieved_goal"].shape == (1000, 2)


def test_push_moves_the_box_along_the_contact_line():
  env = envs.PointPush()
  params = env.default_params
  contact = params.agent_radius + params.box_radius
  state = envs.PushState(agent=jnp.array([0.3, 0.5]), box=jnp.array([0.3 + contact + 0.01, 0.5]),
                         goal=jnp.array([0.9, 0.9]), time=0)
  _, s, reward, *_ = env.step(jax.random.key(0), state, jnp.array([1.0, 0.0]), params)
  np.testing.assert_allclose(s.agent, [0.35, 0.5], atol=1e-6)
  np.testing.assert_allclose(s.box, [0.35 + contact, 0.5], atol=1e-6)  # pushed, just touching
  assert float(reward) == -1.0
  # Moving away leaves the box where it is.
  _, s2, *_ = env.step(jax.random.key(0), s, jnp.array([-1.0, 0.0]), params)
  np.testing.assert_allclose(s2.box, s.box)
  at_goal = s.replace(box=jnp.array([0.88, 0.9]), agent=jnp.array([0.1, 0.1]))
  _, _, reward, terminated, *_ = env.step(jax.random.key(0), at_goal, jnp.zeros(2), params)
  assert float(reward) == 0.0 and bool(terminated)
