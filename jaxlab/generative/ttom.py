r"""TTOM: test-time optimisation of LoRA adapters toward a layout, with a memory.

Paper: Qu et al., "TTOM: Test-Time Optimization and Memorization for Compositional Video
Generation", arXiv:2510.07940 (code: github.com/LgQu/TTOM). What is the paper's ([C]: read
in its code, per our spec; [P]: stated by the paper) and what is ours:

* **Objective [C].** For each instance (a named object with a box) the cross-attention
  from the image tokens to the caption is averaged over the instance's caption tokens and
  over heads, upsampled to pixels (nearest, x patch size; the paper upsamples x5) and
  normalised; the target is a Gaussian over the box, :math:`\sigma = (\text{extent} + 1)/4`
  per axis (we keep it inside the box: ours), with the boxes of same-named instances
  summed. The loss is the mean over layers x instances of

  .. math::
    \mathrm{JSD}(P \,\|\, Q) = \tfrac12 \mathrm{KL}(P \,\|\, M) + \tfrac12
      \mathrm{KL}(Q \,\|\, M), \quad M = \tfrac12 (P + Q),
      \quad P = A / \textstyle\sum A,\ Q = G / \sum G

  (:func:`jsd`, :func:`layout_loss`; natural log, so ``0 <= JSD <= log 2``).
* **What is optimised [C].** Only LoRA adapters (:mod:`jaxlab.nn.lora`) on one layer's
  cross-attention q, k, v, o, with AdamW, at each of the first ``opt_steps`` denoising
  steps for up to ``iters`` iterations, stopping early once the loss is below
  ``threshold``; the adapters' scale is 0 from step ``opt_steps`` on; the latents are never
  edited. The optimiser state lives for one prompt (ours: the paper does not say).
* **Latent guidance [C] (the baseline).** ``z <- z - step * grad_z L`` for ``iters``
  iterations at each of the first ``opt_steps`` steps, no adapters.
* **Memory [P]/[C].** ``M = {g(C): phi*}`` keyed by a layout embedding (ours:
  :func:`layout_key`, the per-digit-class Gaussian target maps at patch resolution,
  unit-normalised; the paper embeds an abstract scene description with a text encoder),
  with insert / read / update / delete and least-frequently-used eviction
  (:class:`Memory`). Strategies [C]: 0 optimise (and insert), 1 load only, 2 load +
  update, :math:`\phi \leftarrow (\phi_{old} + s\, \phi_{new}) / (1 + s)` with ``s`` the
  key similarity; which one a prompt gets is decided by thresholds on the cosine
  similarity of its key to the best stored key (ours: :func:`choose_strategy`).
* **Model (ours).** A tiny diffusion transformer (:class:`DiT`): 4 x 4 pixel patches of a
  24 x 24 canvas embedded linearly, plus a time embedding and a learned absolute position
  embedding, through the shared
  :class:`jaxlab.models.transformer.Transformer` (bidirectional, 2-axis RoPE on
  (row, column), cross-attention to the caption's digit tokens after a learned null token
  that background patches can attend to); its output head predicts the patches' noise.
  It is trained with :func:`jaxlab.models.ddpm.eps_loss` and sampled with
  :func:`jaxlab.models.ddpm.sample`, whose step hook carries the optimisation
  (:func:`make_hook`).

Example:
  >>> net = make_dit(DiTConfig(), seed=0)
  >>> cfg = TTOConfig(layer=2, loss_layers=(2,))
  >>> carry = init_carry(jax.random.key(0), net, cfg, tokens, targets, mode="lora")
  >>> x, carry = ddpm.sample(key, net, schedule, (n, 576), cond=tokens,
  ...                        hook=make_hook(net, cfg, "lora"), hook_carry=carry)

References:
  Qu et al., "TTOM: Test-Time Optimization and Memorization for Compositional Video
  Generation", arXiv:2510.07940, 2025.
  Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685, 2021.
  Peebles, Xie, "Scalable Diffusion Models with Transformers" (DiT), arXiv:2212.09748, 2022.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.flatten_util import ravel_pytree
from jax.scipy.special import xlogy

from jaxlab.core.checks import check_int, check_range
from jaxlab.data import digit_layouts as dl
from jaxlab.models import transformer as tfm
from jaxlab.models.ddpm import timestep_embedding
from jaxlab.nn import Net, lora

__all__ = ["DiT", "DiTConfig", "Memory", "TTOCarry", "TTOConfig", "box_iou", "choose_strategy",
           "gaussian_targets", "init_carry", "instance_maps", "jsd", "layout_key", "layout_loss",
           "make_dit", "make_hook", "memory_delete", "memory_init", "memory_insert",
           "memory_read", "memory_update", "MODES"]

MODES = ("base", "guidance", "lora")
LOAD_ONLY, OPTIMISE, LOAD_UPDATE = 1, 0, 2  # the code's strat_id


# ---------------------------------------------------------------- the tiny DiT
@dataclasses.dataclass(frozen=True)
class DiTConfig:
  """The diffusion transformer's shape (static, hashable)."""

  canvas: int = dl.CANVAS  # image side (pixels)
  patch: int = 4  # patch side (pixels); must divide canvas
  d_model: int = 64
  num_heads: int = 4
  num_layers: int = 4
  caption_len: int = dl.MAX_INSTANCES  # caption tokens (digits / PAD)

  def __post_init__(self):
    for name in ("canvas", "patch", "d_model", "num_heads", "num_layers", "caption_len"):
      check_int(getattr(self, name), name, lo=1)
    if self.canvas % self.patch:
      raise ValueError(f"patch must divide canvas, got canvas={self.canvas}, patch={self.patch}")
    if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 4:
      raise ValueError("d_model / num_heads must be a multiple of 4 (2-axis RoPE), got "
                       f"d_model={self.d_model}, num_heads={self.num_heads}")

  @property
  def grid(self) -> int:
    return self.canvas // self.patch

  @property
  def pixels(self) -> int:
    return self.canvas * self.canvas

  def transformer(self) -> tfm.TransformerConfig:
    hd = self.d_model // self.num_heads
    return tfm.TransformerConfig(
        vocab_size=self.patch * self.patch, d_model=self.d_model, num_heads=self.num_heads,
        num_layers=self.num_layers, seq_len=self.grid ** 2, positions="rope",
        rope_sections=(hd // 4, hd // 4), cross_attention=True)


def patchify(x: jax.Array, cfg: DiTConfig) -> jax.Array:
  """``(B, canvas^2) -> (B, grid^2, patch^2)``, patches in row-major order."""
  g, p = cfg.grid, cfg.patch
  return x.reshape(-1, g, p, g, p).transpose(0, 1, 3, 2, 4).reshape(-1, g * g, p * p)


def unpatchify(x: jax.Array, cfg: DiTConfig) -> jax.Array:
  """Inverse of :func:`patchify`."""
  g, p = cfg.grid, cfg.patch
  return x.reshape(-1, g, g, p, p).transpose(0, 1, 3, 2, 4).reshape(-1, cfg.pixels)


class DiT(nnx.Module):
  """``eps_theta(x_t, t, caption)`` for flat canvases ``(B, canvas^2)`` (ours; see the module
  docstring). :meth:`forward` also returns every layer's cross-attention to the context
  ``[null, caption tokens]`` ``(L, B, H, grid^2, 1 + caption_len)``."""

  def __init__(self, cfg: DiTConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.d_model
    self.patch_in = nnx.Linear(cfg.patch * cfg.patch, d, rngs=rngs)
    self.time_in = nnx.Linear(d, d, rngs=rngs)
    self.time_out = nnx.Linear(d, d, rngs=rngs)
    self.caption = nnx.Embed(dl.VOCAB, d, rngs=rngs)
    self.null = nnx.Param(0.02 * jax.random.normal(rngs.params(), (1, d)))
    # absolute positions (DiT's are fixed sin-cos; ours learned): RoPE alone is relative, and
    # the cross-attention (no RoPE) would only see where a patch is through its content
    self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg.grid ** 2, d)))
    self.tfm = tfm.Transformer(cfg.transformer(), rngs=rngs)

  def forward(self, x: jax.Array, t: jax.Array, caption: jax.Array,
              return_attention: bool = False) -> tuple[jax.Array, jax.Array | None]:
    cfg = self.cfg
    b = x.shape[0]
    emb = self.time_out(jax.nn.silu(self.time_in(timestep_embedding(t, cfg.d_model))))
    h = self.patch_in(patchify(x, cfg)) + emb[:, None] + self.pos[...]
    ctx = jnp.concatenate([jnp.broadcast_to(self.null[...], (b, 1, cfg.d_model)),
                           self.caption(caption)], axis=1)
    keep = jnp.concatenate([jnp.ones((b, 1), bool), caption != dl.PAD], 1)[:, None, None]
    g = cfg.grid
    pos = jnp.stack(jnp.meshgrid(jnp.arange(g), jnp.arange(g), indexing="ij"), -1)
    out = self.tfm.forward(embeddings=h, positions=pos.reshape(g * g, 2), causal=False,
                           context=ctx, context_mask=keep, return_attention=return_attention)
    return unpatchify(out.logits, cfg), out.cross_attention

  def __call__(self, x: jax.Array, t: jax.Array, caption: jax.Array) -> jax.Array:
    return self.forward(x, t, caption)[0]


