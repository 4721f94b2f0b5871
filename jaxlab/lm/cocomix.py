r"""CoCoMix: language-model pretraining with continuous concepts.

A teacher LM's residual stream ``h`` (at one layer) is encoded by a TopK sparse
autoencoder (SAE); the concepts that matter for the teacher's next-token loss become
labels, a student learns to predict them from its own hidden state and mixes a
compressed "continuous concept" back into its residual stream.

**SAE** (OpenAI's TopK SAE, as the official code loads it) [C]:

.. math::
  (\hat x, \mu, \sigma) = \mathrm{LN}_0(h) \quad(\text{mean/std normalisation, no affine}),\qquad
  c = \mathrm{TopK}\big(W_{enc}(\hat x - b_{pre}) + b_{lat}\big),\qquad
  \tilde x = W_{dec}\, c + b_{pre},

trained here on the normalised MSE ``|x̃ - x̂|² / |x̂ - mean(x̂)|²`` (OpenAI's loss;
ReLU after the top-k as OpenAI's ``TopK`` activation does; no auxiliary dead-latent
loss, no decoder-norm constraint: our simplifications [I]).

**Attribution labels** [C] (``models/concept_extractor.py``):
``a_t = c_t ⊙ (∇_{h_t} L · W_dec^T)`` with ``L`` the teacher's mean CE over *all*
positions (so ``∇_{h_t}`` also carries the losses after ``t``; the paper writes the
gradient of ``-log f(x_{t+1}|x_{≤t})`` alone [P]); the labels ``I_t`` are the top-4
of ``a_t`` (``topK_attri = 4``). ``a_i`` is the first-order change of ``L`` when
latent ``i`` is added once more in the SAE's (normalised) space; the ``σ_t`` that maps
it back to ``h`` multiplies every concept of a token alike, so it leaves the top-4
unchanged and is left out, as in the spec's formula.

**Prediction, compression, interleaving** [C] (``GPT2CoCoMixModel.forward``): at the
student's insertion layer (after ``insert_layer`` blocks),

.. math::
  (\hat x, \mu, \sigma) = \mathrm{LN}_0(h_t),\quad
  z_t = W_{pred}(\hat x - b_{pre}) + b,\quad
  \hat z_t = z_t \odot \mathrm{topk\_mask}(z_t, k_c),\quad
  \hat c_t = (W_{comp}\hat z_t + b' + b_{pre})\,\sigma + \mu ,

and the sequence ``(h_1, ĉ_1, h_2, ĉ_2, …)`` (length ``2T``, causal, no new
positions: with RoPE each ``ĉ_t`` gets ``h_t``'s position [I], the spec's risk note)
runs through the remaining blocks; the ``ĉ`` slots go through ``ln_f`` and the LM
head. ``k_c`` is the SAE's ``k`` [C]. ``b_pre`` of the head is its own parameter,
initialised from the SAE's [I].

**Loss** [C,P]: ``L = NTP + λ (1/K) Σ_k CE(z_t, I_{t,k})`` with ``λ = 0.1``, ``K = 4``.
The ablations: interleave-only (``λ = 0``) and concept-loss-only (no interleaving).

The student runs the blocks of :class:`jaxlab.models.transformer.Transformer` itself
(:func:`student_forward`): the toolkit has no hook to insert a vector mid-stack. The
``interleave`` switch may be a traced boolean, so arms with and without interleaving
share one compiled program (vmap over arms): off, the sequence is still ``2T`` long but
no ``h`` slot attends to a ``ĉ`` slot and the ``h`` slots are read out, which equals the
plain transformer (tested); ``interleave=False`` as a Python bool skips the ``ĉ`` slots.

Example:
  >>> sae = init_sae(key, d_model=128, num_latents=512, b_pre=h.mean(0))
  >>> c = sae_encode(sae, h, k=16)                                # (..., C), k nonzero
  >>> labels = attribution_labels(teacher, sae, tokens, layer=1, k=16)   # (B, T, 4)
  >>> head = init_concept_head(key, d_model=128, num_latents=512, b_pre=sae.b_pre)
  >>> loss, info = cocomix_loss(student, head, tokens, labels, insert_layer=2, k=16,
  ...                           interleave=True, lam=0.1)

References:
  Tack, Lanchantin, Yu, Cohen, Kulikov, Lan, Hu, Tian, Weston, Li, "LLM Pretraining with
  Continuous Concepts", arXiv:2502.08524, 2025 (ICLR 2026); code:
  github.com/facebookresearch/RAM, ``projects/cocomix``.
  Gao et al., "Scaling and evaluating sparse autoencoders", arXiv:2406.04093, 2024 (TopK SAE).
  Hinton, Vinyals, Dean, "Distilling the Knowledge in a Neural Network", arXiv:1503.02531,
  2015 (the KD baseline).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.checks import check_int
from jaxlab.models import transformer as tfm

__all__ = ["ConceptHead", "SAEParams", "attribution", "attribution_labels", "cocomix_loss",
           "concept_loss", "concept_predict", "init_concept_head", "init_sae", "kd_loss",
           "layer_norm0", "run_blocks", "sae_decode", "sae_encode", "sae_loss",
           "student_forward", "teacher_hidden", "topk_mask"]

LN_EPS = 1e-5  # LN_0's epsilon [I]


class SAEParams(NamedTuple):
  """TopK SAE on ``d``-dim residuals with ``C`` latents."""

  w_enc: jax.Array  # (d, C)
  b_lat: jax.Array  # (C,)
  w_dec: jax.Array  # (C, d)
  b_pre: jax.Array  # (d,)


class ConceptHead(NamedTuple):
  """The student's concept predictor ``W_pred`` and compressor ``W_comp``."""

  w_pred: jax.Array  # (d, C)
  b_pred: jax.Array  # (C,)
  w_comp: jax.Array  # (C, d)
  b_comp: jax.Array  # (d,)
  b_pre: jax.Array  # (d,)


