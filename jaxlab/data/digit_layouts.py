"""Layout-conditioned digits: 8 x 8 scikit-learn digits placed in boxes on a blank canvas.

TTOM's test bed (our stand-in for its text-to-video prompts with layouts). A scene has
one or two digits, each in an 8 x 8 box at integer pixel offsets of a ``canvas x canvas``
image (default 24 x 24) in ``[-1, 1]`` with background ``-1`` (the "signed" digits'
blank value); two boxes never overlap. The caption names the digits only (token ``d``
for digit ``d``, :data:`PAD` for an absent second instance), so a caption says *what*
but not *where*: the layout is given to the sampler separately (boxes), as TTOM's
layouts are.

* :func:`random_layouts`: training scenes (uniform positions, classes, 1 or 2 digits).
* :func:`render`: the canvases of layouts, each digit a random real digit of its class.
* :func:`layout_types` / :func:`prompt_stream`: a finite set of layout types and a
  stream of prompts drawn from them (optionally jittered by a pixel or two), the
  repeated prompts TTOM's memory is meant for.

Arrays: ``boxes (N, K, 4)`` int32 ``(y0, x0, y1, x1)`` with exclusive ends, ``names (N, K)``
int32 digit classes, ``valid (N, K)`` bool; ``K = 2`` instance slots.

Example:
  >>> lay = random_layouts(jax.random.key(0), 256)
  >>> images = render(jax.random.key(1), lay)          # (256, 576) in [-1, 1]
  >>> tokens = caption_tokens(lay)                     # (256, 2): digits, PAD
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxlab.core.checks import check_int, check_range
from jaxlab.data.digits import load_digits

__all__ = ["CANVAS", "DIGIT", "MAX_INSTANCES", "PAD", "VOCAB", "Layout", "caption_tokens",
           "layout_types", "prompt_stream", "random_layouts", "render"]

CANVAS = 24  # default canvas side (pixels)
DIGIT = 8  # a digit's box side (pixels)
MAX_INSTANCES = 2  # instance slots per scene
PAD = 10  # caption token of an empty slot
VOCAB = 11  # digits 0..9 and PAD


class Layout(NamedTuple):
  """Boxes and names of ``N`` scenes (see the module docstring for the shapes)."""

  boxes: np.ndarray  # (N, K, 4) int32 (y0, x0, y1, x1), exclusive ends
  names: np.ndarray  # (N, K) int32 digit classes (0 in empty slots)
  valid: np.ndarray  # (N, K) bool

  def __len__(self) -> int:
    return self.boxes.shape[0]

  def take(self, idx) -> Layout:
    """The scenes at ``idx`` (an index array or slice)."""
    return Layout(self.boxes[idx], self.names[idx], self.valid[idx])


def _rng(key: jax.Array) -> np.random.Generator:
  return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


def _overlap(a, b) -> bool:
  return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _check_canvas(canvas: int) -> int:
  return check_int(canvas, "canvas", lo=DIGIT)


def _draw(rng: np.random.Generator, n: int, canvas: int, two_prob: float,
          step: int = 1) -> Layout:
  hi = (canvas - DIGIT) // step
  boxes = np.zeros((n, MAX_INSTANCES, 4), np.int32)
  names = rng.integers(0, 10, (n, MAX_INSTANCES)).astype(np.int32)
  valid = np.zeros((n, MAX_INSTANCES), bool)
  for i in range(n):
    count = 2 if (rng.random() < two_prob and canvas >= 2 * DIGIT) else 1
    placed = []
    while len(placed) < count:
      y, x = step * rng.integers(0, hi + 1, 2)
      box = (y, x, y + DIGIT, x + DIGIT)
      if all(not _overlap(box, p) for p in placed):
        placed.append(box)
    for j, box in enumerate(placed):
      boxes[i, j] = box
      valid[i, j] = True
  names = np.where(valid, names, 0).astype(np.int32)
  return Layout(boxes, names, valid)


def random_layouts(key: jax.Array, n: int, *, canvas: int = CANVAS,
                   two_prob: float = 0.5, step: int = 1) -> Layout:
  """``n`` training scenes: 2 digits with probability ``two_prob`` (else 1), uniform classes
  and uniform non-overlapping positions.

  Args:
    key: PRNG key (the same key gives the same scenes).
    n: number of scenes.
    canvas: canvas side in pixels (at least 8; two digits need 16).
    two_prob: probability of a two-digit scene, in ``[0, 1]``.
    step: box offsets are multiples of ``step`` pixels (e.g. a patch size: boxes on the
      patch grid).
  """
  check_int(n, "n", lo=1)
  _check_canvas(canvas)
  check_range(two_prob, "two_prob", lo=0.0, hi=1.0)
  check_int(step, "step", lo=1)
  return _draw(_rng(key), n, canvas, two_prob, step)


def caption_tokens(layout: Layout) -> np.ndarray:
  """``(N, K)`` int32 caption tokens: the digit classes, :data:`PAD` in empty slots."""
  return np.where(layout.valid, layout.names, PAD).astype(np.int32)


def render(key: jax.Array, layout: Layout, *, canvas: int = CANVAS) -> np.ndarray:
  """``(N, canvas * canvas)`` float32 canvases in ``[-1, 1]``: each valid box holds a
  random real digit (scikit-learn's, "signed") of its class, the rest is ``-1``."""
  _check_canvas(canvas)
  if not isinstance(layout, Layout):
    raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
  if len(layout) and (layout.boxes[..., 2:].max() > canvas or layout.boxes.min() < 0):
    raise ValueError(f"layout boxes must lie inside the {canvas} x {canvas} canvas")
  d = load_digits("signed")
  by_class = [np.flatnonzero(d.y == c) for c in range(10)]
  images = d.x.reshape(-1, DIGIT, DIGIT)
  rng = _rng(key)
  out = np.full((len(layout), canvas, canvas), -1.0, np.float32)
  for i in range(len(layout)):
    for j in range(MAX_INSTANCES):
      if not layout.valid[i, j]:
        continue
      y0, x0, _, _ = layout.boxes[i, j]
      pick = images[rng.choice(by_class[layout.names[i, j]])]
      region = out[i, y0:y0 + DIGIT, x0:x0 + DIGIT]
      out[i, y0:y0 + DIGIT, x0:x0 + DIGIT] = np.maximum(region, pick)
  return out.reshape(len(layout), canvas * canvas)


def layout_types(key: jax.Array, num_types: int, *, canvas: int = CANVAS,
                 two_prob: float = 0.5, step: int = 1) -> Layout:
  """``num_types`` distinct layout types (boxes and names), drawn as :func:`random_layouts`."""
  check_int(num_types, "num_types", lo=1)
  _check_canvas(canvas)
  check_range(two_prob, "two_prob", lo=0.0, hi=1.0)
  check_int(step, "step", lo=1)
  rng = _rng(key)
  seen, rows = set(), []
  while len(rows) < num_types:
    lay = _draw(rng, 1, canvas, two_prob, step)
    sig = (lay.boxes.tobytes(), lay.names.tobytes(), lay.valid.tobytes())
    if sig not in seen:
      seen.add(sig)
      rows.append(lay)
  return Layout(*(np.concatenate(f) for f in zip(*rows, strict=True)))


def prompt_stream(key: jax.Array, types: Layout, num_prompts: int, *, jitter: int = 0,
                  canvas: int = CANVAS, step: int = 1) -> tuple[np.ndarray, Layout]:
  """A stream of ``num_prompts`` prompts, each a uniformly drawn type of ``types`` with its
  boxes shifted by up to ``jitter`` steps of ``step`` pixels per axis (kept inside the
  canvas and apart).

  Returns:
    ``(type_ids (num_prompts,), layouts)``.
  """
  check_int(num_prompts, "num_prompts", lo=1)
  check_int(jitter, "jitter", lo=0)
  check_int(step, "step", lo=1)
  _check_canvas(canvas)
  rng = _rng(key)
  ids = rng.integers(0, len(types), num_prompts).astype(np.int32)
  lay = types.take(ids)
  boxes = lay.boxes.copy()
  hi = canvas - DIGIT
  for i in range(num_prompts):
    for _ in range(100):  # redraw a shift that would make the boxes overlap
      shift = step * rng.integers(-jitter, jitter + 1, (MAX_INSTANCES, 2))
      start = np.clip(lay.boxes[i, :, :2] + shift, 0, hi)
      cand = np.concatenate([start, start + DIGIT], -1).astype(np.int32)
      if not (lay.valid[i].all() and _overlap(cand[0], cand[1])):
        break
    else:
      cand = lay.boxes[i]
    boxes[i] = np.where(lay.valid[i][:, None], cand, lay.boxes[i])
  return ids, Layout(boxes, lay.names.copy(), lay.valid.copy())
