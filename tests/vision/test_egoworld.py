"""EgoWorld's geometry against closed forms and hand-built cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.vision import egoworld as ew

UMEYAMA = jax.jit(ew.umeyama)


def _rotation(rng, d=3):
  q, r = np.linalg.qr(rng.standard_normal((d, d)))
  q = q * np.sign(np.diag(r))
  if np.linalg.det(q) < 0:
    q[:, 0] = -q[:, 0]
  return q


def _horn(x, y):
  """Horn's closed form (1987): the unit quaternion maximising sum y_c . R x_c is the top
  eigenvector of the symmetric 4 x 4 matrix built from M = sum x_c y_c^T; then the
  least-squares scale for that R."""
  xc, yc = x - x.mean(0), y - y.mean(0)
  m = xc.T @ yc
  sxx, sxy, sxz, syx, syy, syz, szx, szy, szz = m.ravel()
  n = np.array([[sxx + syy + szz, syz - szy, szx - sxz, sxy - syx],
                [syz - szy, sxx - syy - szz, sxy + syx, szx + sxz],
                [szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy],
                [sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz]])
  w, v = np.linalg.eigh(n)
  q0, qx, qy, qz = v[:, -1]
  rot = np.array([
      [q0**2 + qx**2 - qy**2 - qz**2, 2 * (qx * qy - q0 * qz), 2 * (qx * qz + q0 * qy)],
      [2 * (qy * qx + q0 * qz), q0**2 - qx**2 + qy**2 - qz**2, 2 * (qy * qz - q0 * qx)],
      [2 * (qz * qx - q0 * qy), 2 * (qz * qy + q0 * qx), q0**2 - qx**2 - qy**2 + qz**2]])
  scale = np.sum(yc * (xc @ rot.T)) / np.sum(xc ** 2)
  return scale, rot, y.mean(0) - scale * rot @ x.mean(0)


def test_umeyama_recovers_a_known_similarity_exactly():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((42, 3))
  rot, t = _rotation(rng), np.array([0.3, -1.2, 2.0])
  sim = UMEYAMA(x, 1.7 * x @ rot.T + t)
  np.testing.assert_allclose(sim.scale, 1.7, rtol=1e-5)
  np.testing.assert_allclose(sim.rotation, rot, atol=1e-5)
  np.testing.assert_allclose(sim.translation, t, atol=1e-5)
  # coplanar points (a flat hand): the cross-covariance has rank 2, the SVD's third axis
  # has an arbitrary sign, and the reflection fix still gives the true rotation
  flat = np.concatenate([rng.standard_normal((21, 2)), np.zeros((21, 1))], 1)
  sim = UMEYAMA(flat, 0.8 * flat @ rot.T + t)
  np.testing.assert_allclose(sim.rotation, rot, atol=1e-5)
  np.testing.assert_allclose(sim.scale, 0.8, rtol=1e-5)


def test_umeyama_reflection_case_gives_the_best_rotation():
  """``dst`` a mirror image of ``src``: the best orthogonal map is a reflection
  (det(U) det(V) = -1); Umeyama returns the best proper rotation, Horn's closed form."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((30, 3)) * np.array([3.0, 2.0, 1.0])
  mirror = np.diag([1.0, 1.0, -1.0])
  y = 1.3 * x @ (_rotation(rng) @ mirror).T + np.array([1.0, 0.0, -2.0])
  u, _, vt = np.linalg.svd((y - y.mean(0)).T @ (x - x.mean(0)))
  assert np.linalg.det(u) * np.linalg.det(vt) < 0  # the fix is needed here
  sim = UMEYAMA(x, y)
  scale, rot, t = _horn(x, y)
  assert np.isclose(np.linalg.det(np.asarray(sim.rotation)), 1.0, atol=1e-5)
  np.testing.assert_allclose(sim.rotation, rot, atol=1e-4)
  np.testing.assert_allclose(sim.scale, scale, rtol=1e-4)
  np.testing.assert_allclose(sim.translation, t, atol=1e-4)


def test_umeyama_matches_horns_closed_form_on_noisy_points():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((42, 3))
  y = 0.9 * x @ _rotation(rng).T + 0.5 + 0.2 * rng.standard_normal((42, 3))
  sim = UMEYAMA(x, y)
  scale, rot, t = _horn(x, y)
  np.testing.assert_allclose(sim.rotation, rot, atol=1e-4)
  np.testing.assert_allclose(sim.scale, scale, rtol=1e-4)
  np.testing.assert_allclose(sim.translation, t, atol=1e-4)


