r"""SatDreamer360's two mechanisms: ray-based triplane retrieval and panoramic epipolar attention.

*SatDreamer360: Multiview-Consistent Generation of Ground-Level Scenes from Satellite
Imagery*, Ze, Zhu, Song, Lu, Shi, arXiv:2506.00600 (ICLR 2026). No official code.

**The paper's.** A triplane encodes the scene from the satellite image; a 3D point reads

.. math::
  F(x) = F_{xy}(x, y) + F_{xz}(x, z) + F_{yz}(y, z)

(bilinear lookup in each plane). Panorama pixel ``(u, v)`` looks along azimuth
``psi = (u - W/2)/W 2 pi`` and elevation ``theta = (H/2 - v)/H pi``; along its ray ``K = 8``
depth samples ``x_k`` are taken and the pixel's feature is

.. math::
  F_g = \sum_j W_j \sum_k A_{kj}\, F(x_k + \Delta x_{kj})

with learned offsets ``Delta x`` and weights ``A`` (over samples ``k``) and ``W`` (over
offset sets ``j``). Between frames of a trajectory, panoramic epipolar attention lets a pixel
of frame ``n`` attend only to pixels of the first and the previous frame that lie near its
epipolar curve on the sphere: unit rays with ``f_n^T [t]_x R f_m = 0``, where ``(R, t)``
maps frame ``m``'s camera coordinates into frame ``n``'s (``x_n = R x_m + t``).

**Ours (choices marked [I] in the docs).** The triplane is lifted from satellite features
``F_xy (G, G, C)`` by a learned linear map along the collapsed axis plus a per-height bias
(:class:`TriplaneLift`); the sampled features pass a small per-point MLP (as EG3D decodes
triplane features); ``Delta x`` (bounded by ``max_offset`` times the sample's depth) and
``W`` are predicted from the pixel's ray query and ``A``
is dot-product attention of the query on the sampled features (softmax over ``k``), with a
per-sample depth embedding. The epipolar candidates are the ``M`` pixels nearest the
epipolar great circle in angle (top-``M``); the paper's ``M = 4`` is for its own latent
resolution and sampling, and ``M`` is a parameter here.

Example:
  >>> tri = Triplane(xy, xz, yz)                              # (G, G, C), (G, Z, C), (G, Z, C)
  >>> f = triplane_features(tri, points, extent=(16., 16., 4.))   # (..., C)
  >>> R, t = relative_pose(yaw_n, o_n, yaw_m, o_m)
  >>> idx = epipolar_candidates(f_n, f_m, R, t, 128)          # (Q, 128) pixel indices of m
  >>> out, w = epipolar_attention(q, k, v, idx)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.data.city_panoramas import (
  angles_to_direction,
  direction_to_angles,
  direction_to_pixel,
  panorama_directions,
  pixel_angles,
  yaw_matrix,
)
from jaxlab.nn import MLP

__all__ = ["BEVModel", "CorrespondenceEncoder", "GlobalAttentionModel", "Triplane",
           "TriplaneLift", "TriplaneRayModel", "SatelliteEncoder", "angles_to_direction",
           "attention_flops", "bilinear", "direction_to_angles", "direction_to_pixel",
           "epipolar_attention", "epipolar_candidates", "epipolar_distance",
           "epipolar_residual", "essential_matrix", "full_attention", "panorama_directions",
           "pixel_angles", "ray_depths", "ray_query", "relative_pose", "skew",
           "triplane_features", "yaw_matrix"]


# ---------------------------------------------------------------------------------------------
# Triplane lookup


class Triplane(NamedTuple):
  """Three feature planes over the box ``[0, X] x [0, Y] x [0, Z]``: ``xy (Nx, Ny, C)``,
  ``xz (Nx, Nz, C)``, ``yz (Ny, Nz, C)``; plane entry ``i`` sits at the centre of the
  ``i``-th of ``N`` equal bins of its axis."""

  xy: jax.Array
  xz: jax.Array
  yz: jax.Array


def bilinear(plane: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
  """Bilinear interpolation of ``plane (Na, Nb, C)`` at continuous indices ``(a, b)``.

  ``plane[i, j]`` is the value at ``(a, b) = (i, j)``; coordinates are clamped to
  ``[0, N - 1]`` (border padding). Returns ``(..., C)`` for ``a, b`` of shape ``(...)``.
  """
  na, nb = plane.shape[0], plane.shape[1]
  a = jnp.clip(a, 0.0, na - 1.0)
  b = jnp.clip(b, 0.0, nb - 1.0)
  a0 = jnp.clip(jnp.floor(a), 0, max(na - 2, 0)).astype(jnp.int32)
  b0 = jnp.clip(jnp.floor(b), 0, max(nb - 2, 0)).astype(jnp.int32)
  a1, b1 = jnp.minimum(a0 + 1, na - 1), jnp.minimum(b0 + 1, nb - 1)
  wa, wb = (a - a0)[..., None], (b - b0)[..., None]
  return ((1 - wa) * (1 - wb) * plane[a0, b0] + (1 - wa) * wb * plane[a0, b1]
          + wa * (1 - wb) * plane[a1, b0] + wa * wb * plane[a1, b1])


def triplane_features(tri: Triplane, points: jax.Array, extent: Sequence[float]) -> jax.Array:
  """``F(x) = F_xy(x, y) + F_xz(x, z) + F_yz(y, z)`` at world ``points (..., 3)``.

  ``extent = (X, Y, Z)``: the box the planes cover; a world coordinate ``c`` on an axis of
  ``N`` bins over ``[0, L]`` is the continuous index ``c N / L - 1/2``.
  """
  ex, ey, ez = extent
  ix = points[..., 0] * tri.xy.shape[0] / ex - 0.5
  iy = points[..., 1] * tri.xy.shape[1] / ey - 0.5
  iz = points[..., 2] * tri.xz.shape[1] / ez - 0.5
  return bilinear(tri.xy, ix, iy) + bilinear(tri.xz, ix, iz) + bilinear(tri.yz, iy, iz)


def ray_depths(num: int, near: float, far: float) -> jax.Array:
  """``num`` depths from ``near`` to ``far`` evenly spaced in inverse depth (disparity), so
  nearby structure gets more samples."""
  if not isinstance(num, int) or num < 1:
    raise ValueError(f"num must be a positive int, got {num!r}")
  if not 0 < near < far:
    raise ValueError(f"need 0 < near < far, got near={near!r}, far={far!r}")
  return 1.0 / jnp.linspace(1.0 / near, 1.0 / far, num)


def ray_query(directions: jax.Array, num_freqs: int = 4) -> jax.Array:
  """A pixel's ray query: Fourier features ``sin / cos(2^i psi), sin / cos(2^i theta)`` of its
  world direction, ``(..., 4 num_freqs)``."""
  psi, theta = direction_to_angles(directions)
  freqs = 2.0 ** jnp.arange(num_freqs)
  ang = jnp.concatenate([psi[..., None] * freqs, theta[..., None] * freqs], -1)
  return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], -1)


# ---------------------------------------------------------------------------------------------
# Networks (flax.nnx)


class SatelliteEncoder(nnx.Module):
  """Satellite view ``(B, G, G, C_in)`` to ``F_xy (B, G, G, C)``: 3 x 3 convolutions, GELU."""

  def __init__(self, in_dim: int, dim: int, layers: int = 3, *, rngs: nnx.Rngs):
    dims = [in_dim] + [dim] * layers
    self.convs = nnx.List([nnx.Conv(a, b, (3, 3), padding="SAME", rngs=rngs)
                           for a, b in zip(dims[:-1], dims[1:], strict=True)])

  def __call__(self, sat: jax.Array) -> jax.Array:
    x = sat
    for i, conv in enumerate(self.convs):
      x = conv(x)
      if i < len(self.convs) - 1:
        x = jax.nn.gelu(x)
    return x


class TriplaneLift(nnx.Module):
  r"""``F_xy (B, G, G, C)`` to a :class:`Triplane` with ``Nz`` height bins [I]:

  .. math::
    F_{xz}[x, z] = \sum_y M_{zy} F_{xy}[x, y] + b_z, \qquad
    F_{yz}[y, z] = \sum_x M'_{zx} F_{xy}[x, y] + b'_z.
  """

  def __init__(self, size: int, height_bins: int, dim: int, *, rngs: nnx.Rngs):
    init = nnx.initializers.normal(1.0 / size ** 0.5)
    self.m_xz = nnx.Param(init(rngs.params(), (height_bins, size)))
    self.m_yz = nnx.Param(init(rngs.params(), (height_bins, size)))
    self.b_xz = nnx.Param(nnx.initializers.normal(0.5)(rngs.params(), (height_bins, dim)))
    self.b_yz = nnx.Param(nnx.initializers.normal(0.5)(rngs.params(), (height_bins, dim)))

  def __call__(self, f_xy: jax.Array) -> Triplane:
    xz = jnp.einsum("bxyc,zy->bxzc", f_xy, self.m_xz[...]) + self.b_xz[...]
    yz = jnp.einsum("bxyc,zx->byzc", f_xy, self.m_yz[...]) + self.b_yz[...]
    return Triplane(f_xy, xz, yz)


class TriplaneRayModel(nnx.Module):
  """Ray-based triplane retrieval (SatDreamer360) with a per-pixel class decoder.

  ``__call__(sat (B, G, G, C_in), origins (B, R, 3), directions (B, R, 3)) -> logits
  (B, R, classes)``: ``F_g = sum_j W_j sum_k A_kj F(x_k + dx_kj)`` per ray, then
  ``MLP([F_g, query])``. The ``K`` depths are spaced evenly in inverse depth over
  ``[near, far]``; each offset is bounded by ``max_offset`` times its sample's depth.
  """

  def __init__(self, in_dim: int, size: int, classes: int, *, dim: int = 32,
               height_bins: int = 8, height: float = 4.0, samples: int = 8, offsets: int = 4,
               near: float = 0.4, far: float = 16.0, max_offset: float = 0.5,
               num_freqs: int = 4, rngs: nnx.Rngs):
    self.encoder = SatelliteEncoder(in_dim, dim, rngs=rngs)
    self.lift = TriplaneLift(size, height_bins, dim, rngs=rngs)
    qdim = 4 * num_freqs
    self.point_mlp = MLP(dim, [dim], dim, rngs=rngs)  # per-sample feature decoder [I]
    self.depth_embed = nnx.Param(nnx.initializers.normal(0.5)(rngs.params(), (samples, dim)))
    self.to_offsets = nnx.Linear(qdim, samples * offsets * 3, rngs=rngs,
                                 kernel_init=nnx.initializers.normal(1e-2))
    self.to_w = nnx.Linear(qdim, offsets, rngs=rngs)
    self.to_q = nnx.Linear(qdim, dim, rngs=rngs)
    self.to_k = nnx.Linear(dim, dim, rngs=rngs)
    self.decoder = MLP(dim + qdim, [2 * dim], classes, rngs=rngs)
    self.extent = (float(size), float(size), float(height))
    self.samples, self.offsets, self.max_offset = samples, offsets, max_offset
    self.near, self.far, self.num_freqs = near, far, num_freqs

  def retrieve(self, tri: Triplane, origins: jax.Array, directions: jax.Array,
               query: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(F_g (R, C), A (R, K, J), W (R, J))`` for one scene's rays."""
    r, k_n, j_n = origins.shape[0], self.samples, self.offsets
    t = ray_depths(k_n, self.near, self.far)
    x = origins[:, None, :] + t[None, :, None] * directions[:, None, :]  # (R, K, 3)
    # offsets scale with the sample's depth [I]: a far sample may move as far as the gap to
    # its neighbours (inverse-depth spacing leaves wide gaps far away)
    dx = (self.max_offset * t[None, :, None, None]
          * jnp.tanh(self.to_offsets(query)).reshape(r, k_n, j_n, 3))
    feats = triplane_features(tri, x[:, :, None, :] + dx, self.extent)  # (R, K, J, C)
    feats = self.point_mlp(feats) + self.depth_embed[...][None, :, None, :]
    q = self.to_q(query)  # (R, C)
    logits = jnp.einsum("rc,rkjc->rkj", q, self.to_k(feats)) / jnp.sqrt(q.shape[-1])
    a = jax.nn.softmax(logits, axis=1)  # A_kj: over samples k
    w = jax.nn.softmax(self.to_w(query), -1)  # W_j
    f_g = jnp.einsum("rj,rkj,rkjc->rc", w, a, feats)
    return f_g, a, w

  def __call__(self, sat: jax.Array, origins: jax.Array, directions: jax.Array) -> jax.Array:
    tris = self.lift(self.encoder(sat))
    query = ray_query(directions, self.num_freqs)
    f_g = jax.vmap(lambda tri, o, d, q: self.retrieve(tri, o, d, q)[0])(
        tris, origins, directions, query)
    return self.decoder(jnp.concatenate([f_g, query], -1))