def make_dit(cfg: DiTConfig, seed: int) -> Net:
  """A freshly initialised :class:`DiT` as a :class:`jaxlab.nn.Net`."""
  return Net.create(DiT(cfg, rngs=nnx.Rngs(check_int(seed, "seed", lo=0))))


# ---------------------------------------------------------------- the layout objective
def gaussian_targets(boxes: jax.Array, names: jax.Array, valid: jax.Array, size: int) -> jax.Array:
  r"""Per-instance targets ``(..., K, size, size)``: instance ``k``'s map is the sum, over
  the valid instances ``j`` named like ``k``, of a Gaussian over box ``j``,

  :math:`G_j(y, x) = \exp\big(-\tfrac{(y - c_y)^2}{2\sigma_y^2}
  - \tfrac{(x - c_x)^2}{2\sigma_x^2}\big)` inside the box, 0 outside, with the box centre
  :math:`c = (lo + hi - 1)/2` in pixel indices and :math:`\sigma = (\text{extent} + 1) / 4`
  per axis (extent = ``hi - lo``). Invalid instances get an all-zero map.

  Args:
    boxes: ``(..., K, 4)`` ``(y0, x0, y1, x1)`` pixel boxes, exclusive ends.
    names: ``(..., K)`` int instance names (digit classes).
    valid: ``(..., K)`` bool.
    size: the canvas side.
  """
  boxes = jnp.asarray(boxes, jnp.float32)
  y = jnp.arange(size, dtype=jnp.float32)
  y0, x0, y1, x1 = (boxes[..., i, None] for i in range(4))  # (..., K, 1)
  cy, cx = (y0 + y1 - 1) / 2, (x0 + x1 - 1) / 2
  sy, sx = (y1 - y0 + 1) / 4, (x1 - x0 + 1) / 4
  gy = jnp.exp(-0.5 * ((y - cy) / sy) ** 2) * ((y >= y0) & (y < y1))  # (..., K, size)
  gx = jnp.exp(-0.5 * ((y - cx) / sx) ** 2) * ((y >= x0) & (y < x1))
  g = gy[..., :, None] * gx[..., None, :] * valid[..., None, None]  # (..., K, S, S)
  same = (names[..., :, None] == names[..., None, :]) & valid[..., None, :] & valid[..., :, None]
  return jnp.einsum("...kj,...jyx->...kyx", same.astype(g.dtype), g)


