r"""Synthetic two-camera scenes with known geometry (EgoWorld's test bed).

A room (floor, four walls, ceiling; checkered and striped textures), two to four textured
boxes on the floor, and a "hand" of 21 keypoints per hand (wrist, then four joints per
finger from the thumb; one or two hands) drawn as spheres at the keypoints and at the
bone midpoints. Two pinhole cameras look at the hand: an exocentric one from the side
(2-3 x farther) and an egocentric one from head height behind it. Both images are ray cast
in jnp (analytic ray-plane, ray-box and ray-sphere hits, Lambert shading from a fixed
light direction, so a surface's colour does not depend on the viewpoint and reprojection
can be exact).

Units are metres; the world is ``z`` up with the floor at ``z = 0``. A camera is
``(rotation, centre)``, ``rotation`` camera-to-world with columns (right, down, forward),
so a world point ``p`` is ``R^T (p - c)`` in the camera frame (``+z`` forward).

:func:`observe` adds what EgoWorld's networks would get wrong: the exocentric depth as
``truth x a + a sigma_d N(0, 1)`` for an unknown scale ``a`` (log-uniform in
``scale_range``), Gaussian noise on both hands' 3-D keypoints, and the metric hand depth
(the hand-pose estimate's) as the true depth on the hand's pixels.

Example:
  >>> scene = make_scene(jax.random.key(0))
  >>> exo = render(scene, scene.exo, k_exo, 64, 64)         # Render(rgb, depth, hand)
  >>> obs = observe(key, scene, exo, kp_noise=0.005, depth_noise=0.01)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

ROOM = 1.5  # half-width of the room (m); floor at 0, ceiling at 2 * ROOM
NUM_BOXES = 4  # boxes allocated; each scene shows 2 to 4 of them
FINGERS = 5
JOINTS = 4  # per finger (MCP, PIP, DIP, tip), after the wrist: 21 keypoints per hand
SPHERE_RADIUS = 0.011
LIGHT = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
SKIN = np.array([0.85, 0.62, 0.5])


class Camera(NamedTuple):
  rotation: jax.Array  # (3, 3) camera-to-world, columns (right, down, forward)
  centre: jax.Array  # (3,)


class Scene(NamedTuple):
  """One scene: boxes, hands (keypoints in the world frame) and the two cameras."""

  box_lo: jax.Array  # (B, 3)
  box_hi: jax.Array  # (B, 3)
  box_color: jax.Array  # (B, 3)
  box_on: jax.Array  # (B,) bool: the box is in the scene
  keypoints: jax.Array  # (hands * 21, 3) world frame
  exo: Camera
  ego: Camera


class Render(NamedTuple):
  rgb: jax.Array  # (H, W, 3) in [0, 1]
  depth: jax.Array  # (H, W) z-depth in the camera frame
  hand: jax.Array  # (H, W) bool: the ray hits a hand sphere first


class Observation(NamedTuple):
  """What the reprojection gets from one scene (the stand-ins for EgoWorld's networks)."""

  exo_depth: jax.Array  # (H, W) truth x depth_scale + noise
  depth_scale: jax.Array  # () the unknown scale a (s* should recover 1 / a)
  hand_depth: jax.Array  # (H, W) metric depth on the hand's pixels, 0 elsewhere
  kp_exo: jax.Array  # (N, 3) noisy keypoints, exocentric camera frame
  kp_ego: jax.Array  # (N, 3) noisy keypoints, egocentric camera frame


def look_at(centre: jax.Array, target: jax.Array) -> Camera:
  """A camera at ``centre`` looking at ``target``, its image rows pointing down the world's
  ``-z`` as far as they can."""
  fwd = target - centre
  fwd = fwd / jnp.linalg.norm(fwd)
  right = jnp.cross(fwd, jnp.array([0.0, 0.0, 1.0]))
  right = right / jnp.linalg.norm(right)
  down = jnp.cross(fwd, right)
  return Camera(jnp.stack([right, down, fwd], 1), centre)


def to_camera(cam: Camera, points: jax.Array) -> jax.Array:
  """World ``points (..., 3)`` in the camera frame: ``R^T (p - c)``."""
  return (points - cam.centre) @ cam.rotation


def relative_pose(exo: Camera, ego: Camera) -> tuple[jax.Array, jax.Array]:
  """``(R, t)`` with ``x_ego = R x_exo + t`` (the similarity Umeyama should find, scale 1)."""
  rot = ego.rotation.T @ exo.rotation
  return rot, ego.rotation.T @ (exo.centre - ego.centre)


def _rot(axis: int, angle: jax.Array) -> jax.Array:
  c, s = jnp.cos(angle), jnp.sin(angle)
  i, j = [(1, 2), (2, 0), (0, 1)][axis]
  m = jnp.eye(3).at[i, i].set(c).at[j, j].set(c).at[i, j].set(-s).at[j, i].set(s)
  return m


def hand_keypoints(key: jax.Array) -> jax.Array:
  """``(21, 3)`` keypoints of one hand in its own frame (wrist at 0, fingers along ``+y``,
  palm normal ``+z``), with random finger lengths, spread and curl (bending to ``-z``)."""
  k_len, k_spread, k_curl = jax.random.split(key, 3)
  base_x = jnp.array([-0.035, -0.02, 0.0, 0.018, 0.034])  # MCP positions across the palm
  base_y = jnp.array([0.03, 0.085, 0.09, 0.085, 0.075])
  seg = jnp.array([0.035, 0.04, 0.045, 0.042, 0.035]) * jax.random.uniform(
      k_len, (FINGERS,), minval=0.85, maxval=1.15)
  spread = jnp.array([-0.7, -0.2, 0.0, 0.15, 0.35]) + 0.1 * jax.random.normal(
      k_spread, (FINGERS,))
  curl = jax.random.uniform(k_curl, (FINGERS,), minval=0.0, maxval=0.6)  # per joint (rad)
  points = [jnp.zeros(3)]
  for f in range(FINGERS):
    p = jnp.array([base_x[f], base_y[f], 0.0])
    points.append(p)
    for j in range(1, JOINTS):
      bend = curl[f] * j
      step = jnp.array([jnp.sin(spread[f]) * jnp.cos(bend), jnp.cos(spread[f]) * jnp.cos(bend),
                        -jnp.sin(bend)])
      p = p + seg[f] * (1.0 - 0.15 * j) * step
      points.append(p)
  return jnp.stack(points)


def _bones(hands: int) -> np.ndarray:
  """``(20 * hands, 2)`` keypoint index pairs (parent, child)."""
  pairs = []
  for h in range(hands):
    o = 21 * h
    for f in range(FINGERS):
      first = o + 1 + JOINTS * f
      pairs.append((o, first))
      pairs += [(first + j - 1, first + j) for j in range(1, JOINTS)]
  return np.array(pairs)


def make_scene(key: jax.Array, hands: int = 1) -> Scene:
  """A random scene: boxes on the floor around the origin, ``hands`` hands over it (21
  keypoints each), an exocentric camera 0.6-0.9 m away at 25-45 degrees elevation and an
  egocentric camera about 0.45 m behind and above the hand."""
  if hands not in (1, 2):
    raise ValueError(f"hands must be 1 or 2, got {hands!r}")
  keys = jax.random.split(key, 10)
  # boxes: centres 0.2-0.45 m from the hand's footprint, 2-4 of them shown, at most 0.16 m
  # tall (the hands float 0.2-0.3 m up, so a box rarely hides them)
  ring = jax.random.uniform(keys[0], (NUM_BOXES, 2), minval=jnp.array([0.2, -np.pi]),
                            maxval=jnp.array([0.45, np.pi]))
  centre = ring[:, :1] * jnp.stack([jnp.cos(ring[:, 1]), jnp.sin(ring[:, 1])], 1)
  half = jax.random.uniform(keys[1], (NUM_BOXES, 3), minval=jnp.array([0.04, 0.04, 0.03]),
                            maxval=jnp.array([0.12, 0.12, 0.08]))
  lo = jnp.concatenate([centre - half[:, :2], jnp.zeros((NUM_BOXES, 1))], 1)
  hi = jnp.concatenate([centre + half[:, :2], 2 * half[:, 2:]], 1)
  color = jax.random.uniform(keys[2], (NUM_BOXES, 3), minval=0.15, maxval=0.95)
  shown = jax.random.randint(keys[3], (), 2, NUM_BOXES + 1)
  on = jnp.arange(NUM_BOXES) < shown
  # hands: rotated about z (yaw), tilted a little, 0.2-0.3 m above the floor
  kps = []
  for h in range(hands):
    kh = jax.random.fold_in(keys[4], h)
    k_shape, k_yaw, k_tilt, k_pos = jax.random.split(kh, 4)
    local = hand_keypoints(k_shape)
    if h == 1:
      local = local * jnp.array([-1.0, 1.0, 1.0])  # the other hand, mirrored
    rot = _rot(2, jax.random.uniform(k_yaw, (), minval=-np.pi, maxval=np.pi)) @ _rot(
        0, 0.4 * jax.random.normal(k_tilt, ()))
    pos = jnp.concatenate([jax.random.uniform(k_pos, (2,), minval=-0.08, maxval=0.08)
                           + jnp.array([0.14 * (2 * h - 1) * (hands - 1), 0.0]),
                           jax.random.uniform(jax.random.fold_in(k_pos, 1), (1,),
                                              minval=0.2, maxval=0.3)])
    kps.append(local @ rot.T + pos)
  keypoints = jnp.concatenate(kps)
  target = jnp.mean(keypoints, 0)
  # exocentric camera: azimuth anywhere, elevation 25-45 degrees, 0.6-0.9 m away
  az = jax.random.uniform(keys[5], (), minval=-np.pi, maxval=np.pi)
  el = jnp.radians(jax.random.uniform(keys[6], (), minval=25.0, maxval=45.0))
  dist = jax.random.uniform(keys[7], (), minval=0.6, maxval=0.9)
  exo_c = target + dist * jnp.array([jnp.cos(el) * jnp.cos(az), jnp.cos(el) * jnp.sin(az),
                                     jnp.sin(el)])
  # egocentric camera: on the far side from the exocentric one (azimuth within 70 degrees
  # of the opposite), 0.2-0.35 m back from the hand and 0.3-0.45 m above it
  az_e = az + np.pi + jnp.radians(jax.random.uniform(keys[8], (), minval=-70.0, maxval=70.0))
  back, up = jax.random.uniform(keys[9], (2,), minval=jnp.array([0.2, 0.3]),
                                maxval=jnp.array([0.35, 0.45]))
  ego_c = target + jnp.array([back * jnp.cos(az_e), back * jnp.sin(az_e), up])
  return Scene(lo, hi, color, on, keypoints, look_at(exo_c, target), look_at(ego_c, target))


def _spheres(scene: Scene) -> tuple[jax.Array, jax.Array]:
  """Hand spheres: centres at keypoints and bone midpoints, and their colours."""
  kp = scene.keypoints
  bones = _bones(kp.shape[0] // 21)
  mids = 0.5 * (kp[bones[:, 0]] + kp[bones[:, 1]])
  centres = jnp.concatenate([kp, mids])
  shade = jnp.linspace(0.85, 1.1, centres.shape[0])[:, None]  # a slight gradient per sphere
  return centres, jnp.clip(jnp.asarray(SKIN) * shade, 0.0, 1.0)


def _checker(p: jax.Array, period: float) -> jax.Array:
  return jnp.mod(jnp.sum(jnp.floor(p / period), -1), 2.0)


def render(scene: Scene, cam: Camera, k: jax.Array, height: int, width: int) -> Render:
  """Ray casts ``scene`` from ``cam`` (intrinsics ``k``, pixel centres at integer
  coordinates) into a ``height x width`` RGB image, z-depth and hand mask."""
  v, u = jnp.meshgrid(jnp.arange(height, dtype=jnp.float32),
                      jnp.arange(width, dtype=jnp.float32), indexing="ij")
  rays_cam = jnp.stack([u, v, jnp.ones_like(u)], -1) @ jnp.linalg.inv(k).T  # z = 1
  d = rays_cam @ cam.rotation.T  # world direction; ray parameter t equals the z-depth
  o = cam.centre
  inf = jnp.inf
  big = 1e9
  safe_d = jnp.where(jnp.abs(d) < 1e-9, 1e-9, d)
  # room interior: the nearest wall the ray exits through
  bound = jnp.where(d > 0, jnp.array([ROOM, ROOM, 2 * ROOM]), jnp.array([-ROOM, -ROOM, 0.0]))
  t_axes = (bound - o) / safe_d
  t_room = jnp.min(t_axes, -1)
  room_axis = jnp.argmin(t_axes, -1)
  # boxes (slab test)
  t1 = (scene.box_lo - o)[:, None, None, :] / safe_d
  t2 = (scene.box_hi - o)[:, None, None, :] / safe_d
  t_near = jnp.max(jnp.minimum(t1, t2), -1)
  t_far = jnp.min(jnp.maximum(t1, t2), -1)
  hit_box = (t_near <= t_far) & (t_near > 1e-4) & scene.box_on[:, None, None]
  t_box = jnp.where(hit_box, t_near, inf)  # (B, H, W)
  box_axis = jnp.argmax(jnp.minimum(t1, t2), -1)  # the face entered through
  # spheres
  centres, sphere_color = _spheres(scene)
  oc = o - centres  # (S, 3)
  a = jnp.sum(d * d, -1)
  b = jnp.einsum("hwc,sc->shw", d, oc)
  c = jnp.sum(oc * oc, -1)[:, None, None] - SPHERE_RADIUS ** 2
  disc = b * b - a * c
  t_sph = (-b - jnp.sqrt(jnp.maximum(disc, 0.0))) / a
  t_sph = jnp.where((disc >= 0) & (t_sph > 1e-4), t_sph, inf)
  # nearest hit
  tb, ib = jnp.min(t_box, 0), jnp.argmin(t_box, 0)
  ts, js = jnp.min(t_sph, 0), jnp.argmin(t_sph, 0)
  t = jnp.minimum(jnp.minimum(tb, ts), t_room)
  p = o + t[..., None] * d
  # colours and normals per kind
  sign = jnp.sign(d)
  room_normal = -jax.nn.one_hot(room_axis, 3) * sign
  room_base = jnp.array([[0.75, 0.7, 0.6], [0.55, 0.65, 0.8], [0.6, 0.5, 0.45]])[room_axis]
  room_tex = 0.65 + 0.35 * _checker(p, 0.1)[..., None]
  room_rgb = room_base * room_tex
  box_col = scene.box_color[ib]
  box_normal = -jax.nn.one_hot(jnp.take_along_axis(box_axis, ib[None], 0)[0], 3) * sign
  stripes = 0.7 + 0.3 * (jnp.mod(jnp.floor((p[..., 0] + p[..., 1] + p[..., 2]) / 0.03), 2.0))
  box_rgb = box_col * stripes[..., None]
  sph_normal = (p - centres[js]) / SPHERE_RADIUS
  sph_rgb = sphere_color[js]
  is_sph = ts <= jnp.minimum(tb, t_room)
  is_box = ~is_sph & (tb <= t_room)
  normal = jnp.where(is_sph[..., None], sph_normal, jnp.where(is_box[..., None], box_normal,
                                                                room_normal))
  base = jnp.where(is_sph[..., None], sph_rgb, jnp.where(is_box[..., None], box_rgb, room_rgb))
  light = 0.55 + 0.45 * jnp.clip(normal @ jnp.asarray(LIGHT, jnp.float32), 0.0, 1.0)
  rgb = jnp.clip(base * light[..., None], 0.0, 1.0)
  depth = jnp.where(t < big, t, inf)
  return Render(rgb, depth, is_sph)


def observe(key: jax.Array, scene: Scene, exo: Render, kp_noise: float | jax.Array,
            depth_noise: float | jax.Array,
            scale_range: tuple[float, float] = (0.3, 3.0)) -> Observation:
  """The reprojection's inputs with noise: exocentric depth ``a D + a sigma_d N(0, 1)``
  (``a`` log-uniform in ``scale_range``, floored at ``0.01 a``), the hand's metric depth on
  its pixels, and both keypoint sets with ``N(0, kp_noise^2)`` added per coordinate (m).
  ``kp_noise`` and ``depth_noise`` may be traced."""
  k_a, k_d, k_x, k_e = jax.random.split(key, 4)
  lo, hi = np.log(scale_range[0]), np.log(scale_range[1])
  a = jnp.exp(jax.random.uniform(k_a, (), minval=lo, maxval=hi))
  noisy = a * exo.depth + a * depth_noise * jax.random.normal(k_d, exo.depth.shape)
  exo_depth = jnp.maximum(noisy, 0.01 * a)
  hand_depth = jnp.where(exo.hand, exo.depth, 0.0)
  kp = scene.keypoints
  kp_exo = to_camera(scene.exo, kp) + kp_noise * jax.random.normal(k_x, kp.shape)
  kp_ego = to_camera(scene.ego, kp) + kp_noise * jax.random.normal(k_e, kp.shape)
  return Observation(exo_depth, a, hand_depth, kp_exo, kp_ego)