class BEVModel(nnx.Module):
  """BEV-only baseline [I]: each ray reads ``F_xy`` at its ground-plane intersection
  (flat-world projection, depth clipped to ``far``); rays at or above the horizon read a
  learned vector. ``__call__`` as :class:`TriplaneRayModel`."""

  def __init__(self, in_dim: int, size: int, classes: int, *, dim: int = 32,
               far: float = 16.0, num_freqs: int = 4, rngs: nnx.Rngs):
    self.encoder = SatelliteEncoder(in_dim, dim, rngs=rngs)
    self.point_mlp = MLP(dim, [dim], dim, rngs=rngs)
    self.sky = nnx.Param(jnp.zeros((dim,)))
    qdim = 4 * num_freqs
    self.decoder = MLP(dim + qdim, [2 * dim], classes, rngs=rngs)
    self.size, self.far, self.num_freqs = float(size), far, num_freqs

  def __call__(self, sat: jax.Array, origins: jax.Array, directions: jax.Array) -> jax.Array:
    f_xy = self.encoder(sat)
    dz = directions[..., 2]
    down = dz < -1e-6
    t = jnp.minimum(-origins[..., 2] / jnp.where(down, dz, -1.0), self.far)
    p = origins + t[..., None] * directions
    n = f_xy.shape[1]
    feats = jax.vmap(bilinear)(f_xy, p[..., 0] * n / self.size - 0.5,
                               p[..., 1] * n / self.size - 0.5)
    feats = jnp.where(down[..., None], self.point_mlp(feats), self.sky[...])
    query = ray_query(directions, self.num_freqs)
    return self.decoder(jnp.concatenate([feats, query], -1))


