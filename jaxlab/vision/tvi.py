r"""TVI: where vision enters a vision-language model, by contrasting chain-of-embedding.

A vision-language model answers a question ``x = (X_v, X_t)`` (image, text). Run it twice:
with the image and *blind*, the image replaced by a learned null token, and keep the
last token's hidden state after every layer (the *chain of embedding*):

.. math::
  z^l_{vis} = f_l(X_v, X_t), \qquad z^l_{blind} = f_l(\varnothing, X_t), \qquad
  d_l(x) = 1 - \cos(z^l_{vis}, z^l_{blind}).

Split a probe set by whether the image changes the answer: ``x in D_VT`` if the sighted
and the blind predictions differ, else ``x in D_T``, and average per layer,
``D_l(P) = E_{x in P} d_l(x)``. The *visual integration point* is the first layer from
which the vision-dependent rows stay apart by more than ``tau``:

.. math::
  l^* = \min \{ l : D_{l'}(D_{VT}) - D_{l'}(D_T) > \tau \ \ \forall\, l' \ge l \},

and the *total visual integration* of a row averages its distances from ``l^*`` on,

.. math::
  \mathrm{TVI}(x) = \frac{1}{L - l^* + 1} \sum_{l = l^*}^{L} d_l(x).

A low TVI says the image barely moved the representation where it matters: the answer
came from the language prior. The regulariser (the spec's) rewards integration,
``L = -log p(y | x) - lambda TVI(x)`` with ``lambda = 0.03``.

Layers are numbered as :class:`jaxlab.models.transformer.Transformer`'s ``hidden``:
``0`` is the embedding (the last text token's embedding is the same in both passes, so
``d_0 = 0``), ``l = 1..L`` the output of block ``l``. "No VIP" is ``l^* = L + 1`` (the
empty set of layers), whose TVI is defined as 0.

What is the paper's and what is ours: the distance, the split, the VIP rule with a
manual ``tau`` and the TVI are the paper's (on 7B-scale LVLMs whose blind pass drops the
image). The model here is a 4-8 layer transformer trained from scratch on digit
questions (:mod:`jaxlab.data.digit_questions`); its image tokens are linear embeddings of
pixel patches fed through the toolkit transformer's ``embeddings=`` input, and the blind
pass replaces every image token by one learned null vector (the spec's choice, [I]: a
model trained from scratch has no "no image" input, so blind rows are mixed into
training). The appendix's automatic threshold was not found; :func:`auto_tau` is our
rule (a share of the largest gap), stated as such. The regulariser is the spec's
(``L = -log p - lambda TVI``); its gradient flows through both passes.

Example:
  >>> cfg = VLMConfig(num_layers=4, d_model=64, num_heads=4, num_patches=4, patch_dim=16)
  >>> net = create(cfg, jax.random.key(0))
  >>> vis, blind = chain_of_embedding(net, patches, text)       # (L + 1, B, d) each
  >>> dist = layer_distances(vis.hidden, blind.hidden)           # (L + 1, B)
  >>> vt = vt_split(vis.logits, blind.logits)                    # image changed the answer
  >>> p_vt, p_t = layer_profile(dist, vt), layer_profile(dist, ~vt)
  >>> vip = visual_integration_point(p_vt, p_t, tau=0.05)
  >>> score = tvi_score(dist, vip)                                # (B,)

References:
  Long, Oh, Park, Li, "Understanding Language Prior of LVLMs by Contrasting
  Chain-of-Embedding", arXiv:2509.23050, 2025.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.data import digit_questions as dq
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

__all__ = ["VLMConfig", "VLMOutput", "TinyVLM", "auto_tau", "chain_of_embedding", "create",
           "cosine_distance", "graph", "layer_distances", "layer_profile", "pre_vip_score",
           "tvi_loss", "tvi_score", "vt_split", "visual_integration_point"]


@dataclasses.dataclass(frozen=True)
class VLMConfig:
  """Static shape of the tiny VLM (hashable)."""

  num_layers: int = 6  # transformer blocks L
  d_model: int = 64  # residual width
  num_heads: int = 4  # attention heads
  num_patches: int = 4  # image tokens per image
  patch_dim: int = 16  # pixels per patch
  text_len: int = dq.TEXT_LEN  # question tokens (the last one is where the answer is read)
  vocab_size: int = dq.VOCAB_SIZE  # text token ids

  def __post_init__(self):
    for name in ("num_layers", "d_model", "num_heads", "num_patches", "patch_dim", "text_len",
                 "vocab_size"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    self.transformer  # noqa: B018 (validates d_model / num_heads)

  @property
  def transformer(self) -> tfm.TransformerConfig:
    return tfm.TransformerConfig(self.vocab_size, self.d_model, self.num_heads,
                                 self.num_layers, self.num_patches + self.text_len)


class VLMOutput(NamedTuple):
  """One pass: the answer logits at the last token and its chain of embedding."""

  logits: jax.Array  # (B, vocab_size) at the last text token
  hidden: jax.Array  # (L + 1, B, d_model): the last token after the embedding and each block


class TinyVLM(nnx.Module):
  """Image patch tokens + question tokens on the toolkit transformer.

  The patches go through a linear embedding, the text through the transformer's token
  embedding; the concatenation ``[image tokens, text tokens]`` enters the (causal, RoPE)
  :class:`~jaxlab.models.transformer.Transformer` through ``embeddings=``. ``blind`` rows
  see the learned ``null`` vector at every image position instead.
  """

  def __init__(self, cfg: VLMConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    init = nnx.initializers.normal(tfm.INIT_STD)
    self.patch_embed = nnx.Linear(cfg.patch_dim, cfg.d_model, kernel_init=init, rngs=rngs)
    self.null = nnx.Param(init(rngs.params(), (cfg.d_model,)))
    self.lm = tfm.Transformer(cfg.transformer, rngs=rngs)

  def __call__(self, patches: jax.Array, text: jax.Array, blind: jax.typing.ArrayLike = False
               ) -> VLMOutput:
    """``patches (B, P, patch_dim)``, ``text (B, T) int``, ``blind`` bool broadcastable to
    ``(B,)`` -> :class:`VLMOutput`."""
    img = self.patch_embed(patches)
    blind = jnp.broadcast_to(jnp.asarray(blind, bool), img.shape[:1])
    img = jnp.where(blind[:, None, None], self.null[...], img)
    x = jnp.concatenate([img, self.lm.embed(text)], 1)
    out = self.lm.forward(embeddings=x, return_hidden=True)
    return VLMOutput(out.logits[:, -1], out.hidden[:, :, -1])


def create(cfg: VLMConfig, key: jax.Array) -> Net:
  """A freshly initialized :class:`TinyVLM` as a :class:`~jaxlab.nn.Net`."""
  return Net.create(TinyVLM(cfg, rngs=nnx.Rngs(params=key)))


def graph(cfg: VLMConfig) -> Net:
  """The :class:`TinyVLM` graph without parameters (give them with ``replace(params=)``)."""
  return Net.create(nnx.eval_shape(lambda: TinyVLM(cfg, rngs=nnx.Rngs(0)))
                    ).replace(params=None)


def _check_inputs(patches, text) -> None:
  if jnp.ndim(patches) != 3:
    raise ValueError(f"patches must be (B, num_patches, patch_dim), got {jnp.shape(patches)}")
  if jnp.ndim(text) != 2 or jnp.shape(text)[0] != jnp.shape(patches)[0]:
    raise ValueError(f"text must be (B={jnp.shape(patches)[0]}, text_len), got "
                     f"{jnp.shape(text)}")


def chain_of_embedding(net: Net, patches: jax.Array, text: jax.Array
                       ) -> tuple[VLMOutput, VLMOutput]:
  """The sighted and the blind pass, ``(vis, blind)``, as one batched call of ``2 B`` rows."""
  _check_inputs(patches, text)
  b = patches.shape[0]
  out = net(jnp.concatenate([patches, patches]), jnp.concatenate([text, text]),
            jnp.arange(2 * b) >= b)
  vis = VLMOutput(out.logits[:b], out.hidden[:, :b])
  blind = VLMOutput(out.logits[b:], out.hidden[:, b:])
  return vis, blind


def cosine_distance(a: jax.Array, b: jax.Array, eps: float = 1e-8) -> jax.Array:
  """``d = 1 - cos(a, b)`` over the last axis (in ``[0, 2]``; 0 for equal directions).

  ``eps`` bounds the norms away from zero, so two zero vectors have distance 1.
  """
  a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
  na = jnp.maximum(jnp.linalg.norm(a, axis=-1), eps)
  nb = jnp.maximum(jnp.linalg.norm(b, axis=-1), eps)
  return 1.0 - jnp.sum(a * b, -1) / (na * nb)


def layer_distances(h_vis: jax.Array, h_blind: jax.Array) -> jax.Array:
  """``d_l(x) = 1 - cos(z^l_vis, z^l_blind)``: ``(L + 1, B, d)`` twice -> ``(L + 1, B)``."""
  if jnp.shape(h_vis) != jnp.shape(h_blind) or jnp.ndim(h_vis) != 3:
    raise ValueError(f"h_vis and h_blind must both be (L + 1, B, d), got {jnp.shape(h_vis)} "
                     f"and {jnp.shape(h_blind)}")
  return cosine_distance(h_vis, h_blind)


def vt_split(logits_vis: jax.Array, logits_blind: jax.Array) -> jax.Array:
  """``(B,)`` bool: True (``D_VT``) where the sighted and blind argmax answers differ."""
  return jnp.argmax(logits_vis, -1) != jnp.argmax(logits_blind, -1)


def layer_profile(dist: jax.Array, mask: jax.Array) -> jax.Array:
  """``D_l(P) = mean_{x in P} d_l(x)``: ``dist (L + 1, B)``, ``mask (B,)`` bool -> ``(L + 1,)``.

  NaN for every layer when ``P`` is empty (no row to average).
  """
  if jnp.ndim(dist) != 2 or jnp.shape(mask) != jnp.shape(dist)[1:]:
    raise ValueError(f"dist must be (L + 1, B) and mask (B,), got {jnp.shape(dist)} and "
                     f"{jnp.shape(mask)}")
  w = jnp.asarray(mask, jnp.float32)
  count = jnp.sum(w)
  return jnp.where(count > 0, jnp.sum(dist * w, -1) / jnp.maximum(count, 1.0), jnp.nan)


def visual_integration_point(profile_vt: jax.Array, profile_t: jax.Array,
                             tau: jax.typing.ArrayLike) -> jax.Array:
  r"""``l^* = min { l : D_{l'}(VT) - D_{l'}(T) > tau  for all l' >= l }`` (int32 scalar).

  ``L + 1`` (one past the last layer: no layer integrates vision) when even the last
  layer's gap is at most ``tau``; a NaN gap counts as not above ``tau``.
  """
  if jnp.ndim(profile_vt) != 1 or jnp.shape(profile_vt) != jnp.shape(profile_t):
    raise ValueError(f"profile_vt and profile_t must be (L + 1,) each, got "
                     f"{jnp.shape(profile_vt)} and {jnp.shape(profile_t)}")
  above = (jnp.asarray(profile_vt) - jnp.asarray(profile_t)) > tau
  # suffix_all[l] = all(above[l:]): a reversed cumulative AND
  suffix_all = jnp.flip(jnp.cumprod(jnp.flip(above).astype(jnp.int32))).astype(bool)
  n = above.shape[0]
  return jnp.where(suffix_all, jnp.arange(n), n).min().astype(jnp.int32)


def auto_tau(profile_vt: jax.Array, profile_t: jax.Array, share: float = 0.5) -> jax.Array:
  """Our automatic threshold: ``tau = share * max_l (D_l(VT) - D_l(T))``.

  The paper's appendix gives an automatic rule we could not read; this one is ours: the
  VIP is then where the gap first stays above ``share`` of its peak (scale-free, so the
  same ``share`` fits any model's distance scale). NaN gaps are ignored.
  """
  if not 0.0 < share < 1.0:
    raise ValueError(f"share must be in (0, 1), got {share!r}")
  gap = jnp.asarray(profile_vt) - jnp.asarray(profile_t)
  return share * jnp.nanmax(gap)


def _layer_mean(dist: jax.Array, keep: jax.Array) -> jax.Array:
  w = keep.astype(jnp.float32)[:, None]
  count = jnp.sum(w)
  return jnp.where(count > 0, jnp.sum(dist * w, 0) / jnp.maximum(count, 1.0), 0.0)


def tvi_score(dist: jax.Array, vip: jax.typing.ArrayLike) -> jax.Array:
  r"""``TVI(x) = 1 / (L - l^* + 1) sum_{l = l^*}^{L} d_l(x)``: ``dist (L + 1, B)`` -> ``(B,)``.

  ``vip`` may be traced; ``vip = L + 1`` (no VIP) gives 0.
  """
  if jnp.ndim(dist) != 2:
    raise ValueError(f"dist must be (L + 1, B), got {jnp.shape(dist)}")
  return _layer_mean(dist, jnp.arange(dist.shape[0]) >= vip)


def pre_vip_score(dist: jax.Array, vip: jax.typing.ArrayLike) -> jax.Array:
  """The same mean over the layers *before* the VIP, ``1 <= l < l^*`` (the embedding layer,
  identical in both passes, is left out); 0 when there is no such layer."""
  if jnp.ndim(dist) != 2:
    raise ValueError(f"dist must be (L + 1, B), got {jnp.shape(dist)}")
  layer = jnp.arange(dist.shape[0])
  return _layer_mean(dist, (layer >= 1) & (layer < vip))


def tvi_loss(net: Net, patches: jax.Array, text: jax.Array, answer: jax.Array,
             vip: jax.typing.ArrayLike, lam: jax.typing.ArrayLike = 0.03,
             blind: jax.typing.ArrayLike = False) -> tuple[jax.Array, dict]:
  r"""The TVI regulariser, ``L = mean_x [-log p(y | x) - lambda TVI(x)]`` (the spec's).

  The cross-entropy is on the pass the row asks for (``blind`` rows, e.g. the null-image
  rows mixed into training, are answered blind); TVI is measured on every row from a
  sighted and a blind pass of the same text (one batched call of ``2 B`` rows), and only
  sighted rows contribute it. ``lam = 0`` is plain cross-entropy.

  Returns:
    ``(loss, info)`` with ``info``: ``loss/ce``, ``loss/tvi`` (mean TVI of the sighted rows).
  """
  b = patches.shape[0]
  blind = jnp.broadcast_to(jnp.asarray(blind, bool), (b,))
  _check_inputs(patches, text)
  out = net(jnp.concatenate([patches, patches]), jnp.concatenate([text, text]),
            jnp.concatenate([blind, jnp.ones((b,), bool)]))
  ce = optax.softmax_cross_entropy_with_integer_labels(out.logits[:b], answer).mean()
  dist = layer_distances(out.hidden[:, :b], out.hidden[:, b:])
  sighted = (~blind).astype(jnp.float32)
  tvi = jnp.sum(tvi_score(dist, vip) * sighted) / jnp.maximum(jnp.sum(sighted), 1.0)
  return ce - lam * tvi, {"loss/ce": ce, "loss/tvi": tvi}