def jsd(p: jax.Array, q: jax.Array, axis: tuple[int, ...] = (-2, -1)) -> jax.Array:
  """Jensen-Shannon divergence (nats) of the maps ``p``, ``q`` normalised over ``axis``."""
  p = p / jnp.sum(p, axis, keepdims=True)
  q = q / jnp.sum(q, axis, keepdims=True)
  m = 0.5 * (p + q)
  kl = lambda a: jnp.sum(xlogy(a, a) - xlogy(a, m), axis)
  return 0.5 * kl(p) + 0.5 * kl(q)


def instance_maps(cross: jax.Array, caption: jax.Array, valid: jax.Array,
                  cfg: DiTConfig) -> jax.Array:
  """Per-instance attention maps ``(..., K, canvas, canvas)`` from one layer's cross-attention
  ``(..., H, grid^2, 1 + K)``: mean over heads and over the caption tokens that carry the
  instance's name, upsampled to pixels (nearest, x patch). Invalid instances: zeros."""
  a = jnp.mean(cross, axis=-3)[..., 1:]  # (..., T, K) drop the null token
  same = ((caption[..., :, None] == caption[..., None, :]) & valid[..., None, :]
          & valid[..., :, None]).astype(a.dtype)  # (..., K, K')
  m = jnp.einsum("...tj,...kj->...kt", a, same) / jnp.maximum(same.sum(-1), 1.0)[..., None]
  g = cfg.grid
  m = m.reshape(*m.shape[:-1], g, g)
  return jnp.repeat(jnp.repeat(m, cfg.patch, axis=-2), cfg.patch, axis=-1)


