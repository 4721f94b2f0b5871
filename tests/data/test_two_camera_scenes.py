"""The synthetic two-camera scenes: geometry against hand computations."""

import jax
import numpy as np

from jaxlab.data import two_camera_scenes as tc
from jaxlab.vision import egoworld as ew


def test_scenes_are_seeded_and_the_relative_pose_maps_frames():
  a, b = tc.make_scene(3, hands=2), tc.make_scene(3, hands=2)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(x, y)
  assert a.keypoints.shape == (42, 3) and tc.make_scene(4).keypoints.shape == (21, 3)
  for cam in (a.exo, a.ego):  # rotations, looking at the hands' centre
    np.testing.assert_allclose(cam.rotation.T @ cam.rotation, np.eye(3), atol=1e-6)
    centre = np.asarray(tc.to_camera(cam, a.keypoints.mean(0)))
    np.testing.assert_allclose(centre[:2], 0.0, atol=1e-5)
    assert centre[2] > 0.2
  rot, t = tc.relative_pose(a.exo, a.ego)
  np.testing.assert_allclose(tc.to_camera(a.ego, a.keypoints),
                             tc.to_camera(a.exo, a.keypoints) @ np.asarray(rot).T + t, atol=1e-5)
  stacked = tc.make_scenes(0, 3, hands=1)
  assert stacked.keypoints.shape == (3, 21, 3) and stacked.exo.rotation.shape == (3, 3, 3)


def test_render_depth_and_observation_noise():
  """A camera 1 m above the floor looking straight down sees depth 1 everywhere off the
  boxes and hands (moved away); the observation is a x depth and the true keypoints when
  the noise levels are 0."""
  scene = tc.make_scene(0)
  cam = tc.Camera(np.diag([1.0, -1.0, -1.0]).astype(np.float32),
                  np.array([0.0, 0.0, 1.0], np.float32))  # right = +x, down = -y, fwd = -z
  far = scene._replace(keypoints=scene.keypoints + 10.0, box_on=np.zeros(4, bool))
  k = ew.intrinsics(4.0, 5, 5)
  out = jax.jit(tc.render, static_argnums=(3, 4))(far, cam, k, 5, 5)
  np.testing.assert_allclose(out.depth, 1.0, rtol=1e-6)
  assert not out.hand.any() and out.rgb.min() >= 0 and out.rgb.max() <= 1
  noise = tc.draw_noise(1, (5, 5), 21)
  obs = tc.observe(far._replace(exo=cam), out, noise, 0.0, 0.0)
  assert 0.3 <= obs.depth_scale <= 3.0
  np.testing.assert_allclose(obs.exo_depth, obs.depth_scale * out.depth, rtol=1e-6)
  np.testing.assert_allclose(obs.kp_exo, tc.to_camera(cam, far.keypoints), atol=1e-6)
  np.testing.assert_array_equal(obs.hand_depth, 0.0)
