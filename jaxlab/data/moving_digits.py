r"""Moving digits: tiny deterministic "videos" and a lossless 2 x 2 patch tokenizer.

Each video starts from one of scikit-learn's 8 x 8 digits, binarized (ink where the pixel
is at least half the maximum intensity 16) and optionally upsampled (``scale = 2``: 16 x 16
frames), and rolls it
(``np.roll``: wrapping around) by ``shift`` pixels per frame in one of four directions:

.. math::
  v_f = \mathrm{roll}(v_0,\ f \cdot \mathrm{shift} \cdot d), \qquad
  d \in \{\text{right}, \text{left}, \text{down}, \text{up}\},

so every frame after the first is determined by the first and the direction. The caption
is ``(class, direction)``.

The "tokenizer" cuts a frame into 2 x 2 pixel patches and quantizes each to the nearest
codeword of a small codebook; the default codebook is the 16 binary 2 x 2 patterns, for
which nearest-codeword quantization is per-pixel thresholding at 0.5 and decoding a binary
frame back is exact. The tokenizer compresses by ``(1, 2, 2)`` (frames, rows, columns):
the strides Lumos-1's MM-RoPE scales visual positions by.

This is the Lumos-1 experiment's stand-in for tokenized video (the paper uses a Cosmos
tokenizer with compression 4 x 8 x 8 on real video). Ours.

Example:
  >>> v = make_videos(0, 8)                    # 8 videos of 4 frames, 8 x 8 pixels
  >>> tok = tokenize(v.frames)                 # (8, 4, 4, 4) ints in 0..15
  >>> bool((detokenize(tok) == v.frames).all())
  True
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxlab.data.digits import load_digits

DIRECTIONS = ("right", "left", "down", "up")
_STEP = {0: (0, 1), 1: (0, -1), 2: (1, 0), 3: (-1, 0)}  # (rows, cols) per unit of shift
PATCH = 2  # pixels per patch side
STRIDES = (1, PATCH, PATCH)  # the tokenizer's compression (frames, rows, columns)


def binary_codebook(patch: int = PATCH) -> np.ndarray:
  """All ``2 ** (patch * patch)`` binary patches, ``(K, patch * patch)`` float32; codeword
  ``k``'s pixel ``j`` (row-major within the patch) is bit ``j`` of ``k``."""
  n = patch * patch
  k = np.arange(2**n)[:, None]
  return ((k >> np.arange(n)[None, :]) & 1).astype(np.float32)


CODEBOOK = binary_codebook()


class MovingDigits(NamedTuple):
  """Videos ``frames (n, F, H, W)`` in ``{0, 1}`` (float32), digit ``labels (n,)`` and
  ``directions (n,)`` (indices into :data:`DIRECTIONS`)."""

  frames: np.ndarray
  labels: np.ndarray
  directions: np.ndarray


def roll_frames(first: np.ndarray, directions: np.ndarray, frames: int,
                shift: int = 1) -> np.ndarray:
  """The deterministic video from first frames ``(n, H, W)``: frame ``f`` is the first rolled
  by ``f * shift`` pixels in each video's direction; returns ``(n, frames, H, W)``."""
  first = np.asarray(first)
  directions = np.asarray(directions)
  if first.ndim != 3 or directions.shape != first.shape[:1]:
    raise ValueError(f"first must be (n, H, W) and directions (n,), got {first.shape} and "
                     f"{directions.shape}")
  if directions.size and (directions.min() < 0 or directions.max() > 3):
    raise ValueError(f"directions must be in 0..3 {DIRECTIONS}, got {np.unique(directions)}")
  out = np.empty((first.shape[0], frames, *first.shape[1:]), first.dtype)
  for i, (img, d) in enumerate(zip(first, directions, strict=True)):
    dr, dc = _STEP[int(d)]
    for f in range(frames):
      out[i, f] = np.roll(img, (f * shift * dr, f * shift * dc), axis=(0, 1))
  return out


def make_videos(seed: int, n: int, frames: int = 4, shift: int = 1,
                digits: np.ndarray | None = None, scale: int = 1) -> MovingDigits:
  """``n`` moving-digit videos drawn with ``np.random.default_rng(seed)``: a random digit
  (from the indices ``digits``, default all 1,797), a random direction.

  Args:
    seed: the generator's seed (same seed, same videos).
    n: number of videos.
    frames: frames per video (>= 1).
    shift: pixels moved per frame (>= 0).
    digits: optional indices of the digits to draw from (e.g. a train / test split).
    scale: upsampling factor of the 8 x 8 digit (frames are ``8 scale`` pixels square).

  Returns:
    :class:`MovingDigits` with binary frames.
  """
  for name, value, low in (("n", n, 1), ("frames", frames, 1), ("shift", shift, 0),
                           ("scale", scale, 1)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
      raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
  d = load_digits("unit_images")
  pool = np.arange(d.x.shape[0]) if digits is None else np.asarray(digits)
  if pool.ndim != 1 or pool.size == 0:
    raise ValueError(f"digits must be a non-empty 1-D index array, got shape {pool.shape}")
  rng = np.random.default_rng(seed)
  idx = pool[rng.integers(0, pool.size, n)]
  dirs = rng.integers(0, 4, n).astype(np.int32)
  img = (d.x[idx] >= 0.5).astype(np.float32)
  img = np.kron(img, np.ones((scale, scale), np.float32))  # 8 x 8 -> 8 scale square
  return MovingDigits(roll_frames(img, dirs, frames, shift), d.y[idx].astype(np.int32), dirs)


def tokenize(frames: np.ndarray, codebook: np.ndarray = CODEBOOK,
             patch: int = PATCH) -> np.ndarray:
  """Nearest-codeword indices of the ``patch x patch`` patches of ``frames (..., H, W)``:
  ``(..., H / patch, W / patch)`` int32 (ties to the lowest index)."""
  x = np.asarray(frames, np.float32)
  h, w = x.shape[-2:]
  cb = np.asarray(codebook, np.float32)
  if h % patch or w % patch:
    raise ValueError(f"frames' height and width must be multiples of patch={patch}, got "
                     f"{(h, w)}")
  if cb.ndim != 2 or cb.shape[1] != patch * patch:
    raise ValueError(f"codebook must be (K, {patch * patch}), got {cb.shape}")
  p = x.reshape(*x.shape[:-2], h // patch, patch, w // patch, patch)
  p = np.moveaxis(p, -3, -2).reshape(*x.shape[:-2], h // patch, w // patch, patch * patch)
  dist = np.sum((p[..., None, :] - cb) ** 2, -1)
  return np.argmin(dist, -1).astype(np.int32)


def detokenize(tokens: np.ndarray, codebook: np.ndarray = CODEBOOK,
               patch: int = PATCH) -> np.ndarray:
  """Frames ``(..., rows * patch, cols * patch)`` from token grids ``(..., rows, cols)``."""
  tok = np.asarray(tokens)
  cb = np.asarray(codebook, np.float32)
  if tok.size and (tok.min() < 0 or tok.max() >= cb.shape[0]):
    raise ValueError(f"tokens must be codebook indices in 0..{cb.shape[0] - 1}, got range "
                     f"{tok.min()}..{tok.max()}")
  p = cb[tok].reshape(*tok.shape, patch, patch)  # (..., rows, cols, patch, patch)
  p = np.moveaxis(p, -2, -3)  # (..., rows, patch, cols, patch)
  return p.reshape(*tok.shape[:-2], tok.shape[-2] * patch, tok.shape[-1] * patch)
