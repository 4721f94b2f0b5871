r"""Synthetic two-camera scenes with known geometry (EgoWorld's test bed).

A room (floor, four walls, ceiling; checkered and striped textures), two to four textured
boxes on the floor, and a "hand" of 21 keypoints per hand (wrist, then four joints per
finger from the thumb; one or two hands) drawn as spheres at the keypoints and at the
bone midpoints. Two pinhole cameras look at the hands: an exocentric one from the side,
0.6-0.9 m away, and an egocentric one from head height behind them, closer and wider.
Both images are ray cast in jnp (analytic ray-plane, ray-box and ray-sphere hits, Lambert
shading from a fixed light direction, so a surface's colour does not depend on the
viewpoint and reprojection can be exact).

Units are metres; the world is ``z`` up with the floor at ``z = 0``. A camera is
``(rotation, centre)``, ``rotation`` camera-to-world with columns (right, down, forward),
so a world point ``p`` is ``R^T (p - c)`` in the camera frame (``+z`` forward).

:func:`observe` adds what EgoWorld's networks would get wrong: the exocentric depth as
``truth x a + a sigma_d N(0, 1)`` for an unknown scale ``a`` (log-uniform in
``scale_range``), Gaussian noise on both hands' 3-D keypoints, and the metric hand depth
(the hand-pose estimate's) as the true depth on the hand's pixels.

Scenes and noise are drawn in NumPy from a seed (cheap, and nothing to compile); rendering
and :func:`observe` are jnp, jittable and vmappable over stacked scenes.

Example:
  >>> scene = make_scene(0, hands=2)                        # NumPy geometry, 42 keypoints
  >>> exo = render(scene, scene.exo, k_exo, 64, 64)         # Render(rgb, depth, hand)
  >>> noise = draw_noise(1, (64, 64), 42)
  >>> obs = observe(scene, exo, noise, kp_noise=0.005, depth_noise=0.01)

Our stand-in for the paper's data (H2O, TACO, Assembly101, Ego-Exo4D with network
estimates): known geometry, so every step of the reprojection can be checked.

References:
  Park, Ye, Kwon, "EgoWorld: Translating Exocentric View to Egocentric View using Rich
  Exocentric Observations", arXiv:2506.17896, 2025 (ICLR 2026).
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


def look_at(centre: np.ndarray, target: np.ndarray) -> Camera:
  """A camera at ``centre`` looking at ``target``, its image rows pointing down the world's
  ``-z`` as far as they can (float32 NumPy)."""
  fwd = np.asarray(target, np.float64) - centre
  fwd = fwd / np.linalg.norm(fwd)
  right = np.cross(fwd, [0.0, 0.0, 1.0])
  right = right / np.linalg.norm(right)
  down = np.cross(fwd, right)
  return Camera(np.stack([right, down, fwd], 1).astype(np.float32),
                np.asarray(centre, np.float32))


def to_camera(cam: Camera, points: jax.Array) -> jax.Array:
  """World ``points (..., 3)`` in the camera frame: ``R^T (p - c)``."""
  return (points - cam.centre) @ cam.rotation


def relative_pose(exo: Camera, ego: Camera) -> tuple[jax.Array, jax.Array]:
  """``(R, t)`` with ``x_ego = R x_exo + t`` (the similarity Umeyama should find, scale 1)."""
  rot = jnp.swapaxes(ego.rotation, -1, -2) @ exo.rotation
  t = jnp.einsum("...ji,...j->...i", ego.rotation, exo.centre - ego.centre)
  return rot, t


def _rot(axis: int, angle: float) -> np.ndarray:
  c, s = np.cos(angle), np.sin(angle)
  i, j = [(1, 2), (2, 0), (0, 1)][axis]
  m = np.eye(3)
  m[i, i] = m[j, j] = c
  m[i, j], m[j, i] = -s, s
  return m


def hand_keypoints(rng: np.random.Generator) -> np.ndarray:
  """``(21, 3)`` keypoints of one hand in its own frame (wrist at 0, fingers along ``+y``,
  palm normal ``+z``), with random finger lengths, spread and curl (bending to ``-z``)."""
  base_x = np.array([-0.035, -0.02, 0.0, 0.018, 0.034])  # MCP positions across the palm
  base_y = np.array([0.03, 0.085, 0.09, 0.085, 0.075])
  seg = np.array([0.035, 0.04, 0.045, 0.042, 0.035]) * rng.uniform(0.85, 1.15, FINGERS)
  spread = np.array([-0.7, -0.2, 0.0, 0.15, 0.35]) + 0.1 * rng.standard_normal(FINGERS)
  curl = rng.uniform(0.0, 0.6, FINGERS)  # per joint (rad)
  points = [np.zeros(3)]
  for f in range(FINGERS):
    p = np.array([base_x[f], base_y[f], 0.0])
    points.append(p)
    for j in range(1, JOINTS):
      bend = curl[f] * j
      step = np.array([np.sin(spread[f]) * np.cos(bend), np.cos(spread[f]) * np.cos(bend),
                       -np.sin(bend)])
      p = p + seg[f] * (1.0 - 0.15 * j) * step
      points.append(p)
  return np.stack(points)


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


def make_scene(rng: np.random.Generator | int, hands: int = 1) -> Scene:
  """A random scene (float32 NumPy; the geometry is drawn in NumPy, the rendering is jnp):
  boxes on the floor around the hands, ``hands`` hands over it (21 keypoints each), an
  exocentric camera 0.6-0.9 m away at 25-45 degrees elevation and an egocentric camera
  0.2-0.35 m behind and 0.3-0.45 m above the hands, on the far side from the exocentric one.

  Args:
    rng: a NumPy generator or a seed.
    hands: 1 or 2 (21 or 42 keypoints).
  """
  if hands not in (1, 2):
    raise ValueError(f"hands must be 1 or 2, got {hands!r}")
  rng = np.random.default_rng(rng)
  # boxes: centres 0.2-0.45 m from the hands' footprint, 2-4 of them shown, at most 0.16 m
  # tall (the hands float 0.2-0.3 m up, so a box rarely hides them)
  radius = rng.uniform(0.2, 0.45, NUM_BOXES)
  angle = rng.uniform(-np.pi, np.pi, NUM_BOXES)
  centre = radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], 1)
  half = rng.uniform([0.04, 0.04, 0.03], [0.12, 0.12, 0.08], (NUM_BOXES, 3))
  lo = np.concatenate([centre - half[:, :2], np.zeros((NUM_BOXES, 1))], 1)
  hi = np.concatenate([centre + half[:, :2], 2 * half[:, 2:]], 1)
  color = rng.uniform(0.15, 0.95, (NUM_BOXES, 3))
  on = np.arange(NUM_BOXES) < rng.integers(2, NUM_BOXES + 1)
  # hands: rotated about z (yaw), tilted a little, 0.2-0.3 m above the floor; the second
  # one mirrored and 0.28 m from the first
  kps = []
  for h in range(hands):
    local = hand_keypoints(rng)
    if h == 1:
      local = local * np.array([-1.0, 1.0, 1.0])
    rot = _rot(2, rng.uniform(-np.pi, np.pi)) @ _rot(0, 0.4 * rng.standard_normal())
    pos = np.array([*(rng.uniform(-0.08, 0.08, 2) + [0.14 * (2 * h - 1) * (hands - 1), 0.0]),
                    rng.uniform(0.2, 0.3)])
    kps.append(local @ rot.T + pos)
  keypoints = np.concatenate(kps)
  target = keypoints.mean(0)
  # exocentric camera: azimuth anywhere, elevation 25-45 degrees, 0.6-0.9 m away
  az = rng.uniform(-np.pi, np.pi)
  el = np.radians(rng.uniform(25.0, 45.0))
  dist = rng.uniform(0.6, 0.9)
  exo_c = target + dist * np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az),
                                    np.sin(el)])
  # egocentric camera: azimuth within 70 degrees of the exocentric one's opposite
  az_e = az + np.pi + np.radians(rng.uniform(-70.0, 70.0))
  back, up = rng.uniform(0.2, 0.35), rng.uniform(0.3, 0.45)
  ego_c = target + np.array([back * np.cos(az_e), back * np.sin(az_e), up])
  f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
  return Scene(f32(lo), f32(hi), f32(color), on, f32(keypoints), look_at(exo_c, target),
               look_at(ego_c, target))


def make_scenes(seed: int, num: int, hands: int = 1) -> Scene:
  """``num`` scenes from ``np.random.default_rng(seed)``, stacked along a leading axis."""
  rng = np.random.default_rng(seed)
  scenes = [make_scene(rng, hands) for _ in range(num)]
  return jax.tree.map(lambda *xs: np.stack(xs), *scenes)


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
  t_axes = jnp.where(d == 0, inf, (bound - o) / safe_d)  # parallel to a wall pair: no exit
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


class Noise(NamedTuple):
  """Standard draws behind one :class:`Observation` (so that noise levels can be swept on
  fixed draws, and drawn outside the jitted program)."""

  scale_u: np.ndarray  # () uniform in [0, 1): the depth scale's position in log scale_range
  depth: np.ndarray  # (H, W) standard normal
  kp_exo: np.ndarray  # (N, 3) standard normal
  kp_ego: np.ndarray  # (N, 3) standard normal


def draw_noise(rng: np.random.Generator | int, shape: tuple[int, int], keypoints: int,
               lead: tuple[int, ...] = ()) -> Noise:
  """:class:`Noise` of float32 NumPy draws, with leading axes ``lead``."""
  rng = np.random.default_rng(rng)
  f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
  return Noise(f32(rng.uniform(size=lead)), f32(rng.standard_normal((*lead, *shape))),
               f32(rng.standard_normal((*lead, keypoints, 3))),
               f32(rng.standard_normal((*lead, keypoints, 3))))


def observe(scene: Scene, exo: Render, noise: Noise, kp_noise: float | jax.Array,
            depth_noise: float | jax.Array,
            scale_range: tuple[float, float] = (0.3, 3.0)) -> Observation:
  """The reprojection's inputs with noise (jnp; ``kp_noise`` and ``depth_noise`` may be
  traced): exocentric depth ``a D + a sigma_d eps`` (``a = exp(log lo + u (log hi - log lo))``
  log-uniform in ``scale_range``; floored at ``0.01 a``), the hand's metric depth on its
  pixels, and both keypoint sets plus ``kp_noise x eps`` per coordinate (m)."""
  lo, hi = np.log(scale_range[0]), np.log(scale_range[1])
  a = jnp.exp(lo + noise.scale_u * (hi - lo))
  exo_depth = jnp.maximum(a * exo.depth + a * depth_noise * noise.depth, 0.01 * a)
  hand_depth = jnp.where(exo.hand, exo.depth, 0.0)
  kp = scene.keypoints
  kp_exo = to_camera(scene.exo, kp) + kp_noise * noise.kp_exo
  kp_ego = to_camera(scene.ego, kp) + kp_noise * noise.kp_ego
  return Observation(exo_depth, a, hand_depth, kp_exo, kp_ego)
