"""GridWorld: BFS distance map and solvability on hand-built layouts and against scipy,
the renderer's tokens, and the dynamics of holes, walls, the goal and the grid's edge."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse import csgraph, lil_matrix

from jaxlab import envs
from jaxlab.envs import grid_world as gw

F, H, W, G, O = gw.FLOOR, gw.HOLE, gw.WALL, gw.GOAL, gw.OUTSIDE
U = gw.UNREACHABLE


_grid = gw.layout_from_rows


LAKE = _grid([[F, F, F, F],
              [F, H, F, H],
              [F, F, F, H],
              [H, F, F, G]])
# the goal walled in: unsolvable from everywhere
SHUT = _grid([[F, F, F, F],
              [F, F, W, W],
              [F, F, W, G],
              [F, F, W, F]])


@pytest.fixture(scope="module")
def dist_fn():
  return jax.jit(gw.distance_map)


def test_distance_map_on_hand_built_layouts(dist_fn):
  expected = np.full((6, 6), U)
  expected[:4, :4] = [[6, 5, 4, 5],
                      [5, U, 3, U],
                      [4, 3, 2, U],
                      [U, 2, 1, 0]]
  np.testing.assert_array_equal(dist_fn(LAKE), expected)
  shut = np.full((6, 6), U)
  shut[2, 3], shut[3, 3] = 0, 1  # only the cell below the goal reaches it
  np.testing.assert_array_equal(dist_fn(SHUT), shut)


def _scipy_distance(cells):
  ok = (cells == F) | (cells == G)
  graph = lil_matrix((36, 36))
  for r in range(6):
    for c in range(6):
      for dr, dc in ((0, 1), (1, 0)):
        if r + dr < 6 and c + dc < 6 and ok[r, c] and ok[r + dr, c + dc]:
          graph[r * 6 + c, (r + dr) * 6 + c + dc] = 1
  goal = int(np.flatnonzero(cells.reshape(-1) == G)[0])
  d = csgraph.shortest_path(graph.tocsr(), directed=False, unweighted=True, indices=goal)
  return np.where(np.isfinite(d) & ok.reshape(-1), d, U).reshape(6, 6)


def test_layouts_are_solvable_and_bfs_matches_scipy(dist_fn):
  params = gw.GridParams(min_distance=3)
  cells, start, dist = jax.jit(jax.vmap(lambda k: gw.make_layout(k, params)))(
      jax.random.split(jax.random.key(0), 40))
  cells, start, dist = map(np.asarray, (cells, start, dist))
  sizes = (cells != O).sum((1, 2))
  assert set(np.sqrt(sizes).astype(int)) == {4, 5, 6}
  assert (cells == H).any((1, 2)).sum() > 5 and (cells == W).any((1, 2)).sum() > 5
  assert not ((cells == H).any((1, 2)) & (cells == W).any((1, 2))).any()  # one kind per map
  for c, s, d in zip(cells, start, dist, strict=True):
    assert (c == G).sum() == 1 and c[s[0], s[1]] == F
    np.testing.assert_array_equal(d, _scipy_distance(c))
    assert d[s[0], s[1]] >= 3  # the solvability check
  np.testing.assert_array_equal(dist, np.asarray(dist_fn(jnp.asarray(cells))))


def test_renderer_tokens_and_decode():
  render, decode = jax.jit(gw.render), jax.jit(gw.decode)
  tokens = np.asarray(render(LAKE, jnp.array([1, 2])))
  assert tokens.shape == (36,)
  np.testing.assert_array_equal(tokens[:6], [0, 0, 0, 0, 8, 8])  # floor x4, outside x2
  np.testing.assert_array_equal(tokens[6:12], [0, 2, 1, 2, 8, 8])  # agent on floor = 1
  assert tokens[3 * 6 + 3] == 6 and tokens[3 * 6] == 2  # goal, hole
  kinds, agent, ok = decode(tokens)
  np.testing.assert_array_equal(kinds, LAKE)
  assert bool(ok) and np.argwhere(np.asarray(agent)).tolist() == [[1, 2]]
  _, _, ok = decode(jnp.asarray(tokens).at[5].set(gw.NUM_TOKENS))
  assert not bool(ok)


def test_dynamics_holes_walls_goal_edge():
  env = envs.GridWorld()
  params = env.default_params
  step = jax.jit(env.step_env)
  key = jax.random.key(0)

  def state(cells, pos):
    return gw.GridState(cells=cells, pos=jnp.array(pos), dist=gw.distance_map(cells), time=0)

  _, s, r, done, info = step(key, state(LAKE, [0, 1]), 1, params)  # down into the hole
  assert s.pos.tolist() == [1, 1] and bool(done) and bool(info["hole"]) and float(r) == 0
  _, s, r, done, _ = step(key, state(LAKE, [3, 2]), 3, params)  # right onto the goal
  assert s.pos.tolist() == [3, 3] and bool(done) and float(r) == 1
  _, s, _, done, info = step(key, state(SHUT, [1, 1]), 3, params)  # right into a wall
  assert s.pos.tolist() == [1, 1] and bool(info["blocked"]) and not bool(done)
  _, s, _, _, info = step(key, state(LAKE, [0, 3]), 3, params)  # off the 4 x 4 grid
  assert s.pos.tolist() == [0, 3] and bool(info["blocked"])
  _, s, *_ = step(key, state(LAKE, [0, 0]), 0, params)  # off the 6 x 6 array
  assert s.pos.tolist() == [0, 0]
  _, s, _, _, info = step(key, state(LAKE, [0, 0]), 7, params)  # no such action: flagged
  assert s.pos.tolist() == [0, 0] and bool(info["invalid_action"])
  obs, s0 = jax.jit(env.reset)(key, params)
  np.testing.assert_array_equal(obs, gw.render(s0.cells, s0.pos))


@pytest.mark.parametrize("kwargs", [dict(min_size=1), dict(max_size=7), dict(min_size=5,
                                    max_size=4), dict(hole_prob=1.5), dict(wall_prob=0.95)])
def test_bad_params_raise(kwargs):
  with pytest.raises(ValueError):
    gw.GridParams(**kwargs)


def test_layout_from_rows_pads_with_outside_and_rejects_bad_grids():
  np.testing.assert_array_equal(
      gw.layout_from_rows([[F, G]]),
      np.array([[F, G, O, O, O, O]] + [[O] * 6] * 5))
  with pytest.raises(ValueError, match="at most 6 x 6"):
    gw.layout_from_rows(np.zeros((7, 2), int))
  with pytest.raises(ValueError, match="at most 6 x 6"):
    gw.layout_from_rows([F, G])
  with pytest.raises(ValueError, match="cell kinds 0..4"):
    gw.layout_from_rows([[F, 5]])
  with pytest.raises(ValueError, match="cell kinds 0..4"):
    gw.layout_from_rows([[0.5, 1.0]])