def layout_loss(cross: jax.Array, caption: jax.Array, valid: jax.Array, targets: jax.Array,
                cfg: DiTConfig) -> jax.Array:
  """TTOM's loss: the mean over layers x samples x valid instances of :func:`jsd` between
  :func:`instance_maps` of ``cross (L, B, H, T, 1 + K)`` and ``targets (B, K, S, S)``."""
  maps = instance_maps(cross, caption, valid, cfg)  # (L, B, K, S, S)
  safe = jnp.where(valid[..., None, None], targets, 1.0)  # invalid: any distribution
  d = jsd(maps + 1e-12, safe)
  w = jnp.broadcast_to(valid, d.shape).astype(d.dtype)
  return jnp.sum(d * w) / jnp.maximum(jnp.sum(w), 1.0)


def box_iou(maps: jax.Array, boxes: jax.Array, valid: jax.Array) -> jax.Array:
  """Attention-box IoU per instance ``(..., K)``: the map's top-``|box|`` pixels vs the box
  (NaN for invalid instances). ``maps (..., K, S, S)``, ``boxes (..., K, 4)``."""
  size = maps.shape[-1]
  y = jnp.arange(size)
  b = jnp.asarray(boxes)
  inside = (((y >= b[..., 0, None]) & (y < b[..., 2, None]))[..., :, None]
            & ((y >= b[..., 1, None]) & (y < b[..., 3, None]))[..., None, :])
  area = jnp.sum(inside, (-2, -1))
  flat = maps.reshape(*maps.shape[:-2], -1)
  kth = -jnp.sort(-flat, axis=-1)
  thr = jnp.take_along_axis(kth, jnp.maximum(area - 1, 0)[..., None], axis=-1)
  top = (flat >= thr).reshape(maps.shape)
  inter = jnp.sum(top & inside, (-2, -1))
  union = jnp.sum(top | inside, (-2, -1))
  return jnp.where(valid, inter / jnp.maximum(union, 1), jnp.nan)


# ---------------------------------------------------------------- test-time optimisation
@dataclasses.dataclass(frozen=True)
class TTOConfig:
  """Test-time optimisation and guidance (static, hashable); defaults are the paper's
  values [C] where it has one (rank 32, alpha 32, AdamW lr 1e-3, 8 iterations at steps 0-4,
  threshold in 0.03-0.06, 3 guidance iterations)."""

  layer: int = 2  # the layer whose cross-attention gets adapters
  loss_layers: tuple[int, ...] = (2,)  # layers whose maps enter the loss
  rank: int = 32
  alpha: float = 32.0
  lr: float = 1e-3  # AdamW
  weight_decay: float = 1e-2  # AdamW (torch's default)
  opt_steps: int = 5  # denoising steps 0..opt_steps-1 are optimised
  iters: int = 8  # max iterations per optimised step (LoRA)
  threshold: float = 0.04  # early stop once the loss is below
  guidance_iters: int = 3  # latent-guidance iterations per step
  guidance_step: float = 1.0  # z <- z - step * grad_z L

  def __post_init__(self):
    check_int(self.layer, "layer", lo=0)
    if not self.loss_layers or any(not isinstance(v, int) or v < 0 for v in self.loss_layers):
      raise ValueError(f"loss_layers must be a non-empty tuple of ints >= 0, got "
                       f"{self.loss_layers!r}")
    for name in ("rank", "opt_steps", "iters", "guidance_iters"):
      check_int(getattr(self, name), name, lo=1)
    check_range(self.lr, "lr", lo=0.0, lo_open=True)
    check_range(self.weight_decay, "weight_decay", lo=0.0)
    check_range(self.threshold, "threshold", lo=0.0)
    check_range(self.guidance_step, "guidance_step", lo=0.0)

  def lora_config(self) -> lora.LoraConfig:
    return lora.LoraConfig(self.rank, self.alpha,
                           lora.attention_targets(self.layer, "cross", prefix="tfm/"))

  def optimizer(self) -> optax.GradientTransformation:
    return optax.adamw(self.lr, weight_decay=self.weight_decay)