def test_umeyama_2d_hand_derived():
  # a square turned 90 degrees, doubled and moved by (3, 4): by hand s = 2, R = [[0, -1],
  # [1, 0]], t = (3, 4)
  x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
  y = 2.0 * x[:, ::-1] * np.array([-1.0, 1.0]) + np.array([3.0, 4.0])
  sim = UMEYAMA(x, y)
  np.testing.assert_allclose(sim.rotation, [[0.0, -1.0], [1.0, 0.0]], atol=1e-6)
  np.testing.assert_allclose(sim.scale, 2.0, rtol=1e-6)
  np.testing.assert_allclose(sim.translation, [3.0, 4.0], atol=1e-6)
  # noisy and mirrored points: in 2-D the best rotation angle is
  # atan2(sum x_c cross y_c, sum x_c . y_c) and s = (cos sum x.y + sin sum x cross y) / sum |x|^2
  rng = np.random.default_rng(3)
  for mirror in (1.0, -1.0):
    x = rng.standard_normal((21, 2))
    y = x * np.array([1.0, mirror]) @ np.array([[0.6, -0.8], [0.8, 0.6]]).T
    y = y + 0.1 * rng.standard_normal(y.shape)
    xc, yc = x - x.mean(0), y - y.mean(0)
    dot, cross = np.sum(xc * yc), np.sum(xc[:, 0] * yc[:, 1] - xc[:, 1] * yc[:, 0])
    theta = np.arctan2(cross, dot)
    sim = UMEYAMA(x, y)
    np.testing.assert_allclose(sim.rotation, [[np.cos(theta), -np.sin(theta)],
                                              [np.sin(theta), np.cos(theta)]], atol=1e-5)
    np.testing.assert_allclose(sim.scale, (np.cos(theta) * dot + np.sin(theta) * cross)
                               / np.sum(xc ** 2), rtol=1e-5)


def test_umeyama_gradients_match_finite_differences():
  """Through the SVD: the gradient's directional derivative against central differences."""
  rng = np.random.default_rng(4)
  x = np.asarray(rng.standard_normal((8, 3)), np.float32)
  y = jnp.asarray(x @ _rotation(rng).T + 0.1 * rng.standard_normal((8, 3)), jnp.float32)
  w = jnp.array([1.0, 2.0, 3.0])
  f = jax.jit(lambda a: jnp.sum(w * ew.transform(ew.umeyama(a, y), a[:1])))
  grad = jax.jit(jax.grad(lambda a: jnp.sum(w * ew.transform(ew.umeyama(a, y), a[:1]))))(x)
  eps = 1e-2
  for d in rng.standard_normal((2, 8, 3)).astype(np.float32):
    fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
    np.testing.assert_allclose(np.sum(grad * d), fd, rtol=2e-2, atol=2e-2)


def test_backproject_then_project_is_the_identity():
  k = ew.intrinsics(7.0, 5, 6)
  depth = 1.0 + np.arange(30.0).reshape(5, 6) / 10
  uv, z = jax.jit(lambda d: ew.project(ew.backproject(d, k, 2.5), k))(depth)
  v, u = np.mgrid[:5, :6]
  np.testing.assert_allclose(uv, np.stack([u, v], -1), atol=1e-4)
  np.testing.assert_allclose(z, 2.5 * depth, rtol=1e-6)


@pytest.fixture(scope="module")
def splat():
  return jax.jit(lambda p, c: ew.splat(p, c, ew.intrinsics(2.0, 3, 3), (3, 3)))


def test_zbuffer_keeps_the_nearest_point(splat):
  # points 0 and 1 land on the centre pixel (1, 1); 1 is nearer whatever the order; 2 and 3
  # (u = 2 and 2.2) tie on pixel (u=2, v=1) at equal depth (the lower index wins); 4 is
  # behind the camera, 5 off the image
  pts = np.array([[0.0, 0.0, 3.0], [0.0, 0.0, 1.0], [0.5, 0.0, 1.0], [0.6, 0.0, 1.0],
                   [0.0, 0.0, -1.0], [9.0, 0.0, 1.0]])
  colors = np.arange(6.0)[:, None] * np.ones((1, 3))
  for order in ([0, 1, 2, 3, 4, 5], [1, 0, 3, 2, 5, 4]):
    out = jax.device_get(splat(pts[order], colors[order]))
    assert out.mask.sum() == 2 and out.mask[1, 1] and out.mask[1, 2]
    assert out.image[1, 1, 0] == 1.0 and out.depth[1, 1] == 1.0
    assert out.image[1, 2, 0] == (2.0 if order.index(2) < order.index(3) else 3.0)
  # differentiable in the colours: each winning point's colour is read once
  g = jax.jit(jax.grad(lambda c: jnp.sum(splat(pts, c).image)))(colors)
  np.testing.assert_array_equal(g[:, 0], [0, 1, 1, 0, 0, 0])