class GlobalAttentionModel(nnx.Module):
  """Global cross-attention baseline: every pixel's ray query attends to all satellite cells,
  whose keys carry their position relative to the camera (Fourier features of ``(dx, dy) /
  size``); ``heads`` heads, one layer. ``__call__`` as :class:`TriplaneRayModel`."""

  def __init__(self, in_dim: int, size: int, classes: int, *, dim: int = 32, heads: int = 2,
               num_freqs: int = 4, rngs: nnx.Rngs):
    self.encoder = SatelliteEncoder(in_dim, dim, rngs=rngs)
    qdim = 4 * num_freqs
    self.pos = MLP(4 * num_freqs, [dim], dim, rngs=rngs)
    self.to_q = MLP(qdim, [dim], dim, rngs=rngs)
    self.to_k = nnx.Linear(dim, dim, rngs=rngs)
    self.to_v = nnx.Linear(dim, dim, rngs=rngs)
    self.decoder = MLP(dim + qdim, [2 * dim], classes, rngs=rngs)
    self.size, self.heads, self.num_freqs = float(size), heads, num_freqs

  def __call__(self, sat: jax.Array, origins: jax.Array, directions: jax.Array) -> jax.Array:
    f = self.encoder(sat)  # (B, G, G, C)
    b, g = f.shape[0], f.shape[1]
    centres = (jnp.arange(g) + 0.5) * self.size / g
    cx, cy = jnp.meshgrid(centres, centres, indexing="ij")
    cells = jnp.stack([cx, cy], -1).reshape(1, g * g, 2)
    rel = (cells - origins[:, :1, :2]) / self.size  # (B, G*G, 2): relative to the camera
    freqs = 2.0 ** jnp.arange(self.num_freqs) * jnp.pi
    ang = (rel[..., None] * freqs).reshape(b, g * g, -1)
    keys_in = f.reshape(b, g * g, -1) + self.pos(jnp.concatenate([jnp.sin(ang), jnp.cos(ang)],
                                                                  -1))
    query = ray_query(directions, self.num_freqs)
    h = self.heads
    # (B, L, C) -> (B, heads, L, C / heads)
    split = lambda x: x.reshape(*x.shape[:-1], h, -1).swapaxes(-2, -3)  # noqa: E731
    out, _ = full_attention(split(self.to_q(query)), split(self.to_k(keys_in)),
                            split(self.to_v(keys_in)))
    out = out.swapaxes(-2, -3).reshape(*query.shape[:-1], -1)
    return self.decoder(jnp.concatenate([out, query], -1))


