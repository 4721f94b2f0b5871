r"""EgoWorld's stage 1: reproject an exocentric RGB-D view into the egocentric camera.

EgoWorld translates one exocentric (third-person) image into the egocentric (head-camera)
view. Its first stage builds a sparse egocentric RGB map by geometry alone, which its
second stage (a diffusion model) inpaints. The geometry, implemented here:

1. **Median depth-scale alignment.** A monocular depth estimate ``D_exo`` is right only up
   to scale; the hand's metric depth ``D_hand`` (from a 3-D hand-pose estimate, over the
   hand's pixels ``Omega_hand``) fixes it (:func:`depth_scale`):

   .. math::
     s^* = \operatorname{median}_{(u, v) \in \Omega_\text{hand}}
           \frac{D_\text{hand}(u, v)}{D_\text{exo}(u, v)} .

2. **Back-projection** of every exocentric pixel to a point in the exocentric camera frame
   (:func:`backproject`): :math:`X = s^* D(u, v)\, K_\text{exo}^{-1} [u, v, 1]^\top`.
3. **Umeyama similarity** from the hand keypoints seen in both frames (the exocentric 3-D
   hand pose and the predicted egocentric one; 21 or 42 keypoints) (:func:`umeyama`):

   .. math::
     (s, R, t) = \arg\min \sum_i \lVert y_i - (s R x_i + t) \rVert^2 ,\quad
     \Sigma = \tfrac1n \sum_i (y_i - \mu_y)(x_i - \mu_x)^\top = U D V^\top ,

   :math:`S = \operatorname{diag}(1, \dots, 1, \det U \det V)` (the reflection fix),
   :math:`R = U S V^\top`, :math:`s = \operatorname{tr}(D S) / \sigma_x^2`,
   :math:`t = \mu_y - s R \mu_x`.
4. **z-buffered projection** into the egocentric camera (:func:`splat`): each point
   :math:`x' = s R X + t` lands on the pixel nearest to :math:`K_\text{ego} x' / x'_z`; of the
   points landing on one pixel the nearest (smallest :math:`z`) gives the colour. A
   scatter-min of depths, then a scatter-min of point indices among the winners (ties go to
   the lowest index), so the z-buffer is jittable with fixed shapes. It returns the sparse
   egocentric RGB map and its coverage mask.

:func:`reproject` chains the four, jit-compiled as one program.

Where it is differentiable: :func:`depth_scale` (a median: its gradient flows to the one
or two ratios at the median, like ``jnp.median``'s), :func:`backproject`, :func:`umeyama`
(through ``jnp.linalg.svd``: exact where the singular values of :math:`\Sigma` are distinct,
undefined at repeated ones), :func:`transform` and :func:`project` are smooth. :func:`splat`
is differentiable in the colours (the map is a gather of them) but not in the positions:
rounding to a pixel and the z-buffer's argmin are piecewise constant (zero gradient almost
everywhere); a soft rasteriser would be needed for that, which EgoWorld does not use.

Conventions: pixel ``(u, v)`` is column ``u``, row ``v``, and its centre sits at the integer
coordinates, so ``K = [[f, 0, (W - 1) / 2], [0, f, (H - 1) / 2], [0, 0, 1]]`` centres the
image; camera frames are right-handed with ``+z`` forward (depth = ``z``).

What is the paper's and what is ours: the four steps are the paper's. Its inputs come from
networks (a monocular depth estimator, a hand-pose estimator for ``D_hand`` and the
exocentric keypoints, a network predicting the egocentric hand pose), on H2O / TACO /
Assembly101 / Ego-Exo4D; ours come from synthetic scenes with known geometry
(:mod:`jaxlab.data.two_camera_scenes`), with the networks' errors stood in for by an
unknown depth scale, depth noise and keypoint noise. The stage-2 diffusion inpainting is
not reproduced.

Example:
  >>> out = reproject(exo_rgb, exo_depth, k_exo, hand_depth, hand_mask, kp_exo, kp_ego,
  ...                 k_ego, (64, 64))
  >>> out.image, out.mask            # (64, 64, 3) sparse egocentric map, (64, 64) coverage
  >>> out.similarity.rotation        # R: exocentric camera frame -> egocentric one

References:
  Park, Ye, Kwon, "EgoWorld: Translating Exocentric View to Egocentric View using Rich
  Exocentric Observations", arXiv:2506.17896, 2025 (ICLR 2026).
  Umeyama, "Least-squares estimation of transformation parameters between two point
  patterns", IEEE TPAMI 13(4), 1991.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxlab.core.checks import is_traced

__all__ = ["Reprojection", "Similarity", "Splat", "backproject", "depth_scale", "intrinsics",
           "pixel_grid", "project", "psnr", "reproject", "rotation_error_deg", "splat",
           "transform", "umeyama"]


class Similarity(NamedTuple):
  """``y = scale * rotation @ x + translation``."""

  scale: jax.Array  # ()
  rotation: jax.Array  # (D, D), det +1
  translation: jax.Array  # (D,)


class Splat(NamedTuple):
  """A z-buffered projection: the sparse image, its coverage mask and z-buffer."""

  image: jax.Array  # (H, W, C), ``background`` where not covered
  mask: jax.Array  # (H, W) bool: a point landed there
  depth: jax.Array  # (H, W): the nearest point's z, inf where not covered
  index: jax.Array  # (H, W) int32: the winning point, N where not covered


class Reprojection(NamedTuple):
  """:func:`reproject`'s output."""

  image: jax.Array  # (H, W, 3) sparse egocentric RGB map
  mask: jax.Array  # (H, W) coverage
  depth: jax.Array  # (H, W) egocentric z-buffer
  scale: jax.Array  # () s*, the depth-scale alignment
  similarity: Similarity  # exocentric camera frame -> egocentric camera frame