class TTOCarry(NamedTuple):
  """The sampler hook's carry for one prompt (a batch of samples sharing it)."""

  caption: jax.Array  # (B, K) tokens
  valid: jax.Array  # (B, K)
  targets: jax.Array  # (B, K, S, S) Gaussian layout targets
  lora: Any  # adapters (dict path -> LoraWeights)
  opt_state: Any  # AdamW state
  optimise: jax.Array  # bool: run the optimisation (False: memory "load only")
  iters: jax.Array  # int32: optimiser / guidance iterations so far
  first_loss: jax.Array  # loss at step 0 before any update
  last_loss: jax.Array  # loss at the last optimised step after its updates
  maps: jax.Array  # (B, K, S, S): loss-layer maps at step opt_steps - 1 (after its updates)


def init_carry(key: jax.Array, net: Net, cfg: TTOConfig, caption: jax.Array, valid: jax.Array,
               targets: jax.Array, *, lora_weights: Any = None,
               optimise: jax.typing.ArrayLike = True) -> TTOCarry:
  """A fresh carry: adapters ``lora_weights`` (default: fresh, ``B = 0``) and AdamW state."""
  lcfg = cfg.lora_config()
  w = lora.init(key, net.params, lcfg) if lora_weights is None else lora_weights
  s = targets.shape[-1]
  return TTOCarry(jnp.asarray(caption), jnp.asarray(valid), jnp.asarray(targets), w,
                  cfg.optimizer().init(w), jnp.asarray(optimise, bool),
                  jnp.zeros((), jnp.int32), jnp.zeros(()), jnp.zeros(()),
                  jnp.zeros((*jnp.shape(valid), s, s)))


class _Guidance(NamedTuple):
  """Loop state of latent guidance at one step: the latent and the loss before the first move."""

  y: jax.Array
  first: jax.Array


class _LoraLoop(NamedTuple):
  """Loop state of the adapters' optimisation at one denoising step."""

  w: Any
  opt_state: Any
  n: jax.Array  # updates made
  k: jax.Array  # evaluations made
  loss: jax.Array  # at the current adapters
  first: jax.Array  # at the adapters this step started from
  aux: Any  # (eps, maps) at the current adapters
  done: jax.Array