class CorrespondenceEncoder(nnx.Module):
  """Per-pixel descriptors of a panorama ``(B, H, W, 3) -> (B, H, W, D)``: 3 x 3
  convolutions with circular padding along the azimuth (a panorama wraps around) and edge
  padding along the elevation."""

  def __init__(self, in_dim: int, dim: int, layers: int = 3, *, rngs: nnx.Rngs):
    dims = [in_dim] + [dim] * layers
    self.convs = nnx.List([nnx.Conv(a, b, (3, 3), padding="VALID", rngs=rngs)
                           for a, b in zip(dims[:-1], dims[1:], strict=True)])

  def __call__(self, x: jax.Array) -> jax.Array:
    for i, conv in enumerate(self.convs):
      x = jnp.concatenate([x[:, :, -1:], x, x[:, :, :1]], 2)  # wrap in azimuth
      x = jnp.pad(x, ((0, 0), (1, 1), (0, 0), (0, 0)), mode="edge")
      x = conv(x)
      if i < len(self.convs) - 1:
        x = jax.nn.gelu(x)
    return x


# ---------------------------------------------------------------------------------------------
# Attention and the epipolar constraint


def full_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Scaled dot-product attention of every query on every key (heads as batch dims).

  Args:
    q: ``(..., Q, D)``; k, v: ``(..., N, D)`` (same batch dims).

  Returns:
    ``(out (..., Q, D), weights (..., Q, N))``.
  """
  w = jax.nn.softmax(jnp.einsum("...qd,...nd->...qn", q, k) / jnp.sqrt(q.shape[-1]), -1)
  return jnp.einsum("...qn,...nd->...qd", w, v), w


def epipolar_attention(q: jax.Array, k: jax.Array, v: jax.Array, candidates: jax.Array
                       ) -> tuple[jax.Array, jax.Array]:
  """Attention of each query on its own candidate keys only.

  Args:
    q: ``(Q, D)``; k, v: ``(N, D)``; candidates: ``(Q, M)`` int indices into ``N``.

  Returns:
    ``(out (Q, D), weights (Q, M))``: ``out_i = sum_m softmax_m(q_i . k_{c_im} / sqrt D)
    v_{c_im}``.
  """
  kc, vc = k[candidates], v[candidates]  # (Q, M, D)
  w = jax.nn.softmax(jnp.einsum("qd,qmd->qm", q, kc) / jnp.sqrt(q.shape[-1]), -1)
  return jnp.einsum("qm,qmd->qd", w, vc), w


def skew(t: jax.Array) -> jax.Array:
  """``[t]_x (3, 3)``, with ``[t]_x a = t x a``."""
  z = jnp.zeros_like(t[0])
  return jnp.stack([jnp.stack([z, -t[2], t[1]]), jnp.stack([t[2], z, -t[0]]),
                    jnp.stack([-t[1], t[0], z])])


def essential_matrix(r: jax.Array, t: jax.Array) -> jax.Array:
  """``E = [t]_x R``: ``f_n^T E f_m = 0`` for rays of one point when ``x_n = R x_m + t``."""
  return skew(t) @ r


def relative_pose(yaw_n: jax.Array, origin_n: jax.Array, yaw_m: jax.Array,
                  origin_m: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(R, t)`` mapping camera ``m``'s coordinates into camera ``n``'s, ``x_n = R x_m + t``,
  for cameras at ``origin`` with heading ``yaw`` (``x_world = R_z(yaw) x_cam + origin``):
  ``R = R_n^T R_m``, ``t = R_n^T (o_m - o_n)``."""
  rn, rm = yaw_matrix(yaw_n), yaw_matrix(yaw_m)
  return rn.T @ rm, rn.T @ (origin_m - origin_n)