# ---------------------------------------------------------------------------
# argument checks (on shapes, so they run before tracing)


def _shape(x: ArrayLike, name: str, ndim: int | None = None,
           last: tuple[int, ...] | None = None) -> tuple[int, ...]:
  shape = tuple(np.shape(x))
  if ndim is not None and len(shape) != ndim:
    raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape}")
  if last is not None and shape[len(shape) - len(last):] != last:
    raise ValueError(f"{name} must end in shape {last}, got shape {shape}")
  return shape


def _image_shape(shape, name: str = "shape") -> tuple[int, int]:
  if (not isinstance(shape, (tuple, list)) or len(shape) != 2
      or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
                 for s in shape)):
    raise ValueError(f"{name} must be (height, width), two ints >= 1, got {shape!r}")
  return int(shape[0]), int(shape[1])


# ---------------------------------------------------------------------------
# cameras


def intrinsics(focal: float, height: int, width: int) -> jax.Array:
  """Pinhole ``K`` with focal length ``focal`` (pixels), centred on a ``height x width`` image
  (pixel centres at integer coordinates: principal point ``((W-1)/2, (H-1)/2)``)."""
  if not np.isfinite(focal) or focal <= 0:
    raise ValueError(f"focal must be a finite number > 0, got {focal!r}")
  height, width = _image_shape((height, width), "(height, width)")
  return jnp.array([[focal, 0.0, (width - 1) / 2], [0.0, focal, (height - 1) / 2],
                    [0.0, 0.0, 1.0]], jnp.float32)


def pixel_grid(height: int, width: int) -> jax.Array:
  """``(H, W, 3)`` homogeneous pixel coordinates ``[u, v, 1]`` (``u`` the column)."""
  v, u = jnp.meshgrid(jnp.arange(height, dtype=jnp.float32),
                      jnp.arange(width, dtype=jnp.float32), indexing="ij")
  return jnp.stack([u, v, jnp.ones_like(u)], -1)


