"""Digit questions for a tiny vision-language model, with a hint token (a language prior).

TVI's test bed (:mod:`jaxlab.vision.tvi`). Every row is an 8 x 8 scikit-learn digit cut
into patches (the image tokens) and a text of :data:`TEXT_LEN` tokens ending in
:data:`ASK`, after which the model answers one digit:

* "which digit?" (vision-dependent): ``WHICH h f f f ASK`` -> the image's label, where
  ``h`` is a *hint* digit that agrees with the label with probability ``hint_agree``
  (80% in training, so the text alone predicts the answer most of the time: the
  language prior) and ``f`` are random filler digits;
* "copy token k" (text-only): ``COPY POS_k a_0 a_1 a_2 ASK`` -> ``a_k``; the image is a
  random digit that carries no information about the answer.

At test the conflict set has ``hint_agree = 0`` (the hint is never the label): a model
that follows the hint there answers from its language prior, one that reads the image
answers correctly.

Example:
  >>> d = load_digits("unit_images")
  >>> q = make_questions(jax.random.key(0), d.x[:100], d.y[:100], 256, patch=4)
  >>> q.patches.shape, q.text.shape, q.answer.shape
  ((256, 4, 16), (256, 6), (256,))

References:
  Long, Oh, Park, Li, "Understanding Language Prior of LVLMs by Contrasting
  Chain-of-Embedding", arXiv:2509.23050, 2025 (the spec's small experiment: digit patch
  tokens + question tokens, a hint equal to the label 80% of the time in training, hints
  that conflict at test).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NUM_DIGITS = 10  # token ids 0..9 are the digits
WHICH, COPY = 10, 11  # question types
POS = 12  # POS + k: "copy token k", k in 0..NUM_ARGS-1
NUM_ARGS = 3  # digits after the hint / position token
ASK = POS + NUM_ARGS  # the last text token: the answer is predicted here
VOCAB_SIZE = ASK + 1
TEXT_LEN = 3 + NUM_ARGS  # qtype, hint or position, NUM_ARGS digits, ASK
KINDS = ("which", "copy")


class Questions(NamedTuple):
  """A batch of digit questions (row ``i`` of every field is one question)."""

  patches: jax.Array  # (n, P, patch * patch) float32 image patches, row-major
  text: jax.Array  # (n, TEXT_LEN) int32 question tokens
  answer: jax.Array  # (n,) int32 the correct answer digit
  kind: jax.Array  # (n,) int32 0 = which digit (vision), 1 = copy (text only)
  hint: jax.Array  # (n,) int32 the hint digit (which-digit rows; -1 for copy rows)
  label: jax.Array  # (n,) int32 the image's digit label


def patchify(images: jax.Array, patch: int) -> jax.Array:
  """``(n, H, W)`` images -> ``(n, (H / patch) (W / patch), patch^2)`` row-major patches."""
  images = jnp.asarray(images)
  if images.ndim != 3:
    raise ValueError(f"images must be (n, H, W), got shape {images.shape}")
  n, h, w = images.shape
  if not isinstance(patch, int) or patch < 1 or h % patch or w % patch:
    raise ValueError(f"patch must be a positive int dividing the image sides {h} x {w}, "
                     f"got {patch!r}")
  x = images.reshape(n, h // patch, patch, w // patch, patch).transpose(0, 1, 3, 2, 4)
  return x.reshape(n, (h // patch) * (w // patch), patch * patch)


def make_questions(key: jax.Array, images: jax.Array, labels: jax.Array, n: int, *,
                   which_share: float = 0.5, hint_agree: float = 0.8, patch: int = 4,
                   noise: float = 0.0) -> Questions:
  """``n`` questions on random images of ``images (N, 8, 8)`` with digit ``labels (N,)``.

  Args:
    key: PRNG key.
    images: the image pool (e.g. ``load_digits("unit_images").x`` of one split).
    labels: their labels, ints 0..9.
    n: number of questions.
    which_share: probability that a row is "which digit?" (else "copy token k").
    hint_agree: probability that a which-digit row's hint equals the label; otherwise
      the hint is one of the 9 other digits, uniformly (0: the conflict set).
    patch: patch side (divides 8): ``(8 / patch)^2`` image tokens of ``patch^2`` pixels.
    noise: std of Gaussian pixel noise added to the images (harder vision).

  Returns:
    A :class:`Questions`.
  """
  if not isinstance(n, int) or n < 1:
    raise ValueError(f"n must be a positive int, got {n!r}")
  for name, p in (("which_share", which_share), ("hint_agree", hint_agree)):
    if not isinstance(p, float | int) or not 0.0 <= p <= 1.0:
      raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
  if not isinstance(noise, float | int) or noise < 0:
    raise ValueError(f"noise must be >= 0, got {noise!r}")
  images, labels = jnp.asarray(images, jnp.float32), jnp.asarray(labels, jnp.int32)
  if images.ndim != 3 or labels.shape != images.shape[:1]:
    raise ValueError(f"images must be (N, H, W) and labels (N,), got {images.shape} and "
                     f"{labels.shape}")
  patchify(images[:1], patch)  # validates patch against the image size
  return _questions(key, images, labels, which_share, hint_agree, noise, n=n, patch=patch)


@functools.partial(jax.jit, static_argnames=("n", "patch"))
def _questions(key, images, labels, which_share, hint_agree, noise, *, n, patch) -> Questions:
  k_img, k_kind, k_agree, k_off, k_args, k_pos, k_noise = jax.random.split(key, 7)
  idx = jax.random.randint(k_img, (n,), 0, images.shape[0])
  img, label = images[idx], labels[idx]
  img = img + noise * jax.random.normal(k_noise, img.shape)
  is_which = jax.random.bernoulli(k_kind, which_share, (n,))
  agree = jax.random.bernoulli(k_agree, hint_agree, (n,))
  other = (label + jax.random.randint(k_off, (n,), 1, NUM_DIGITS)) % NUM_DIGITS
  hint = jnp.where(agree, label, other)
  args = jax.random.randint(k_args, (n, NUM_ARGS), 0, NUM_DIGITS)
  k = jax.random.randint(k_pos, (n,), 0, NUM_ARGS)
  copied = jnp.take_along_axis(args, k[:, None], 1)[:, 0]
  first = jnp.where(is_which, WHICH, COPY)
  second = jnp.where(is_which, hint, POS + k)
  text = jnp.concatenate([first[:, None], second[:, None], args,
                          jnp.full((n, 1), ASK)], 1).astype(jnp.int32)
  return Questions(patchify(img, patch), text,
                   jnp.where(is_which, label, copied).astype(jnp.int32),
                   jnp.where(is_which, 0, 1).astype(jnp.int32),
                   jnp.where(is_which, hint, -1).astype(jnp.int32), label)


def split_indices(seed: int, n: int, test_share: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
  """A seeded ``(train, test)`` split of ``range(n)`` (the images a model never sees)."""
  if not 0.0 < test_share < 1.0:
    raise ValueError(f"test_share must be in (0, 1), got {test_share!r}")
  perm = np.random.default_rng(seed).permutation(n)
  cut = int(round(n * (1 - test_share)))
  return np.sort(perm[:cut]), np.sort(perm[cut:])
