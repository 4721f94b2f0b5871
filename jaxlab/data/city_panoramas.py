r"""A procedural top-down city, its satellite view, and street-level panoramas ray-cast from it.

SatDreamer360's test bed stand-in (the paper uses VIGOR++: real satellite images and street
panoramas with GPS poses). Ours, built so that every label, depth and pixel correspondence is
known exactly:

* **City** (:func:`make_city`): a ``size x size`` grid of unit cells, world coordinates
  ``x, y in [0, size]`` (cell ``(i, j)`` spans ``[i, i+1) x [j, j+1)``), ``z`` up. Cells with
  ``i % block == 0`` or ``j % block == 0`` are road; the others are, with probability
  ``p_building``, a building of class A or B (equally likely) with a height uniform in
  ``[min_height, max_height]``, otherwise grass. Cell labels :data:`CELL_CLASSES`.
* **Satellite view** (:func:`satellite_view`): per cell the one-hot of its label and a
  shadow mask, cast by a sun along the ``(+1, +1)`` diagonal whose rays drop one unit of
  height per diagonal cell: cell ``c`` is in shadow if
  ``max_{s >= 1} h(c - s (1, 1)) - s > h(c)``. Heights are not given as a channel: as in a
  real satellite image, only the shadows carry them.
* **Panoramas** (:func:`render_panorama`): an equirectangular ``H x W`` panorama at a street
  position ``o`` with heading ``yaw``; pixel ``(v, u)`` (row, column; evaluated at pixel
  centres ``u = j + 1/2``, ``v = i + 1/2``) looks along

  .. math::
    \psi = \frac{u - W/2}{W} 2\pi, \qquad \theta = \frac{H/2 - v}{H} \pi, \qquad
    f = (\cos\theta\cos\psi,\ \cos\theta\sin\psi,\ \sin\theta)

  (SatDreamer360's pixel angles) in the camera frame, and ``R_z(yaw) f`` in the world. Rays
  are cast exactly (:func:`trace`): each building is an axis-aligned box
  ``[i, i+1] x [j, j+1] x [0, h]`` (slab test), the ground is ``z = 0``; the first hit gives
  the depth, the point, the panorama label (:data:`PANO_CLASSES`: the hit cell's label plus
  one; background = sky or ground outside the map) and a colour (the cell's colour plus a
  texture that is a fixed function of the 3D point, so it is the same from every view).

Example:
  >>> city = make_city(jax.random.key(0), size=16)
  >>> sat = satellite_view(city)                         # (16, 16, 5)
  >>> o = jnp.array([8.5, 6.2, 0.3])
  >>> pano = render_panorama(city, o, 0.7, 16, 64)       # labels (16, 64) in 0..4
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["CELL_CLASSES", "PANO_CLASSES", "City", "Hit", "Panorama", "angles_to_direction",
           "correspondences", "direction_to_angles", "direction_to_pixel", "make_city",
           "panorama_directions", "pixel_angles", "render_panorama", "satellite_view",
           "street_positions", "street_sequence", "trace", "yaw_matrix"]

CELL_CLASSES = ("road", "grass", "building_a", "building_b")
PANO_CLASSES = ("background", "road", "grass", "building_a", "building_b")
ROAD, GRASS, BUILDING_A, BUILDING_B = range(4)
_FAR = 1e9  # "no hit" depth
_TEXTURE_FREQ = np.array([[2.1, 0.7, 1.3], [0.9, 2.4, 0.5], [1.1, 1.7, 2.6]], np.float32) * 2


class City(NamedTuple):
  """A city grid: ``label (G, G)`` int32 in :data:`CELL_CLASSES`, ``height (G, G)`` (0 off
  buildings) and ``colour (G, G, 3)`` (each cell's base colour)."""

  label: jax.Array
  height: jax.Array
  colour: jax.Array


class Hit(NamedTuple):
  """The first hit of rays: ``depth`` (``inf`` for none), ``point (..., 3)``, ``label`` in
  :data:`PANO_CLASSES` and ``colour (..., 3)``."""

  depth: jax.Array
  point: jax.Array
  label: jax.Array
  colour: jax.Array


class Panorama(NamedTuple):
  """A rendered panorama: ``label (H, W)``, ``depth (H, W)``, ``point (H, W, 3)``,
  ``colour (H, W, 3)`` and its world ray ``directions (H, W, 3)``."""

  label: jax.Array
  depth: jax.Array
  point: jax.Array
  colour: jax.Array
  directions: jax.Array


def _check_size(name: str, value, minimum: int = 1) -> None:
  if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def pixel_angles(height: int, width: int) -> tuple[jax.Array, jax.Array]:
  r"""Azimuth ``psi`` and elevation ``theta`` of every pixel centre, each ``(H, W)``.

  ``psi = (u - W/2) / W * 2 pi`` and ``theta = (H/2 - v) / H * pi`` at ``u = j + 1/2``,
  ``v = i + 1/2`` (SatDreamer360, Sec. 3.2): columns sweep ``psi`` from ``-pi`` to ``pi``,
  rows ``theta`` from ``pi/2`` (up) to ``-pi/2``.
  """
  _check_size("height", height)
  _check_size("width", width)
  u = jnp.arange(width) + 0.5
  v = jnp.arange(height) + 0.5
  psi = (u - width / 2) / width * 2 * jnp.pi
  theta = (height / 2 - v) / height * jnp.pi
  return jnp.broadcast_to(psi[None, :], (height, width)), jnp.broadcast_to(
      theta[:, None], (height, width))


def angles_to_direction(psi: jax.Array, theta: jax.Array) -> jax.Array:
  """Unit ray ``(cos t cos p, cos t sin p, sin t)`` for azimuth ``p`` and elevation ``t``."""
  c = jnp.cos(theta)
  return jnp.stack([c * jnp.cos(psi), c * jnp.sin(psi), jnp.sin(theta)], -1)


def direction_to_angles(d: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(psi, theta)`` of directions ``(..., 3)`` (need not be unit), inverse of
  :func:`angles_to_direction`; ``psi`` in ``(-pi, pi]``."""
  psi = jnp.arctan2(d[..., 1], d[..., 0])
  theta = jnp.arctan2(d[..., 2], jnp.linalg.norm(d[..., :2], axis=-1))
  return psi, theta


def direction_to_pixel(d: jax.Array, height: int, width: int) -> tuple[jax.Array, jax.Array]:
  """Continuous pixel coordinates ``(u, v)`` of camera-frame directions (the inverse of the
  pixel-angle formulas); the pixel index is ``(floor(v), floor(u) mod W)``."""
  psi, theta = direction_to_angles(d)
  return psi / (2 * jnp.pi) * width + width / 2, height / 2 - theta / jnp.pi * height


def yaw_matrix(yaw: jax.Array) -> jax.Array:
  """Rotation about ``z`` by ``yaw``: camera frame to world frame, ``(3, 3)``."""
  c, s = jnp.cos(yaw), jnp.sin(yaw)
  z, o = jnp.zeros_like(c), jnp.ones_like(c)
  return jnp.stack([jnp.stack([c, -s, z]), jnp.stack([s, c, z]), jnp.stack([z, z, o])])


def panorama_directions(yaw: jax.Array, height: int, width: int) -> jax.Array:
  """World directions ``R_z(yaw) f(psi, theta)`` of every pixel, ``(H, W, 3)``."""
  psi, theta = pixel_angles(height, width)
  return angles_to_direction(psi, theta) @ yaw_matrix(yaw).T


def make_city(key: jax.Array, size: int = 16, *, block: int = 4, p_building: float = 0.6,
              min_height: float = 0.8, max_height: float = 3.0) -> City:
  """A random city (see the module docstring); jit- and vmap-able over ``key``."""
  _check_size("size", size, 2)
  _check_size("block", block, 2)
  if not 0 <= p_building <= 1:
    raise ValueError(f"p_building must be in [0, 1], got {p_building!r}")
  if not 0 < min_height <= max_height:
    raise ValueError(f"need 0 < min_height <= max_height, got {min_height!r}, {max_height!r}")
  k_b, k_c, k_h, k_col = jax.random.split(key, 4)
  i = jnp.arange(size)
  road = (i[:, None] % block == 0) | (i[None, :] % block == 0)
  building = jax.random.bernoulli(k_b, p_building, (size, size)) & ~road
  kind = jnp.where(jax.random.bernoulli(k_c, 0.5, (size, size)), BUILDING_B, BUILDING_A)
  label = jnp.where(road, ROAD, jnp.where(building, kind, GRASS)).astype(jnp.int32)
  height = jnp.where(building, jax.random.uniform(k_h, (size, size), minval=min_height,
                                                  maxval=max_height), 0.0)
  base = jnp.array([[0.35, 0.35, 0.38], [0.25, 0.6, 0.25], [0.75, 0.45, 0.35],
                    [0.45, 0.5, 0.8]])
  colour = base[label] + 0.15 * jax.random.uniform(k_col, (size, size, 3), minval=-1.0)
  return City(label, height, colour)


def satellite_view(city: City) -> jax.Array:
  """The satellite view ``(G, G, 5)``: one-hot cell label (4) and the shadow mask (1).

  A cell ``c`` is in shadow when ``max_{s >= 1} h(c - s (1, 1)) - s > h(c)`` (a sun along
  the ``(+1, +1)`` diagonal at the elevation where rays drop one unit per diagonal cell).
  """
  h = city.height
  g = h.shape[0]
  max_shift = int(np.ceil(g))  # heights are below the map size in practice; shifts past it
  caster = jnp.full_like(h, -jnp.inf)
  for s in range(1, max_shift):
    shifted = jnp.full_like(h, -jnp.inf).at[s:, s:].set(h[:-s, :-s] - s)
    caster = jnp.maximum(caster, shifted)
  shadow = (caster > h).astype(jnp.float32)
  return jnp.concatenate([jax.nn.one_hot(city.label, len(CELL_CLASSES)), shadow[..., None]], -1)


def trace(city: City, origins: jax.Array, directions: jax.Array) -> Hit:
  """Exact first hits of rays ``origins + t directions`` (``(..., 3)`` each, broadcast).

  Every building is a box ``[i, i+1] x [j, j+1] x [0, h]`` (slab test: the ray is inside
  the box for ``t`` between the largest entry and the smallest exit over the three axes);
  the ground is ``z = 0`` and counts only inside the map. ``depth = t`` of the nearest hit
  (``inf`` for none, label 0 = background).
  """
  g = city.label.shape[0]
  origins, directions = jnp.broadcast_arrays(origins, directions)
  shape = origins.shape[:-1]
  o = origins.reshape(-1, 1, 3)
  d = directions.reshape(-1, 1, 3)
  ii, jj = jnp.meshgrid(jnp.arange(g, dtype=jnp.float32), jnp.arange(g, dtype=jnp.float32),
                        indexing="ij")
  lo = jnp.stack([ii, jj, jnp.zeros_like(ii)], -1).reshape(1, -1, 3)
  hi = jnp.stack([ii + 1, jj + 1, city.height], -1).reshape(1, -1, 3)
  safe = jnp.where(jnp.abs(d) < 1e-12, jnp.where(d < 0, -1e-12, 1e-12), d)
  t1, t2 = (lo - o) / safe, (hi - o) / safe
  t_in = jnp.max(jnp.minimum(t1, t2), -1)
  t_out = jnp.min(jnp.maximum(t1, t2), -1)
  is_box = (city.height > 0).reshape(1, -1)
  hit_box = is_box & (t_in <= t_out) & (t_out > 0)
  t_box = jnp.where(hit_box, jnp.maximum(t_in, 0.0), _FAR)
  best = jnp.argmin(t_box, -1)
  t_b = jnp.take_along_axis(t_box, best[:, None], -1)[:, 0]
  # the ground plane, inside the map only
  oz, dz = o[:, 0, 2], d[:, 0, 2]
  t_g = jnp.where(dz < 0, -oz / jnp.where(dz < 0, dz, -1.0), _FAR)
  p_g = o[:, 0] + t_g[:, None] * d[:, 0]
  inside = (dz < 0) & (p_g[:, 0] >= 0) & (p_g[:, 0] < g) & (p_g[:, 1] >= 0) & (p_g[:, 1] < g)
  t_g = jnp.where(inside, t_g, _FAR)
  t = jnp.minimum(t_b, t_g)
  hit = t < _FAR
  point = o[:, 0] + jnp.where(hit, t, 0.0)[:, None] * d[:, 0]
  gi = jnp.clip(jnp.floor(p_g[:, 0]).astype(jnp.int32), 0, g - 1)
  gj = jnp.clip(jnp.floor(p_g[:, 1]).astype(jnp.int32), 0, g - 1)
  bi, bj = best // g, best % g
  use_box = t_b <= t_g
  ci, cj = jnp.where(use_box, bi, gi), jnp.where(use_box, bj, gj)
  label = jnp.where(hit, city.label[ci, cj] + 1, 0).astype(jnp.int32)
  texture = 0.12 * jnp.sin(point @ jnp.asarray(_TEXTURE_FREQ).T * jnp.pi)
  sky = jnp.stack([0.6 + 0.3 * d[:, 0, 2], 0.75 + 0.2 * d[:, 0, 2], 0.95 + 0 * d[:, 0, 2]], -1)
  colour = jnp.where(hit[:, None], city.colour[ci, cj] + texture, sky)
  return Hit(jnp.where(hit, t, jnp.inf).reshape(shape), point.reshape(*shape, 3),
             label.reshape(shape), colour.reshape(*shape, 3))


def render_panorama(city: City, origin: jax.Array, yaw: jax.Array, height: int,
                    width: int) -> Panorama:
  """The ``H x W`` panorama at ``origin (3,)`` with heading ``yaw`` (see :func:`trace`)."""
  dirs = panorama_directions(yaw, height, width)
  hit = trace(city, jnp.asarray(origin, jnp.float32), dirs)
  return Panorama(hit.label, hit.depth, hit.point, hit.colour, dirs)


def _road_lines(size: int, block: int, margin: int) -> np.ndarray:
  lines = np.arange(block, size - margin + 1, block)
  if len(lines) == 0:
    raise ValueError(f"no interior road for size={size}, block={block}, margin={margin}")
  return lines


def street_positions(key: jax.Array, size: int, num: int, *, block: int = 4,
                     cam_height: float = 0.3, margin: int = 2) -> jax.Array:
  """``num`` camera positions ``(num, 3)`` on roads at least ``margin`` cells from the edge:
  the centre line of a road row or column ``k * block`` (``k >= 1``), uniform along it."""
  _check_size("num", num)
  lines = _road_lines(size, block, margin)
  k_line, k_axis, k_along = jax.random.split(key, 3)
  line = jnp.asarray(lines, jnp.float32)[jax.random.randint(k_line, (num,), 0, len(lines))] + 0.5
  along = jax.random.uniform(k_along, (num,), minval=margin, maxval=size - margin)
  on_x = jax.random.bernoulli(k_axis, 0.5, (num,))
  return jnp.stack([jnp.where(on_x, line, along), jnp.where(on_x, along, line),
                    jnp.full((num,), cam_height)], -1)


def street_sequence(key: jax.Array, size: int, frames: int, step: float, *, block: int = 4,
                    cam_height: float = 0.3, margin: int = 2) -> tuple[jax.Array, jax.Array]:
  """A trajectory of ``frames`` positions ``(F, 3)`` along one road, ``step`` apart, in
  ``[margin, size - margin]``, and a random heading per frame ``(F,)`` (a panoramic camera
  need not face its motion)."""
  _check_size("frames", frames)
  lines = _road_lines(size, block, margin)
  span = step * (frames - 1)
  if span > size - 2 * margin:
    raise ValueError(f"step * (frames - 1) = {span} does not fit in the map's interior")
  k_line, k_axis, k_start, k_dir, k_yaw = jax.random.split(key, 5)
  line = jnp.asarray(lines, jnp.float32)[jax.random.randint(k_line, (), 0, len(lines))] + 0.5
  on_x = jax.random.bernoulli(k_axis, 0.5)  # x is the road line: the camera moves along y
  first = jax.random.uniform(k_start, (), minval=margin, maxval=size - margin - span)
  along = first + step * jnp.arange(frames)
  along = jnp.where(jax.random.bernoulli(k_dir, 0.5), along, along[::-1])
  line = jnp.full((frames,), line)
  pos = jnp.stack([jnp.where(on_x, line, along), jnp.where(on_x, along, line),
                   jnp.full((frames,), cam_height)], -1)
  yaw = jax.random.uniform(k_yaw, (frames,), minval=-jnp.pi, maxval=jnp.pi)
  return pos, yaw


def correspondences(city: City, pano: Panorama, origin_m: jax.Array, yaw_m: jax.Array,
                    height: int, width: int) -> tuple[jax.Array, jax.Array]:
  """Ground-truth matches of every pixel of ``pano`` in the panorama at ``(origin_m, yaw_m)``.

  Pixel ``p`` of ``pano`` sees the 3D point ``X_p``; its match is the pixel of frame ``m``
  whose cell contains the direction ``R_m^T (X_p - o_m)``, valid when ``X_p`` is a hit and
  is visible from ``o_m`` (the first hit along that ray is ``X_p`` itself, up to 1e-3).

  Returns:
    ``(index (H*W,), valid (H*W,))``: flat pixel indices ``v * W + u`` in frame ``m``.
  """
  x = pano.point.reshape(-1, 3)
  rel = x - origin_m
  dist = jnp.linalg.norm(rel, axis=-1)
  hit = trace(city, origin_m, rel / jnp.maximum(dist, 1e-9)[:, None])
  visible = jnp.isfinite(pano.depth.reshape(-1)) & (hit.depth >= dist - 1e-3 * (1 + dist))
  u, v = direction_to_pixel(rel @ yaw_matrix(yaw_m), height, width)
  col = jnp.floor(u).astype(jnp.int32) % width
  row = jnp.clip(jnp.floor(v).astype(jnp.int32), 0, height - 1)
  return row * width + col, visible