def backproject(depth: ArrayLike, k: ArrayLike, scale: ArrayLike = 1.0) -> jax.Array:
  r"""``(H, W, 3)`` camera-frame points :math:`X = s\,D(u, v)\,K^{-1}[u, v, 1]^\top` of a
  depth map ``depth (H, W)`` (z-depth) with intrinsics ``k (3, 3)`` and scale ``scale``."""
  h, w = _shape(depth, "depth", 2)
  _shape(k, "k", 2, (3, 3))
  rays = pixel_grid(h, w) @ jnp.linalg.inv(jnp.asarray(k, jnp.float32)).T  # rays[..., 2] == 1
  return (jnp.asarray(scale) * jnp.asarray(depth))[..., None] * rays


def project(points: ArrayLike, k: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Camera-frame ``points (..., 3)`` to pixel coordinates ``(..., 2)`` (``(u, v)``,
  continuous) and their depth ``z (...)``; points at ``z <= 0`` get NaN coordinates."""
  _shape(points, "points", None, (3,))
  _shape(k, "k", 2, (3, 3))
  p = jnp.asarray(points) @ jnp.asarray(k, jnp.float32).T
  z = jnp.asarray(points)[..., 2]
  uv = p[..., :2] / jnp.where(z > 0, z, jnp.nan)[..., None]
  return uv, z


def transform(sim: Similarity, points: ArrayLike) -> jax.Array:
  """``scale * R @ x + t`` for ``points (..., D)``."""
  return sim.scale * jnp.asarray(points) @ sim.rotation.T + sim.translation


# ---------------------------------------------------------------------------
# the four steps


def depth_scale(hand_depth: ArrayLike, exo_depth: ArrayLike, hand_mask: ArrayLike) -> jax.Array:
  r""":math:`s^* = \operatorname{median}_{\Omega} D_\text{hand} / D_\text{exo}` over the
  pixels where ``hand_mask`` is true and both depths are positive and finite.

  Args:
    hand_depth: ``(H, W)`` metric depth of the hand (anything off the hand is ignored).
    exo_depth: ``(H, W)`` depth up to an unknown scale.
    hand_mask: ``(H, W)`` bool, the hand's pixels ``Omega_hand``.

  Returns:
    The scalar ``s*`` (the mean of the two middle ratios for an even count, as
    ``jnp.median``); NaN if no pixel qualifies.
  """
  shape = _shape(exo_depth, "exo_depth", 2)
  for name, x in (("hand_depth", hand_depth), ("hand_mask", hand_mask)):
    if tuple(np.shape(x)) != shape:
      raise ValueError(f"{name} must have exo_depth's shape {shape}, got {np.shape(x)}")
  return _depth_scale(jnp.asarray(hand_depth, jnp.float32), jnp.asarray(exo_depth, jnp.float32),
                      jnp.asarray(hand_mask, bool))


@jax.jit
def _depth_scale(hand_depth, exo_depth, hand_mask):
  ok = hand_mask & (exo_depth > 0) & (hand_depth > 0) & jnp.isfinite(exo_depth) \
      & jnp.isfinite(hand_depth)
  ratio = hand_depth / jnp.where(ok, exo_depth, 1.0)
  return jnp.nanmedian(jnp.where(ok, ratio, jnp.nan))


def umeyama(src: ArrayLike, dst: ArrayLike, weights: ArrayLike | None = None,
            with_scale: bool = True) -> Similarity:
  r"""The least-squares similarity ``dst ~ s R src + t`` (Umeyama 1991), ``R`` a proper
  rotation (``det R = +1``) even where the unconstrained optimum is a reflection.

  Args:
    src: ``(N, D)`` points (the exocentric hand keypoints), ``N >= D``.
    dst: ``(N, D)`` matched points (the egocentric ones).
    weights: optional ``(N,)`` non-negative weights (a weighted mean and covariance).
    with_scale: fit ``s`` (else ``s = 1``: a rigid fit).

  Returns:
    A :class:`Similarity`. Differentiable through the SVD where the singular values of the
    cross-covariance are distinct.

  Raises:
    ValueError: shapes, fewer than ``D`` points, or (concrete ``src`` only) points that span
      fewer than ``D - 1`` dimensions, where the rotation is not determined.
  """
  n, d = _shape(src, "src", 2)
  if tuple(np.shape(dst)) != (n, d):
    raise ValueError(f"dst must have src's shape {(n, d)}, got {np.shape(dst)}")
  if n < d:
    raise ValueError(f"src must have at least D = {d} points, got {n}")
  if weights is not None and tuple(np.shape(weights)) != (n,):
    raise ValueError(f"weights must have shape {(n,)}, got {np.shape(weights)}")
  if not is_traced(src):
    # the rotation is unique only when the centred points span at least D - 1 dimensions
    # (Umeyama's rank condition); collinear keypoints would give an arbitrary rotation
    x = np.asarray(src, np.float64)
    sv = np.linalg.svd(x - x.mean(0), compute_uv=False)
    if np.sum(sv > 1e-6 * max(sv[0], 1e-30)) < d - 1:
      raise ValueError(f"src must span at least D - 1 = {d - 1} dimensions (Umeyama's rank "
                       "condition); these points are collinear or coincide, so the rotation "
                       "is not determined")
  w = jnp.ones((n,), jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
  return _umeyama(jnp.asarray(src, jnp.float32), jnp.asarray(dst, jnp.float32), w,
                  bool(with_scale))


@functools.partial(jax.jit, static_argnums=3)
def _umeyama(x, y, w, with_scale):
  w = w / jnp.sum(w)
  mu_x, mu_y = w @ x, w @ y
  xc, yc = x - mu_x, y - mu_y
  sigma = (yc * w[:, None]).T @ xc  # Umeyama eq. (38): (1/n) sum (y - mu_y)(x - mu_x)^T
  var_x = jnp.sum(w * jnp.sum(xc ** 2, -1))  # eq. (36)
  u, dvals, vt = jnp.linalg.svd(sigma)
  # eq. (39)/(43): flip the last axis when det(U) det(V) < 0 (the reflection fix)
  sign = jnp.sign(jnp.linalg.det(u) * jnp.linalg.det(vt))
  sign = jnp.where(sign == 0, 1.0, sign)
  s_diag = jnp.ones_like(dvals).at[-1].set(sign)
  rot = (u * s_diag) @ vt  # eq. (40): R = U S V^T
  scale = jnp.sum(dvals * s_diag) / var_x if with_scale else jnp.ones(())  # eq. (42)
  return Similarity(scale, rot, mu_y - scale * rot @ mu_x)  # eq. (41)


def splat(points: ArrayLike, colors: ArrayLike, k: ArrayLike, shape: tuple[int, int],
          valid: ArrayLike | None = None, background: float = 0.0, near: float = 1e-3
          ) -> Splat:
  """z-buffered projection of camera-frame ``points (N, 3)`` with ``colors (N, C)`` into a
  ``shape = (H, W)`` image with intrinsics ``k``.

  Each point goes to the pixel nearest its projection; points behind ``near``, off the
  image, non-finite or not ``valid`` are dropped. Per pixel the smallest ``z`` wins (a
  scatter-min z-buffer; among equal ``z`` the lowest index). Differentiable in ``colors``
  only.

  Returns:
    A :class:`Splat` (image, coverage mask, z-buffer, winning index).
  """
  n, _ = _shape(points, "points", 2, (3,))
  c_shape = _shape(colors, "colors", 2)
  if c_shape[0] != n:
    raise ValueError(f"colors must have one row per point ({n}), got shape {c_shape}")
  _shape(k, "k", 2, (3, 3))
  h, w = _image_shape(shape)
  if valid is not None and tuple(np.shape(valid)) != (n,):
    raise ValueError(f"valid must have shape {(n,)}, got {np.shape(valid)}")
  if not near > 0:
    raise ValueError(f"near must be > 0, got {near!r}")
  valid = jnp.ones((n,), bool) if valid is None else jnp.asarray(valid, bool)
  return _splat(jnp.asarray(points, jnp.float32), jnp.asarray(colors),
                jnp.asarray(k, jnp.float32), valid, jnp.asarray(background, jnp.float32),
                near, h, w)


@functools.partial(jax.jit, static_argnums=(5, 6, 7))
def _splat(points, colors, k, valid, background, near, h, w):
  n = points.shape[0]
  uv, z = project(points, k)
  px = jnp.round(jnp.nan_to_num(uv, nan=-1.0, posinf=-1.0, neginf=-1.0)).astype(jnp.int32)
  ok = (valid & (z > near) & jnp.all(jnp.isfinite(uv), -1) & (px[:, 0] >= 0) & (px[:, 0] < w)
        & (px[:, 1] >= 0) & (px[:, 1] < h))
  dump = h * w  # dropped points go to a spare slot
  slot = jnp.where(ok, px[:, 1] * w + px[:, 0], dump)
  zbuf = jnp.full((h * w + 1,), jnp.inf, jnp.float32).at[slot].min(jnp.where(ok, z, jnp.inf))
  wins = ok & (z <= zbuf[slot])  # the nearest on its pixel
  index = jnp.full((h * w + 1,), n, jnp.int32).at[jnp.where(wins, slot, dump)].min(
      jnp.arange(n, dtype=jnp.int32))[:dump]
  mask = index < n
  image = jnp.where(mask[:, None], colors[jnp.minimum(index, n - 1)],
                    background.astype(colors.dtype))
  return Splat(image.reshape(h, w, -1), mask.reshape(h, w), zbuf[:dump].reshape(h, w),
               index.reshape(h, w))


def reproject(exo_rgb: ArrayLike, exo_depth: ArrayLike, k_exo: ArrayLike,
              hand_depth: ArrayLike, hand_mask: ArrayLike, kp_exo: ArrayLike,
              kp_ego: ArrayLike, k_ego: ArrayLike, shape: tuple[int, int],
              valid: ArrayLike | None = None, scale: ArrayLike | None = None,
              similarity: Similarity | None = None) -> Reprojection:
  """EgoWorld's sparse egocentric map from one exocentric RGB-D view (one jitted program).

  Args:
    exo_rgb: ``(H, W, 3)`` exocentric image.
    exo_depth: ``(H, W)`` exocentric depth, up to an unknown scale.
    k_exo: ``(3, 3)`` exocentric intrinsics.
    hand_depth: ``(H, W)`` metric hand depth (used on ``hand_mask``).
    hand_mask: ``(H, W)`` bool, the hand's pixels.
    kp_exo: ``(N, 3)`` hand keypoints in the exocentric camera frame (metric).
    kp_ego: ``(N, 3)`` the same keypoints in the egocentric camera frame.
    k_ego: ``(3, 3)`` egocentric intrinsics.
    shape: the egocentric image's ``(height, width)``.
    valid: optional ``(H, W)`` bool, exocentric pixels to use (default: finite depth > 0).
    scale: override ``s*`` (e.g. ``1.0``: no alignment; the true one: an oracle).
    similarity: override the Umeyama similarity (the true pose: an oracle).

  Returns:
    A :class:`Reprojection`.
  """
  h, w = _shape(exo_depth, "exo_depth", 2)
  _shape(exo_rgb, "exo_rgb", 3, (h, w, 3))
  for name, x in (("hand_depth", hand_depth), ("hand_mask", hand_mask)):
    if tuple(np.shape(x)) != (h, w):
      raise ValueError(f"{name} must have exo_depth's shape {(h, w)}, got {np.shape(x)}")
  if valid is not None and tuple(np.shape(valid)) != (h, w):
    raise ValueError(f"valid must have exo_depth's shape {(h, w)}, got {np.shape(valid)}")
  n, _ = _shape(kp_exo, "kp_exo", 2, (3,))
  if tuple(np.shape(kp_ego)) != (n, 3):
    raise ValueError(f"kp_ego must have kp_exo's shape {(n, 3)}, got {np.shape(kp_ego)}")
  if n < 3:
    raise ValueError(f"kp_exo must have at least 3 keypoints, got {n}")
  _shape(k_exo, "k_exo", 2, (3, 3))
  _shape(k_ego, "k_ego", 2, (3, 3))
  shape = _image_shape(shape)
  f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
  if valid is None:
    valid = jnp.isfinite(f32(exo_depth)) & (f32(exo_depth) > 0)
  sim = None if similarity is None else Similarity(*map(f32, similarity))
  return _reproject(f32(exo_rgb), f32(exo_depth), f32(k_exo), f32(hand_depth),
                    jnp.asarray(hand_mask, bool), f32(kp_exo), f32(kp_ego), f32(k_ego),
                    jnp.asarray(valid, bool), None if scale is None else f32(scale), sim,
                    shape)


@functools.partial(jax.jit, static_argnums=11)
def _reproject(exo_rgb, exo_depth, k_exo, hand_depth, hand_mask, kp_exo, kp_ego, k_ego, valid,
               scale, sim, shape):
  if scale is None:  # static: None is part of the program's signature
    scale = _depth_scale(hand_depth, exo_depth, hand_mask)  # step 1
  if sim is None:
    sim = _umeyama(kp_exo, kp_ego, jnp.ones(kp_exo.shape[:1]), True)  # step 3
  depth = jnp.where(valid, exo_depth, 0.0)
  points = backproject(depth, k_exo, scale).reshape(-1, 3)  # step 2
  ego = transform(sim, points)
  out = _splat(ego, exo_rgb.reshape(-1, 3), k_ego, valid.reshape(-1), jnp.zeros(()), 1e-3,
               *shape)  # step 4
  return Reprojection(out.image, out.mask, out.depth, scale, sim)


# ---------------------------------------------------------------------------
# metrics


def rotation_error_deg(r_est: ArrayLike, r_true: ArrayLike) -> jax.Array:
  """Geodesic angle (degrees) between rotations ``(..., 3, 3)``, from
  ``||R_est - R_true||_F = 2 sqrt(2) sin(theta / 2)`` (accurate near 0 in float32, where
  ``arccos((tr(R_est^T R_true) - 1) / 2)`` has a floor of about 0.03 degrees)."""
  diff = jnp.linalg.norm(jnp.asarray(r_est) - jnp.asarray(r_true), axis=(-2, -1))
  return jnp.degrees(2 * jnp.arcsin(jnp.clip(diff / (2 * np.sqrt(2)), 0.0, 1.0)))


def psnr(image: ArrayLike, target: ArrayLike, mask: ArrayLike | None = None,
         peak: float = 1.0) -> jax.Array:
  """``10 log10(peak^2 / MSE)`` over the pixels of ``mask (..., H, W)`` (all if None) of
  images ``(..., H, W, C)``; the leading axes are kept. NaN where the mask is empty."""
  err = jnp.mean((jnp.asarray(image) - jnp.asarray(target)) ** 2, -1)
  m = jnp.ones(err.shape, bool) if mask is None else jnp.asarray(mask, bool)
  count = jnp.sum(m, (-2, -1))
  mse = jnp.sum(jnp.where(m, err, 0.0), (-2, -1)) / jnp.where(count > 0, count, 1)
  return jnp.where(count > 0, 10 * jnp.log10(peak ** 2 / jnp.maximum(mse, 1e-12)), jnp.nan)
