"""A small dual encoder for digit-pair images with relational captions.

The test bed (:mod:`jaxlab.data.digit_pairs`) is the compositional
test bed of :mod:`jaxlab.preference.ttm`: an image shows two
of scikit-learn's 8 x 8 digits side by side (8 x 16 pixels), its caption is
the three tokens ``[a, LEFT_OF, b]`` ("a left of b"). A test *group* holds the
images ``(a|b)`` and ``(b|a)`` (the same two digit images swapped) and the
captions "a left of b" and "b left of a": the two captions share their bag of
words, so only a model that reads order scores the group right.

Pre-training batches (:func:`pretraining_batch`) draw each unordered digit
pair at most once, in a random order, so contrastive pre-training never needs
order to tell a batch's captions apart: the encoder learns digit identity
well and order only incidentally, the bag-of-words bias the Test-Time Matching
paper finds in CLIP-style models.

Example:
  >>> from jaxlab.data.digit_pairs import load_split, make_groups
  >>> data = load_split(seed=0)
  >>> enc = Net.create(DualEncoder(rngs=nnx.Rngs(0)))
  >>> groups = make_groups(jax.random.key(1), data.test_images, data.test_labels, 200)
  >>> sim = group_similarity(enc, enc.params, groups)        # (200, 2, 2)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.data.digit_pairs import IMAGE_DIM, VOCAB, DigitSplit, Groups, pretraining_batch
from jaxlab.nn import MLP, Net
from jaxlab.preference.ttm import PseudoMatch
from jaxlab.training.fit import fit


class DualEncoder(nnx.Module):
  """Image MLP and text MLP (token + position embeddings) into a shared unit sphere.

  ``__call__(images (N, 128), tokens (M, 3)) -> (N, M)`` similarities
  ``exp(t) <img_n, txt_m>`` with a learned temperature ``t`` (CLIP).
  """

  def __init__(self, *, embed_dim: int = 32, hidden: int = 128, token_dim: int = 16,
               rngs: nnx.Rngs):
    self.image = MLP(IMAGE_DIM, (hidden, hidden), embed_dim, rngs=rngs)
    self.tok = nnx.Embed(VOCAB, token_dim, rngs=rngs)
    self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (3, token_dim)))
    self.text = MLP(3 * token_dim, (hidden,), embed_dim, rngs=rngs)
    self.log_scale = nnx.Param(jnp.log(jnp.asarray(10.0)))

  def embed_images(self, images: jax.Array) -> jax.Array:
    z = self.image(images)
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)

  def embed_text(self, tokens: jax.Array) -> jax.Array:
    e = self.tok(tokens) + self.pos[...]
    z = self.text(e.reshape(*tokens.shape[:-1], -1))
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)

  def __call__(self, images: jax.Array, tokens: jax.Array) -> jax.Array:
    return jnp.exp(self.log_scale[...]) * self.embed_images(images) @ self.embed_text(tokens).T


def clip_loss(similarity: jax.Array, weights: jax.Array | None = None) -> jax.Array:
  """Symmetric InfoNCE with the diagonal as positives.

  ``weights`` (``(N,)``, 0/1) drop rows and columns: a dropped item is neither
  an anchor nor a negative. Returns the weighted mean of the image-to-text and
  text-to-image cross-entropies.
  """
  n = similarity.shape[0]
  w = jnp.ones(n) if weights is None else weights.astype(similarity.dtype)
  valid = (w > 0)[None, :]
  s_rows = jnp.where(valid, similarity, -jnp.inf)
  s_cols = jnp.where(valid, similarity.T, -jnp.inf)
  diag = jnp.diagonal(similarity)
  ce = 0.5 * ((jax.nn.logsumexp(s_rows, axis=1) - diag) + (jax.nn.logsumexp(s_cols, axis=1) - diag))
  return jnp.sum(jnp.where(w > 0, w * ce, 0.0)) / jnp.maximum(jnp.sum(w), 1.0)


def group_similarity(net, params, groups: Groups) -> jax.Array:
  """``(G, 2, 2)``: each group's images against its own two captions."""
  model = nnx.merge(net.graphdef, params)
  img = model.embed_images(groups.images)   # (G, 2, d)
  txt = model.embed_text(groups.tokens)     # (G, 2, d)
  return jnp.exp(model.log_scale[...]) * jnp.einsum("gid,gjd->gij", img, txt)


