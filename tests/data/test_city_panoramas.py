"""The procedural city's renderer on a hand-built one-building city, with hand-computed hits,
and its satellite shadows and correspondences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import city_panoramas as cp


def _one_building():
  """A 4 x 4 road city with one building of class B, height 2, at cell (2, 1)."""
  label = jnp.zeros((4, 4), jnp.int32).at[2, 1].set(cp.BUILDING_B)
  height = jnp.zeros((4, 4)).at[2, 1].set(2.0)
  return cp.City(label, height, jnp.full((4, 4, 3), 0.5))


def test_trace_on_a_one_building_city():
  city = _one_building()
  o = jnp.array([0.5, 1.5, 0.5])
  dirs = jnp.array([[1.0, 0.0, 0.0],     # level, at the building's x = 2 face: depth 1.5
                    [1.0, 0.0, 0.8],     # rises 1.2 by x = 2: still the face (top at 2)
                    [1.0, 0.0, 1.2],     # rises 1.8 by x = 2: over the top, to the sky
                    [1.0, 0.0, -0.5],    # down: the road at x = 1.5 before the building
                    [0.0, 0.0, 1.0],     # up: sky
                    [-1.0, 0.0, -0.1]])  # down and back: ground at x = -4.5, off the map
  dirs = dirs / jnp.linalg.norm(dirs, axis=-1, keepdims=True)
  hit = jax.jit(cp.trace)(city, o, dirs)
  b = cp.PANO_CLASSES.index("building_b")
  np.testing.assert_array_equal(hit.label, [b, b, 0, 1, 0, 0])
  np.testing.assert_allclose(hit.depth[:2], [1.5, 1.5 * np.sqrt(1 + 0.64)], rtol=1e-5)
  np.testing.assert_allclose(hit.depth[3], np.sqrt(1.25), rtol=1e-5)
  assert np.all(np.isinf(np.asarray(hit.depth)[[2, 4, 5]]))
  np.testing.assert_allclose(hit.point[0], [2.0, 1.5, 0.5], atol=1e-5)
  np.testing.assert_allclose(hit.point[3], [1.5, 1.5, 0.0], atol=1e-5)
  # from above the roof looking down: the roof at z = 2
  roof = jax.jit(cp.trace)(city, jnp.array([2.5, 1.5, 3.0]), jnp.array([0.0, 0.0, -1.0]))
  assert int(roof.label) == b
  np.testing.assert_allclose(roof.depth, 1.0, rtol=1e-5)


def test_render_panorama_on_a_one_building_city():
  city = _one_building()
  h, w = 8, 16
  pano = jax.jit(cp.render_panorama, static_argnums=(3, 4))(city, jnp.array([0.5, 1.5, 0.5]),
                                                             0.0, h, w)
  b = cp.PANO_CLASSES.index("building_b")
  # column 8 looks along psi = pi/16 (towards +x, slightly +y): the building spans
  # elevations up to atan(1.5 / 1.5) = pi/4 at the face; rows 2, 3 (theta 3pi/16, pi/16)
  # see it, row 1 (5pi/16 > pi/4) is sky, rows 4..7 look down (theta < 0)
  col = np.asarray(pano.label[:, 8])
  assert col[0] == 0 and col[1] == 0 and col[2] == b and col[3] == b
  # row 4 (theta = -pi/16): the ground at distance 0.5 / tan(pi/16) = 2.51 > 1.5: the face
  assert col[4] == b
  # the bottom row hits the road right below; looking back (column 0, psi ~ -pi) at the
  # horizon there is nothing: background
  assert col[7] == 1 and int(pano.label[3, 0]) == 0
  np.testing.assert_allclose(pano.depth[3, 8], 1.5 / np.cos(np.pi / 16) / np.cos(np.pi / 16),
                             rtol=1e-4)


def test_satellite_shadow_and_city():
  sat = jax.jit(cp.satellite_view)(_one_building())
  assert sat.shape == (4, 4, 5)
  # the building (height 2) shades (3, 2): 2 - 1 > 0; (4, 3) is off the map
  expected = np.zeros((4, 4))
  expected[3, 2] = 1
  np.testing.assert_array_equal(sat[..., 4], expected)
  np.testing.assert_array_equal(sat[2, 1, :4], [0, 0, 0, 1])
  city = jax.jit(lambda k: cp.make_city(k, 12, block=4))(jax.random.key(0))
  lab = np.asarray(city.label)
  assert np.all(lab[::4] == cp.ROAD) and np.all(lab[:, ::4] == cp.ROAD)
  assert np.all((np.asarray(city.height) > 0) == (lab >= cp.BUILDING_A))
  with pytest.raises(ValueError, match="p_building"):
    cp.make_city(jax.random.key(0), 12, p_building=1.5)


def test_street_poses_and_correspondences():
  pos = jax.jit(lambda k: cp.street_positions(k, 16, 50))(jax.random.key(1))
  on_road = (np.asarray(pos[:, 0]) % 4 == 0.5) | (np.asarray(pos[:, 1]) % 4 == 0.5)
  assert on_road.all() and np.all((pos[:, :2] >= 2) & (pos[:, :2] <= 14))
  seq, yaw = jax.jit(lambda k: cp.street_sequence(k, 16, 3, 0.8))(jax.random.key(2))
  np.testing.assert_allclose(np.linalg.norm(np.diff(np.asarray(seq), axis=0), axis=1), 0.8,
                             rtol=1e-5)
  # a camera matched to itself: every hit pixel is visible and maps to itself
  @jax.jit
  def render_and_match(key, o, y):
    city = cp.make_city(key, 16)
    pano = cp.render_panorama(city, o, y, 8, 32)
    return pano, cp.correspondences(city, pano, o, y, 8, 32)

  pano, (idx, valid) = render_and_match(jax.random.key(3), seq[0], yaw[0])
  hit = np.isfinite(np.asarray(pano.depth)).reshape(-1)
  np.testing.assert_array_equal(np.asarray(valid), hit)
  np.testing.assert_array_equal(np.asarray(idx)[hit], np.arange(8 * 32)[hit])