def make_hook(net: Net, cfg: TTOConfig, mode: str):
  """The :func:`jaxlab.models.ddpm.sample` hook of one arm.

  ``"base"``: the network unchanged (the maps are recorded); ``"guidance"``: latent
  guidance at the first ``opt_steps`` steps; ``"lora"``: the adapters optimised at the
  first ``opt_steps`` steps (unless ``carry.optimise`` is False), used at scale 1 there and
  0 after.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  lcfg = cfg.lora_config()
  opt = cfg.optimizer()
  layers = jnp.asarray(cfg.loss_layers)
  dcfg = net.module().cfg

  def attn(params, x, t, caption):
    ts = jnp.full((x.shape[0],), t)
    eps, cross = net.module(params).forward(x, ts, caption, return_attention=True)
    return eps, cross[layers]

  def loss_of(params, x, t, c: TTOCarry):
    eps, cross = attn(params, x, t, c.caption)
    loss = layout_loss(cross, c.caption, c.valid, c.targets, dcfg)
    return loss, (eps, instance_maps(cross, c.caption, c.valid, dcfg).mean(0))

  def hook(c: TTOCarry, i, x, t, evaluate):
    active = i < cfg.opt_steps
    record = i == cfg.opt_steps - 1

    if mode == "base":
      def on(c):
        loss, (eps, maps) = loss_of(net.params, x, t, c)
        c = c._replace(first_loss=jnp.where(i == 0, loss, c.first_loss),
                       last_loss=jnp.where(record, loss, c.last_loss),
                       maps=jnp.where(record, maps, c.maps))
        return x, eps, c
      return jax.lax.cond(active, on, lambda c: (x, evaluate(x), c), c)

    if mode == "guidance":
      def on(c):
        grad_x = jax.value_and_grad(lambda y: loss_of(net.params, y, t, c)[0])

        def body(k, g: _Guidance) -> _Guidance:  # z <- z - step * grad_z L  [C]
          loss, grad = grad_x(g.y)
          return _Guidance(g.y - cfg.guidance_step * grad, jnp.where(k == 0, loss, g.first))

        y, l0 = jax.lax.fori_loop(0, cfg.guidance_iters, body, _Guidance(x, jnp.zeros(())))
        loss, (eps, maps) = loss_of(net.params, y, t, c)
        c = c._replace(iters=c.iters + cfg.guidance_iters,
                       first_loss=jnp.where(i == 0, l0, c.first_loss),
                       last_loss=jnp.where(record, loss, c.last_loss),
                       maps=jnp.where(record, maps, c.maps))
        return y, eps, c
      return jax.lax.cond(active, on, lambda c: (x, evaluate(x), c), c)

    def lora_loss(w, c):
      return loss_of(lora.merge(net.params, w, lcfg), x, t, c)

    def on(c):
      vg = jax.value_and_grad(lora_loss, has_aux=True)

      def body(s: _LoraLoop) -> _LoraLoop:
        # one evaluation per pass (one copy of the backward graph): the loss, eps and maps at
        # the current adapters, then an update unless stopped: up to `iters` updates, early
        # stop once the loss is below the threshold [C]
        (loss, aux), g = vg(s.w, c)
        go = c.optimise & (s.n < cfg.iters) & (loss >= cfg.threshold)
        upd, opt_state = opt.update(g, s.opt_state, s.w)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(go, a, b), new, old)
        return _LoraLoop(keep(optax.apply_updates(s.w, upd), s.w), keep(opt_state, s.opt_state),
                    s.n + go.astype(jnp.int32), s.k + 1, loss,
                    jnp.where(s.k == 0, loss, s.first), aux, ~go)

      zeros = (jnp.zeros_like(x), jnp.zeros_like(c.maps))
      s = jax.lax.while_loop(lambda s: ~s.done, body,
                             _LoraLoop(c.lora, c.opt_state, jnp.zeros((), jnp.int32),
                                  jnp.zeros((), jnp.int32), jnp.zeros(()), jnp.zeros(()), zeros,
                                  jnp.asarray(False)))
      eps, maps = s.aux
      c = c._replace(lora=s.w, opt_state=s.opt_state, iters=c.iters + s.n,
                     first_loss=jnp.where(i == 0, s.first, c.first_loss),
                     last_loss=jnp.where(record, s.loss, c.last_loss),
                     maps=jnp.where(record, maps, c.maps))
      return x, eps, c

    # adapters at scale 0 after the optimised steps: the base network [C]
    return jax.lax.cond(active, on, lambda c: (x, evaluate(x), c), c)

  return hook


# ---------------------------------------------------------------- the memory
class Memory(NamedTuple):
  """A fixed-capacity memory ``{key: value}`` with use counts (pure; jit-able).

  ``keys (C, E)`` unit vectors, ``values (C, P)`` raveled adapters, ``counts (C,)`` int32
  reads + 1 per entry, ``valid (C,)`` bool.
  """

  keys: jax.Array
  values: jax.Array
  counts: jax.Array
  valid: jax.Array


def memory_init(capacity: int, key_dim: int, value_dim: int) -> Memory:
  """An empty :class:`Memory`."""
  check_int(capacity, "capacity", lo=1)
  check_int(key_dim, "key_dim", lo=1)
  check_int(value_dim, "value_dim", lo=1)
  return Memory(jnp.zeros((capacity, key_dim)), jnp.zeros((capacity, value_dim)),
                jnp.zeros((capacity,), jnp.int32), jnp.zeros((capacity,), bool))


def memory_read(mem: Memory, key: jax.Array,
                min_sim: jax.typing.ArrayLike = -jnp.inf) -> tuple[jax.Array, jax.Array, Memory]:
  """The best entry for ``key``: ``(index, cosine similarity, mem)``. A read is a use (the
  entry's count goes up by one) when its similarity is at least ``min_sim`` (default: any
  entry); an empty memory gives similarity ``-inf`` and index 0, and counts nothing."""
  k = key / jnp.maximum(jnp.linalg.norm(key), 1e-12)
  sims = jnp.where(mem.valid, mem.keys @ k, -jnp.inf)
  idx = jnp.argmax(sims)
  hit = jnp.any(mem.valid) & (sims[idx] >= min_sim)
  return idx, sims[idx], mem._replace(counts=mem.counts.at[idx].add(hit.astype(jnp.int32)))


def memory_insert(mem: Memory, key: jax.Array, value: jax.Array) -> tuple[jax.Array, Memory]:
  """Stores ``key: value`` in the first empty slot, or when full in place of the least
  frequently used entry (lowest count; ties: the lowest slot). Returns ``(slot, mem)``;
  the new entry's count is 1."""
  k = key / jnp.maximum(jnp.linalg.norm(key), 1e-12)
  slot = jnp.where(jnp.all(mem.valid), jnp.argmin(mem.counts), jnp.argmin(mem.valid))
  return slot, Memory(mem.keys.at[slot].set(k), mem.values.at[slot].set(value),
                      mem.counts.at[slot].set(1), mem.valid.at[slot].set(True))