def _adamw(lr, steps: int, weight_decay: float, min_lr_factor: float = 0.1):
  sched = optax.cosine_decay_schedule(lr, max(steps, 1), alpha=min_lr_factor)
  return optax.adamw(sched, weight_decay=weight_decay)


def pretrain(key: jax.Array, data: DigitSplit, *, steps: int = 1500, batch: int = 32,
             order_noise: float = 0.4, lr: float = 1e-3, weight_decay: float = 1e-4,
             embed_dim: int = 32, hidden: int = 128) -> tuple[Net, list[float]]:
  """CLIP-style pre-training on :func:`pretraining_batch` batches (order never needed,
  and the captions' order is wrong with probability ``order_noise``).

  Returns the encoder as a :class:`~jaxlab.nn.Net` and the loss every
  100 steps. One jitted ``lax.scan`` over steps.
  """
  k_init, k_data = jax.random.split(key)
  net = Net.create(DualEncoder(embed_dim=embed_dim, hidden=hidden,
                               rngs=nnx.Rngs(k_init)))
  opt = _adamw(lr, steps, weight_decay)
  images, labels = jnp.asarray(data.train_images), np.asarray(data.train_labels)

  def loss(params, batch_key, _):
    # the scanned "batches" are one key per step, split up front: each draws its batch
    x, t = pretraining_batch(batch_key, images, labels, batch, order_noise)
    return clip_loss(net(x, t, params=params))

  run = jax.jit(lambda p, keys: fit(loss, opt, p, batches=keys))
  result = run(net.params, jax.random.split(k_data, steps))
  return net.replace(params=result.state.params), [float(x) for x in result.losses[::100]]


def make_finetune(net: Net, *, epochs: int = 20, batch_groups: int = 16, lr: float = 1e-3,
                  lr_restart: float = 0.95, weight_decay: float = 0.05, seed: int = 0):
  """The fine-tuning step of Test-Time Matching for this encoder.

  ``finetune(params, groups, match, round) -> params`` trains on the kept
  groups, each image paired with its pseudo-assigned caption, with
  :func:`clip_loss` over the ``2 * batch_groups`` images of a batch (so a
  group's two captions are each other's hardest negatives). As the official
  code: a fresh AdamW each round at ``lr * lr_restart^round`` with a cosine
  decay to 0.1x, ``epochs`` passes over the groups. Unkept groups are masked
  out, so every round compiles once (fixed shapes).
  """
  def finetune(params, groups: Groups, match: PseudoMatch, rnd: int):
    g = groups.images.shape[0]
    steps_per_epoch = max(g // batch_groups, 1)
    # Caption assigned to image i of group n: tokens[n, permutation[n, i]].
    toks = jnp.take_along_axis(groups.tokens, match.permutation[..., None], axis=1)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), rnd), epochs)
    order = jnp.concatenate([jax.random.permutation(k, g)[: steps_per_epoch * batch_groups]
                             for k in keys]).reshape(-1, batch_groups)
    return _finetune_scan(net.replace(params=params), weight_decay, groups.images, toks,
                          match.selected, order, jnp.float32(lr * lr_restart**rnd))

  return finetune


@jax.jit(static_argnums=1)
def _finetune_scan(net, weight_decay, images, toks, selected, order, lr0):
  """AdamW with a cosine decay from ``lr0`` (traced: one compilation for every round)."""
  steps = order.shape[0]
  # Cosine decay to 0.1 lr0 over the round, as the official code's schedule.
  lr = lambda count: lr0 * (0.1 + 0.45 * (1 + jnp.cos(jnp.pi * count.astype(jnp.float32)
                                                       / steps)))
  opt = optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(weight_decay),
                    optax.scale_by_learning_rate(lr))

  def loss(q, idx, _):
    x = images[idx].reshape(-1, IMAGE_DIM)
    t = toks[idx].reshape(-1, 3)
    w = jnp.repeat(selected[idx], 2).astype(jnp.float32)
    return clip_loss(net(x, t, params=q), w)

  return fit(loss, opt, net.params, batches=order).state.params


__all__ = ["DualEncoder", "clip_loss", "group_similarity", "make_finetune", "pretrain"]