def epipolar_residual(f_n: jax.Array, f_m: jax.Array, r: jax.Array, t: jax.Array
                      ) -> jax.Array:
  """``f_n^T [t]_x R f_m`` (broadcast over leading dims of ``f_n (..., 3)``, ``f_m (..., 3)``)."""
  return jnp.einsum("...i,ij,...j->...", f_n, essential_matrix(r, t), f_m)


def epipolar_distance(f_n: jax.Array, f_m: jax.Array, r: jax.Array, t: jax.Array
                      ) -> jax.Array:
  """Angle between unit ray ``f_m`` and the epipolar great circle of ``f_n`` in frame ``m``:
  ``|asin(f_m . n / |n|)|`` with ``n = E^T f_n``; ``f_n (Q, 3)``, ``f_m (N, 3)`` give
  ``(Q, N)``."""
  normal = f_n @ essential_matrix(r, t)  # (Q, 3): rows E^T f_n
  normal = normal / jnp.maximum(jnp.linalg.norm(normal, axis=-1, keepdims=True), 1e-12)
  return jnp.abs(jnp.arcsin(jnp.clip(normal @ f_m.T, -1.0, 1.0)))


def epipolar_candidates(f_n: jax.Array, f_m: jax.Array, r: jax.Array, t: jax.Array,
                        num: int) -> jax.Array:
  """The ``num`` rays of ``f_m (N, 3)`` nearest each query's epipolar curve: ``(Q, num)``
  indices, nearest first (:func:`epipolar_distance`, ``lax.top_k``)."""
  if not isinstance(num, int) or not 1 <= num <= f_m.shape[0]:
    raise ValueError(f"num must be an int in [1, {f_m.shape[0]}], got {num!r}")
  return jax.lax.top_k(-epipolar_distance(f_n, f_m, r, t), num)[1]


def attention_flops(queries: int, keys: int, dim: int, candidates: int | None = None
                    ) -> dict[str, int]:
  """Analytic FLOPs of attention for ``queries`` queries on one frame of ``keys`` pixels.

  Counts a multiply-add as 2 FLOPs and one per exp / add / divide of the softmax:
  ``scores = 2 D N``, ``softmax = 3 N``, ``weighted sum = 2 D N`` per query (full, ``N =
  keys``). Epipolar (``candidates = M``): the same with ``N = M``, plus the candidate
  search, ``15`` for ``E^T f_n`` and ``5 + 1`` per key pixel for the normalized residual
  (``arcsin`` and the top-``M`` comparisons are not counted: they are not multiply-adds).
  Returns ``{"attention", "selection", "total"}``.
  """
  n = keys if candidates is None else candidates
  attn = queries * (4 * dim * n + 3 * n)
  select = 0 if candidates is None else queries * (15 + 6 * keys)
  return {"attention": attn, "selection": select, "total": attn + select}