def memory_update(mem: Memory, index: jax.Array, value: jax.Array, sim: jax.Array) -> Memory:
  r"""``phi <- (phi_old + sim * phi_new) / (1 + sim)`` at ``index`` [C]."""
  new = (mem.values[index] + sim * value) / (1.0 + sim)
  return mem._replace(values=mem.values.at[index].set(new))


def memory_delete(mem: Memory, index: jax.Array) -> Memory:
  """Frees slot ``index``."""
  return Memory(mem.keys.at[index].set(0.0), mem.values.at[index].set(0.0),
                mem.counts.at[index].set(0), mem.valid.at[index].set(False))


def choose_strategy(sim: jax.Array, load: float, update: float) -> jax.Array:
  """``1`` (load only) if ``sim >= load``, ``2`` (load + update) if ``update <= sim < load``,
  else ``0`` (optimise from scratch and insert); the code's ``strat_id``."""
  return jnp.where(sim >= load, LOAD_ONLY, jnp.where(sim >= update, LOAD_UPDATE, OPTIMISE))


def layout_key(boxes: jax.Array, names: jax.Array, valid: jax.Array, cfg: DiTConfig) -> jax.Array:
  """The memory key of a layout (ours): for each digit class the sum of its instances'
  Gaussian targets, pooled to patch resolution, ``(10 * grid^2,)`` unit-normalised."""
  g = gaussian_targets(boxes, names, valid, cfg.canvas)  # (K, S, S)
  onehot = jax.nn.one_hot(names, 10) * valid[:, None]  # (K, 10)
  per_class = jnp.einsum("kc,kyx->cyx", onehot, g)
  p = cfg.patch
  pooled = per_class.reshape(10, cfg.grid, p, cfg.grid, p).mean((2, 4)).ravel()
  return pooled / jnp.maximum(jnp.linalg.norm(pooled), 1e-12)


def ravel_lora(w: Any) -> tuple[jax.Array, Any]:
  """Adapters as one vector (the memory's values) and the function that undoes it."""
  return ravel_pytree(w)


def crops(x: np.ndarray, boxes: np.ndarray, canvas: int = dl.CANVAS) -> np.ndarray:
  """The ``8 x 8`` box crops ``(..., K, 64)`` of flat canvases ``x (..., canvas^2)``."""
  img = np.asarray(x).reshape(*np.shape(x)[:-1], canvas, canvas)
  out = np.zeros((*np.shape(boxes)[:-1], dl.DIGIT * dl.DIGIT), np.float32)
  for idx in np.ndindex(*np.shape(boxes)[:-1]):
    y0, x0 = boxes[idx][:2]
    y0 = int(min(max(y0, 0), canvas - dl.DIGIT))
    x0 = int(min(max(x0, 0), canvas - dl.DIGIT))
    out[idx] = img[idx[:-1]][y0:y0 + dl.DIGIT, x0:x0 + dl.DIGIT].ravel()
  return out
