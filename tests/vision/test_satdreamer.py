"""SatDreamer360's mechanisms against references: pixel angles on hand-picked pixels, the
triplane lookup against hand-computed bilinear interpolation, the epipolar constraint on
exact correspondences of a known pose, attention against a plain softmax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.data import city_panoramas as cp
from jaxlab.nn import Net
from jaxlab.vision import satdreamer as sd


def test_pixel_angles_on_hand_picked_pixels():
  psi, theta = sd.pixel_angles(4, 8)  # centres u = j + 1/2, v = i + 1/2
  # psi = (u - W/2) / W 2 pi, theta = (H/2 - v) / H pi
  np.testing.assert_allclose(psi[0, 0], (0.5 - 4) / 8 * 2 * np.pi, rtol=1e-6)
  np.testing.assert_allclose(psi[2, 4], 0.5 / 8 * 2 * np.pi, rtol=1e-6)
  np.testing.assert_allclose(psi[1, 7], 3.5 / 8 * 2 * np.pi, rtol=1e-6)
  np.testing.assert_allclose(theta[0, 3], 1.5 / 4 * np.pi, rtol=1e-6)
  np.testing.assert_allclose(theta[3, 0], -1.5 / 4 * np.pi, rtol=1e-6)
  # directions: azimuth 0 / elevation 0 is +x, azimuth pi/2 is +y, elevation pi/2 is +z
  d = sd.angles_to_direction(jnp.array([0.0, np.pi / 2, 0.3]), jnp.array([0.0, 0.0, np.pi / 2]))
  np.testing.assert_allclose(d, [[1, 0, 0], [0, 1, 0], [0, 0, 1]], atol=1e-6)
  # the pixel (row 1, column 6) of a 4 x 8 panorama: psi = 5/16 2 pi, theta = pi/8
  f = sd.angles_to_direction(psi[1, 6], theta[1, 6])
  p, t = 5 / 16 * 2 * np.pi, np.pi / 8
  np.testing.assert_allclose(f, [np.cos(t) * np.cos(p), np.cos(t) * np.sin(p), np.sin(t)],
                             rtol=1e-6)
  # the inverse returns the pixel centre, and the yaw rotates the world ray about z
  u, v = sd.direction_to_pixel(f, 4, 8)
  np.testing.assert_allclose([u, v], [6.5, 1.5], atol=1e-5)
  world = sd.panorama_directions(np.pi / 2, 4, 8)[1, 6]
  np.testing.assert_allclose(world, [-f[1], f[0], f[2]], atol=1e-6)
  with pytest.raises(ValueError, match="width"):
    sd.pixel_angles(4, 0)


def test_bilinear_and_triplane_against_hand_computation():
  plane = jnp.array([[0.0, 1.0, 2.0], [10.0, 11.0, 12.0], [20.0, 21.0, 22.0]])[..., None]
  # (a, b) = (0.5, 1.25): rows 0 and 1, columns 1 and 2
  hand = (0.5 * 0.75 * 1.0 + 0.5 * 0.25 * 2.0 + 0.5 * 0.75 * 11.0 + 0.5 * 0.25 * 12.0)
  np.testing.assert_allclose(sd.bilinear(plane, jnp.array(0.5), jnp.array(1.25))[0], hand)
  # grid points are exact; outside, coordinates clamp to the border
  np.testing.assert_allclose(sd.bilinear(plane, jnp.array(2.0), jnp.array(1.0))[0], 21.0)
  np.testing.assert_allclose(sd.bilinear(plane, jnp.array(-3.0), jnp.array(9.0))[0], 2.0)
  rng = np.random.default_rng(0)
  tri = sd.Triplane(*(jnp.asarray(rng.normal(size=s), jnp.float32)
                      for s in ((4, 4, 2), (4, 2, 2), (4, 2, 2))))
  # world (1.5, 2.25, 1.0) in a box (4, 4, 2): indices x 1.0, y 1.75, z (1.0 * 2 / 2) - 0.5
  x, y, z = 1.0, 1.75, 0.5
  xy = 0.25 * tri.xy[1, 1] + 0.75 * tri.xy[1, 2]
  xz = 0.5 * tri.xz[1, 0] + 0.5 * tri.xz[1, 1]
  yz = 0.25 * 0.5 * (tri.yz[1, 0] + tri.yz[1, 1]) + 0.75 * 0.5 * (tri.yz[2, 0] + tri.yz[2, 1])
  got = jax.jit(sd.triplane_features, static_argnums=2)(tri, jnp.array([1.5, 2.25, 1.0]),
                                                        (4.0, 4.0, 2.0))
  np.testing.assert_allclose(got, xy + xz + yz, rtol=1e-5)
  del x, y, z


def _two_cameras():
  o_n, yaw_n = jnp.array([5.5, 3.2, 0.3]), 0.4
  o_m, yaw_m = jnp.array([5.5, 4.1, 0.3]), -2.0
  return o_n, yaw_n, o_m, yaw_m


def test_epipolar_constraint_zero_for_true_correspondences():
  o_n, yaw_n, o_m, yaw_m = _two_cameras()
  x = jax.random.uniform(jax.random.key(0), (50, 3), minval=0.0, maxval=3.0) + jnp.array(
      [2.0, 5.0, 0.0])
  unit = lambda v: v / jnp.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
  f_n = unit((x - o_n) @ sd.yaw_matrix(yaw_n))  # camera-frame rays R^T (X - o)
  f_m = unit((x - o_m) @ sd.yaw_matrix(yaw_m))
  r, t = sd.relative_pose(yaw_n, o_n, yaw_m, o_m)
  # the pose itself: x_n = R x_m + t maps camera m's ray to the point seen in camera n
  lam = jnp.linalg.norm(x - o_m, axis=-1, keepdims=True)
  np.testing.assert_allclose(unit(lam * f_m @ r.T + t), f_n, atol=1e-5)
  np.testing.assert_allclose(sd.epipolar_residual(f_n, f_m, r, t), 0.0, atol=1e-6)
  # a wrong pairing is off the curve
  assert float(jnp.min(jnp.abs(sd.epipolar_residual(f_n, jnp.roll(f_m, 1, 0), r, t)))) > 1e-4
  np.testing.assert_allclose(sd.essential_matrix(r, t) @ f_m[0],
                             jnp.cross(t, r @ f_m[0]), atol=1e-6)


def test_candidate_selection_picks_the_true_pixel():
  h, w = 8, 32
  o_n, yaw_n, o_m, yaw_m = _two_cameras()
  psi, theta = sd.pixel_angles(h, w)
  rays = sd.angles_to_direction(psi, theta).reshape(-1, 3)
  # points seen exactly through pixel centres of frame m, at depths 1..3
  true = jnp.array([3, 40, 77, 101, 150, 200, 230])
  depth = jnp.linspace(1.0, 3.0, true.shape[0])[:, None]
  x = o_m + depth * rays[true] @ sd.yaw_matrix(yaw_m).T
  f_n = (x - o_n) @ sd.yaw_matrix(yaw_n)
  f_n = f_n / jnp.linalg.norm(f_n, axis=-1, keepdims=True)
  r, t = sd.relative_pose(yaw_n, o_n, yaw_m, o_m)
  dist = sd.epipolar_distance(f_n, rays, r, t)
  np.testing.assert_allclose(dist[jnp.arange(true.shape[0]), true], 0.0, atol=1e-5)
  cand = jax.jit(sd.epipolar_candidates, static_argnums=4)(f_n, rays, r, t, 8)
  assert all(int(true[i]) in np.asarray(cand[i]) for i in range(true.shape[0]))
  # nearest first: candidate distances ascend
  d_c = np.take_along_axis(np.asarray(dist), np.asarray(cand), 1)
  assert np.all(np.diff(d_c, axis=1) >= -1e-7)
  with pytest.raises(ValueError, match="num"):
    sd.epipolar_candidates(f_n, rays, r, t, h * w + 1)


def test_attention_against_a_plain_softmax():
  k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
  q, k, v = (jax.random.normal(kk, (n, 4)) for kk, n in ((k1, 5), (k2, 7), (k3, 7)))
  out, w = sd.full_attention(q, k, v)
  logits = np.asarray(q) @ np.asarray(k).T / 2.0
  ref_w = np.exp(logits - logits.max(1, keepdims=True))
  ref_w /= ref_w.sum(1, keepdims=True)
  np.testing.assert_allclose(w, ref_w, rtol=1e-5)
  np.testing.assert_allclose(out, ref_w @ np.asarray(v), rtol=1e-5, atol=1e-6)
  # epipolar attention over every key, in any order, is full attention
  cand = jnp.tile(jnp.arange(7)[::-1], (5, 1))
  out_e, w_e = sd.epipolar_attention(q, k, v, cand)
  np.testing.assert_allclose(out_e, out, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w_e[:, ::-1], w, rtol=1e-5)
  # over two candidates: a softmax of the two scores
  out2, w2 = sd.epipolar_attention(q, k, v, jnp.tile(jnp.array([2, 5]), (5, 1)))
  np.testing.assert_allclose(w2, ref_w[:, [2, 5]] / ref_w[:, [2, 5]].sum(1, keepdims=True),
                             rtol=1e-5)
  flops = sd.attention_flops(1, 1024, 32, 128)
  assert flops["attention"] == 4 * 32 * 128 + 3 * 128 and flops["selection"] == 15 + 6 * 1024
  assert sd.attention_flops(1, 1024, 32)["total"] == 4 * 32 * 1024 + 3 * 1024


def test_ray_retrieval_weights_and_offsets():
  net = Net.create(sd.TriplaneRayModel(5, 8, 5, dim=8, samples=8, offsets=3, max_offset=0.5,
                                       far=8.0, rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(0)
  tri = sd.Triplane(*(jnp.asarray(rng.normal(size=s), jnp.float32)
                      for s in ((8, 8, 8), (8, 8, 8), (8, 8, 8))))
  dirs = sd.panorama_directions(0.0, 2, 4).reshape(-1, 3)
  o = jnp.broadcast_to(jnp.array([4.5, 4.5, 0.3]), dirs.shape)
  f_g, a, w = jax.jit(lambda p: net.module(p).retrieve(tri, o, dirs, sd.ray_query(dirs)))(
      net.params)
  assert f_g.shape == (8, 8) and a.shape == (8, 8, 3) and w.shape == (8, 3)
  np.testing.assert_allclose(a.sum(1), 1.0, rtol=1e-5)  # A_kj sums to 1 over samples k
  np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)  # W_j over offset sets j
  np.testing.assert_allclose(sd.ray_depths(3, 1.0, 4.0), [1.0, 1.6, 4.0], rtol=1e-5)
  with pytest.raises(ValueError, match="near"):
    sd.ray_depths(3, 2.0, 1.0)


@jax.jit
def _rendered_pair(key):
  """A panorama of a random city from camera n, its matches in camera m, the epipolar
  residuals of the hit points and the matched pixels' distances to the curves."""
  h, w = 8, 32
  city = cp.make_city(key, 16)
  o_n, yaw_n, o_m, yaw_m = _two_cameras()
  pano = cp.render_panorama(city, o_n, yaw_n, h, w)
  idx, valid = cp.correspondences(city, pano, o_m, yaw_m, h, w)
  unit = lambda v: v / jnp.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
  f_n = unit(pano.point.reshape(-1, 3) - o_n) @ sd.yaw_matrix(yaw_n)
  f_m = unit(pano.point.reshape(-1, 3) - o_m) @ sd.yaw_matrix(yaw_m)
  r, t = sd.relative_pose(yaw_n, o_n, yaw_m, o_m)
  psi, theta = sd.pixel_angles(h, w)
  rays = sd.angles_to_direction(psi, theta).reshape(-1, 3)
  dist = sd.epipolar_distance(pano.directions.reshape(-1, 3) @ sd.yaw_matrix(yaw_n), rays, r, t)
  return valid, sd.epipolar_residual(f_n, f_m, r, t), dist[jnp.arange(h * w), idx]


def test_a_rendered_pair_satisfies_the_constraint():
  h, w = 8, 32
  valid, res, d_true = (np.asarray(x) for x in _rendered_pair(jax.random.key(3)))
  assert 0.2 < valid.mean() < 1.0
  np.testing.assert_allclose(res[valid], 0.0, atol=1e-5)
  # the matched pixel centre is within half a pixel diagonal of the curve
  assert d_true[valid].max() < np.hypot(np.pi / h, 2 * np.pi / w) / 2 + 1e-4