def test_depth_scale_is_the_median_ratio_on_the_hand():
  exo = np.full((3, 4), 2.0)
  hand = np.array([[1.0, 3.0, 5.0, 100.0], [7.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 50.0]])
  mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], bool)  # (1, 1) has no depth
  # ratios on the hand with depth: 0.5, 1.5, 2.5, 3.5 -> median (1.5 + 2.5) / 2
  np.testing.assert_allclose(ew.depth_scale(hand, exo, mask), 2.0)
  # a pixel's exo depth at 0.25: its ratio 0.5 -> 4, so the middle two are 2.5 and 3.5
  exo[0, 0] = 0.25
  np.testing.assert_allclose(ew.depth_scale(hand, exo, mask), 3.0)
  assert np.isnan(ew.depth_scale(hand, exo, np.zeros((3, 4), bool)))


def test_reproject_into_the_same_camera_returns_the_image():
  """Exo camera = ego camera, identity keypoints, depth doubled: s* = 1/2 and the map is
  the input image, every pixel covered."""
  rng = np.random.default_rng(5)
  h, w = 6, 7
  k = ew.intrinsics(5.0, h, w)
  depth = jnp.asarray(1.0 + rng.uniform(size=(h, w)), jnp.float32)
  rgb = jnp.asarray(rng.uniform(size=(h, w, 3)), jnp.float32)
  mask = jnp.zeros((h, w), bool).at[2:4, 2:5].set(True)
  kp = jnp.asarray(rng.standard_normal((21, 3)), jnp.float32)
  out = ew.reproject(rgb, 2.0 * depth, k, depth, mask, kp, kp, k, (h, w))
  np.testing.assert_allclose(out.scale, 0.5, rtol=1e-6)
  assert bool(out.mask.all())
  np.testing.assert_allclose(out.image, rgb, atol=1e-6)
  np.testing.assert_allclose(out.depth, depth, rtol=1e-5)


def test_metrics():
  c, s = np.cos(np.radians(30)), np.sin(np.radians(30))
  turn = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
  a = np.zeros((2, 2, 3))
  masks = np.array([[[1, 0], [0, 0]], [[0, 0], [0, 0]]], bool)
  angle, db = jax.jit(lambda r, m: (ew.rotation_error_deg(np.eye(3), r),
                                    ew.psnr(a, a + 0.1, m)))(turn, masks)
  np.testing.assert_allclose(angle, 30.0, rtol=1e-5)
  np.testing.assert_allclose(db[0], 20.0, rtol=1e-5)  # MSE 0.01 on the one masked pixel
  assert np.isnan(db[1])


def test_bad_input_is_named():
  x = np.zeros((5, 3))
  with pytest.raises(ValueError, match="dst"):
    ew.umeyama(x, np.zeros((4, 3)))
  with pytest.raises(ValueError, match="at least"):
    ew.umeyama(np.zeros((2, 3)), np.zeros((2, 3)))
  with pytest.raises(ValueError, match="hand_mask"):
    ew.depth_scale(np.ones((3, 3)), np.ones((3, 3)), np.ones((2, 3), bool))
  with pytest.raises(ValueError, match="shape"):
    ew.splat(x, np.zeros((5, 3)), np.eye(3), (0, 4))
  with pytest.raises(ValueError, match="colors"):
    ew.splat(x, np.zeros((4, 3)), np.eye(3), (4, 4))
  with pytest.raises(ValueError, match="focal"):
    ew.intrinsics(-1.0, 4, 4)
  with pytest.raises(ValueError, match="kp_ego"):
    ew.reproject(np.zeros((4, 4, 3)), np.ones((4, 4)), np.eye(3), np.ones((4, 4)),
                 np.ones((4, 4), bool), x, np.zeros((4, 3)), np.eye(3), (4, 4))