# ---------------------------------------------------------------- SAE
def layer_norm0(h: jax.Array, eps: float = LN_EPS) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``LN_0``: ``((h - μ) / σ, μ, σ)`` over the last axis, no affine parameters."""
  mu = h.mean(-1, keepdims=True)
  sigma = jnp.sqrt(h.var(-1, keepdims=True) + eps)
  return (h - mu) / sigma, mu, sigma


def topk_mask(z: jax.Array, k: int) -> jax.Array:
  """``1`` at the ``k`` largest entries of the last axis (ties: the lower index), else 0."""
  _, idx = jax.lax.top_k(z, k)
  return jnp.sum(jax.nn.one_hot(idx, z.shape[-1], dtype=z.dtype), -2)


def init_sae(key: jax.Array, d_model: int, num_latents: int,
             b_pre: jax.Array | None = None) -> SAEParams:
  """Random SAE: ``W_enc`` with unit-norm columns, ``W_dec = W_enc^T`` (OpenAI's tied
  initialisation), ``b_lat = 0``, ``b_pre`` given (e.g. the data mean) or 0."""
  check_int(d_model, "d_model", lo=1)
  check_int(num_latents, "num_latents", lo=1)
  w = jax.random.normal(key, (d_model, num_latents))
  w = w / jnp.linalg.norm(w, axis=0, keepdims=True)
  b_pre = jnp.zeros(d_model) if b_pre is None else jnp.asarray(b_pre, jnp.float32)
  return SAEParams(w, jnp.zeros(num_latents), w.T, b_pre)


def sae_encode(sae: SAEParams, h: jax.Array, k: int, normalized: bool = False) -> jax.Array:
  """Latents ``c = ReLU(TopK(W_enc(LN_0(h) - b_pre) + b_lat))`` ``(..., C)``: at most
  ``k`` nonzero (``normalized``: ``h`` is already ``LN_0(h)``)."""
  x = h if normalized else layer_norm0(h)[0]
  pre = (x - sae.b_pre) @ sae.w_enc + sae.b_lat
  return jax.nn.relu(pre * topk_mask(pre, k))


def sae_decode(sae: SAEParams, c: jax.Array) -> jax.Array:
  """Reconstruction ``W_dec c + b_pre`` in ``LN_0`` space."""
  return c @ sae.w_dec + sae.b_pre


def sae_loss(sae: SAEParams, h: jax.Array, k: int) -> tuple[jax.Array, dict]:
  """Normalised MSE ``sum |x̃ - x̂|² / sum |x̂ - mean(x̂)|²`` over the rows of ``h``
  ``(N, d)``, ``x̂ = LN_0(h)``; returns ``(loss, info)`` with the plain MSE."""
  x = layer_norm0(h)[0]
  err = jnp.sum((sae_decode(sae, sae_encode(sae, x, k, normalized=True)) - x) ** 2)
  total = jnp.sum((x - x.mean(0)) ** 2)
  nmse = err / total
  return nmse, {"sae/nmse": nmse, "sae/mse": err / x.size}


# ---------------------------------------------------------------- teacher side
def _ctx(positions: jax.Array, mask: jax.Array) -> tfm.BlockContext:
  # the per-call context Transformer.forward builds for its blocks (causal, no cache)
  return tfm.BlockContext(positions, mask, None, None, None, False)


def _embed(model: tfm.Transformer, tokens: jax.Array) -> jax.Array:
  x = model.embed(tokens)
  if model.cfg.positions == "learned":
    x = x + model.pos[...][:tokens.shape[-1]]
  return x


def run_blocks(model: tfm.Transformer, x: jax.Array, start: int, stop: int,
               positions: jax.Array | None = None, mask: jax.Array | None = None) -> jax.Array:
  """Blocks ``start..stop-1`` of ``model`` on the residual ``x (B, T, d)`` (default:
  positions ``0..T-1``, causal mask), as :meth:`Transformer.forward` runs them."""
  t = x.shape[1]
  pos = jnp.arange(t) if positions is None else positions
  if mask is None:
    mask = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
  ctx = _ctx(pos, mask)
  for block in list(model.blocks)[start:stop]:
    x = block(x, ctx)[0]
  return x


def teacher_hidden(model: tfm.Transformer, tokens: jax.Array, layer: int) -> jax.Array:
  """The residual stream after ``layer`` blocks ``(B, T, d)`` (``forward(...,
  return_hidden=True).hidden[layer]``)."""
  return run_blocks(model, _embed(model, tokens), 0, layer)


def attribution(c: jax.Array, grad_h: jax.Array, w_dec: jax.Array) -> jax.Array:
  """``a = c ⊙ (∇_h L · W_dec^T)`` ``(..., C)``: each active latent's first-order effect
  on the loss (``grad_h (..., d)``, ``W_dec (C, d)``)."""
  return c * (grad_h @ w_dec.T)


def attribution_labels(model: tfm.Transformer, sae: SAEParams, tokens: jax.Array, layer: int,
                       k: int, num_labels: int = 4) -> tuple[jax.Array, jax.Array]:
  """The teacher's top-``num_labels`` attributed concepts per position.

  Args:
    model: the teacher :class:`Transformer`.
    sae: its SAE at hidden index ``layer`` (after ``layer`` blocks).
    tokens: ``(B, T + 1)``; inputs ``0..T-1``, targets ``1..T``.
    layer: the SAE's hidden index, ``1..num_layers``.
    k: the SAE's top-k.
    num_labels: labels per position (``topK_attri = 4`` [C]).

  Returns:
    ``(labels (B, T, num_labels) int32, attribution (B, T, C))``; ``L`` is the mean CE
    over all positions and rows [C].
  """
  check_int(layer, "layer", lo=1, hi=model.cfg.num_layers)
  h = teacher_hidden(model, tokens[:, :-1], layer)

  def loss_from(h):
    logits = model.head(model.ln_f(run_blocks(model, h, layer, model.cfg.num_layers)))
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  g = jax.grad(loss_from)(h)
  a = attribution(sae_encode(sae, h, k), g, sae.w_dec)
  return jax.lax.top_k(a, num_labels)[1].astype(jnp.int32), a


# ---------------------------------------------------------------- student side
def init_concept_head(key: jax.Array, d_model: int, num_latents: int,
                      b_pre: jax.Array | None = None, std: float = tfm.INIT_STD) -> ConceptHead:
  """``W_pred``, ``W_comp`` ``~ N(0, std²)`` (GPT-2's scale [I]), zero biases, ``b_pre``
  from the SAE [I]."""
  check_int(d_model, "d_model", lo=1)
  check_int(num_latents, "num_latents", lo=1)
  kp, kc = jax.random.split(key)
  b_pre = jnp.zeros(d_model) if b_pre is None else jnp.asarray(b_pre, jnp.float32)
  return ConceptHead(std * jax.random.normal(kp, (d_model, num_latents)), jnp.zeros(num_latents),
                     std * jax.random.normal(kc, (num_latents, d_model)), jnp.zeros(d_model),
                     b_pre)


def concept_predict(head: ConceptHead, h: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """``(z, ĉ)``: concept logits ``z (..., C)`` from ``h (..., d)`` and the continuous concept
  ``ĉ = (W_comp (z ⊙ topk_mask(z, k)) + b + b_pre) σ + μ`` ``(..., d)``."""
  x, mu, sigma = layer_norm0(h)
  z = (x - head.b_pre) @ head.w_pred + head.b_pred
  z_hat = z * topk_mask(z, k)
  c_hat = (z_hat @ head.w_comp + head.b_comp + head.b_pre) * sigma + mu
  return z, c_hat


def student_forward(model: tfm.Transformer, head: ConceptHead, tokens: jax.Array, *,
                    insert_layer: int, k: int,
                    interleave: bool | jax.Array = True) -> tuple[jax.Array, jax.Array]:
  """The CoCoMix student: ``tokens (B, T) -> (logits (B, T, V), concept logits (B, T, C))``.

  Args:
    model: the student :class:`Transformer` (dense, self-attention only).
    head: its :class:`ConceptHead`.
    tokens: int ``(B, T)``.
    insert_layer: blocks before the insertion, ``1..num_layers``.
    k: top-k of the concept logits (the SAE's ``k``).
    interleave: interleave ``ĉ`` with the hidden states; a traced bool keeps the ``2T``
      sequence but masks the ``ĉ`` slots out and reads the ``h`` slots (equal to the
      plain transformer); Python ``False`` runs the plain ``T`` sequence.
  """
  cfg = model.cfg
  check_int(insert_layer, "insert_layer", lo=1, hi=cfg.num_layers)
  if cfg.num_experts or cfg.cross_attention:
    raise ValueError("student_forward supports dense self-attention transformers only, got "
                     f"num_experts={cfg.num_experts}, cross_attention={cfg.cross_attention}")
  b, t = tokens.shape
  x = run_blocks(model, _embed(model, tokens), 0, insert_layer)
  z, c_hat = concept_predict(head, x, k)
  if interleave is False:
    x = run_blocks(model, x, insert_layer, cfg.num_layers)
    return model.head(model.ln_f(x)), z
  on = jnp.asarray(interleave, bool)
  xx = jnp.stack([x, c_hat.astype(x.dtype)], 2).reshape(b, 2 * t, x.shape[-1])
  slot = jnp.arange(2 * t)
  is_concept = slot % 2 == 1
  causal = slot[None, :] <= slot[:, None]
  # off: no query sees a ĉ key except itself (the ĉ slots' outputs are discarded)
  mask = causal & (on | ~is_concept[None, :] | (slot[None, :] == slot[:, None]))
  xx = run_blocks(model, xx, insert_layer, cfg.num_layers, positions=slot // 2, mask=mask)
  out = jnp.where(on, xx[:, 1::2], xx[:, 0::2])
  return model.head(model.ln_f(out)), z


def concept_loss(z: jax.Array, labels: jax.Array) -> jax.Array:
  """``mean_t (1/K) Σ_k CE(z_t, I_{t,k})`` for ``z (..., C)``, ``labels (..., K)``."""
  logp = jax.nn.log_softmax(z.astype(jnp.float32), -1)
  return -jnp.take_along_axis(logp, labels, -1).mean()


def kd_loss(student_logits: jax.Array, teacher_logits: jax.Array) -> jax.Array:
  """Mean ``KL(p_teacher || p_student)`` over positions (the KD baseline's term)."""
  lt = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), -1)
  ls = jax.nn.log_softmax(student_logits.astype(jnp.float32), -1)
  return jnp.sum(jnp.exp(lt) * (lt - ls), -1).mean()


def cocomix_loss(model: tfm.Transformer, head: ConceptHead, tokens: jax.Array,
                 labels: jax.Array, *, insert_layer: int, k: int,
                 interleave: bool | jax.Array = True, lam: float | jax.Array = 0.1,
                 kd_weight: float | jax.Array = 0.0,
                 teacher_logits: jax.Array | None = None) -> tuple[jax.Array, dict]:
  """``NTP + λ concept loss (+ kd_weight KL to the teacher)`` and its parts.

  Args:
    model, head: the student and its concept head.
    tokens: ``(B, T + 1)``.
    labels: ``(B, T, K)`` attributed concepts of the inputs ``tokens[:, :-1]``.
    insert_layer, k, interleave: see :func:`student_forward`.
    lam: the concept loss's weight (0.1 [C]; 0: interleave-only).
    kd_weight: weight of ``KL(teacher || student)`` (0 unless the KD baseline).
    teacher_logits: ``(B, T, V)``, needed with ``kd_weight``.
  """
  logits, z = student_forward(model, head, tokens[:, :-1], insert_layer=insert_layer, k=k,
                              interleave=interleave)
  ntp = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
  closs = concept_loss(z, labels)
  kd = jnp.zeros(()) if teacher_logits is None else kd_loss(logits, teacher_logits)
  total = ntp + lam * closs + kd_weight * kd
  return total, {"lm/ce": ntp, "cocomix/concept_ce": closs, "kd/kl": kd}
