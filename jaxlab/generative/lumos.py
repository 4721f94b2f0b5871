r"""Lumos-1: autoregressive video generation on a plain LLM (MM-RoPE, AR-DF).

Lumos-1 generates a tokenized video frame by frame with an ordinary decoder LM, changing
only the position encoding and the attention / masking scheme. The pieces, all on the
toolkit transformer (:mod:`jaxlab.models.transformer`):

* **MM-RoPE** (:func:`mm_rope_axes`, :func:`mm_position_ids`): rotary pair ``k`` (frequency
  :math:`\theta_k = b^{-2k/d}`) follows position axis ``MM_ROPE_BLOCK[k mod 16]``: pairs
  ``{0..3}`` the time axis, ``{4,5,8,9,12,13}`` the height, ``{6,7,10,11,14,15}`` the width
  (ratio 2 : 3 : 3 in every block of 16, so each axis spans high to low frequencies), given
  to the transformer as ``TransformerConfig.rope_axes``. Visual token ``(f, r, c)`` sits at

  .. math::
    (t, h, w) = (P_0 + s_t f,\ P_0 + s_h r,\ P_0 + s_w c),

  with the strides ``s`` the tokenizer's compression and :math:`P_0` the 1-D position of the
  first visual token; text token ``i`` at ``(i, i, i)``, which under any pair assignment is
  plain 1-D RoPE. The ablations: :func:`contiguous_sections` (the usual contiguous 3-D
  split, t:h:w = 2:3:3, via ``rope_sections``) and 1-D RoPE over the flat sequence.
* **AR-DF attention** (:func:`ardf_mask`): causal across text tokens and frames,
  bidirectional within a frame.
* **Tube masking** (:func:`tube_mask`): per video ``t ~ U(0, 1)``,
  ``r = max(cos(pi t / 2), 0.7)``; one spatial mask of ``round(r n)`` of a frame's ``n``
  tokens, repeated over all frames. The loss (:func:`video_loss`) is the cross-entropy on
  masked visual tokens (logits restricted to the visual codes) plus a z-loss. The ablation
  :func:`frame_random_mask` draws the spatial mask independently per frame (same ratio).
* **Inference** (:func:`generate_video`): per frame, MaskGIT decoding (cosine schedule,
  confidence = log-probability of the sampled token plus Gumbel noise times
  ``choice_temperature * (1 - (s + 1) / steps)``), the frame attending to the KV cache of
  the text and the earlier frames; a finished frame enters the cache **partially masked**
  (``mask_history_ratio`` of its tokens, at evenly spaced indices, replaced by [MASK]).

Ours / not done: the paper's Chameleon LLM, Cosmos tokenizer (4 x 8 x 8), row-end newline
tokens (our frames have a fixed size, so we use none) and classifier-free guidance on the
text (its unconditional branch gets a fully masked history) are not reproduced; the
experiment (``experiments/lumos.py``) uses a tiny transformer on moving digits tokenized in
2 x 2 patches (:mod:`jaxlab.data.moving_digits`, strides ``(1, 2, 2)``).

Token layout: visual codes ``0..num_codes-1``, then the [MASK] id (any id outside the
codes); text tokens are whatever ids the caller uses. A sequence is the text, then the
frames in order, each row-major.

Example:
  >>> layout = VideoLayout(text_len=3, frames=4, rows=8, cols=8, strides=(1, 2, 2))
  >>> pos = mm_position_ids(layout)                       # (3 + 4 * 64, 3)
  >>> cfg = TransformerConfig(vocab_size=32, d_model=64, num_heads=2, num_layers=2,
  ...                         seq_len=layout.length, rope_axes=mm_rope_axes(16))
  >>> loss, info = video_loss(net, text, video, key, layout, pos, num_codes=16, mask_id=16)
  >>> video = generate_video(net, text, key, layout, pos, num_codes=16, mask_id=16, steps=8)

References:
  Yuan et al., "Lumos-1: On Autoregressive Video Generation from a Unified Model
  Perspective", arXiv:2507.08801, 2025 (code: alibaba-damo-academy/Lumos).
  Chang et al., "MaskGIT: Masked Generative Image Transformer", arXiv:2202.04200, 2022.
  Su et al., "RoFormer", arXiv:2104.09864, 2021.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.models.transformer import init_cache
from jaxlab.nn import Net

# axis (0: t, 1: h, 2: w) of rotary pair k, by k mod 16 (Lumos-1's mm_rotary_emb)
MM_ROPE_BLOCK = (0, 0, 0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2)
MIN_MASK_RATIO = 0.7  # r = max(cos(pi t / 2), 0.7)
MASK_HISTORY_RATIO = 0.7  # share of a finished frame's tokens masked in the KV cache


def mm_rope_axes(num_pairs: int) -> tuple[int, ...]:
  """MM-RoPE's axis of each of ``num_pairs`` rotary pairs (``head_dim / 2``, a multiple of
  16): ``MM_ROPE_BLOCK[k % 16]``; the ``rope_axes`` of a :class:`TransformerConfig`."""
  if not isinstance(num_pairs, int) or num_pairs < 16 or num_pairs % 16:
    raise ValueError(f"num_pairs (head_dim / 2) must be a positive multiple of 16 for "
                     f"MM-RoPE, got {num_pairs!r}")
  return tuple(MM_ROPE_BLOCK[k % 16] for k in range(num_pairs))


def contiguous_sections(num_pairs: int) -> tuple[int, int, int]:
  """The contiguous 3-D RoPE ablation: ``(t, h, w)`` pairs in the ratio 2 : 3 : 3 (t the
  highest frequencies, w the lowest); the ``rope_sections`` of a config."""
  if not isinstance(num_pairs, int) or num_pairs < 8 or num_pairs % 8:
    raise ValueError(f"num_pairs must be a positive multiple of 8, got {num_pairs!r}")
  return (num_pairs // 4, 3 * num_pairs // 8, 3 * num_pairs // 8)


@dataclasses.dataclass(frozen=True)
class VideoLayout:
  """Static layout of one sequence: ``text_len`` text tokens, then ``frames`` frames of
  ``rows x cols`` tokens (row-major); ``strides`` the tokenizer's compression per axis."""

  text_len: int
  frames: int
  rows: int
  cols: int
  strides: tuple[int, int, int] = (1, 1, 1)

  def __post_init__(self):
    for name in ("text_len", "frames", "rows", "cols"):
      v = getattr(self, name)
      if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "text_len" else 1):
        raise ValueError(f"{name} must be an int >= {0 if name == 'text_len' else 1}, "
                         f"got {v!r}")
    s = self.strides
    if (not isinstance(s, tuple) or len(s) != 3
        or not all(isinstance(x, int) and x >= 1 for x in s)):
      raise ValueError(f"strides must be a tuple of 3 positive ints, got {s!r}")

  @property
  def tokens_per_frame(self) -> int:
    return self.rows * self.cols

  @property
  def length(self) -> int:
    return self.text_len + self.frames * self.tokens_per_frame


def mm_position_ids(layout: VideoLayout) -> np.ndarray:
  """``(length, 3)`` int32 ``(t, h, w)`` positions: text token ``i`` at ``(i, i, i)``;
  visual token ``(f, r, c)`` at ``P0 + strides * (f, r, c)``, ``P0 = text_len`` (Lumos-1's
  ``generate_mm_position_ids`` with a global offset shared by all frames)."""
  t = np.arange(layout.text_len)
  text = np.stack([t, t, t], 1)
  f, r, c = np.meshgrid(np.arange(layout.frames), np.arange(layout.rows),
                        np.arange(layout.cols), indexing="ij")
  vis = np.stack([f, r, c], -1).reshape(-1, 3) * np.asarray(layout.strides) + layout.text_len
  return np.concatenate([text, vis]).astype(np.int32)


def pair_positions(positions: jax.Array, axes: tuple[int, ...] | None,
                   num_pairs: int) -> jax.Array:
  """The position every rotary pair turns by, ``(..., T, num_pairs)``: ``positions[..., axes]``
  for ``(..., T, A)`` positions and a pair-to-axis map ``axes``, or ``(..., T)`` positions
  repeated (1-D RoPE, ``axes=None``). A transformer with ``rope_axes=tuple(range(num_pairs))``
  given these positions computes exactly what one with ``rope_axes=axes`` computes given
  ``positions`` (so RoPE variants can share one compiled program, as the experiment does)."""
  pos = jnp.asarray(positions)
  if axes is None:
    return jnp.repeat(pos[..., None], num_pairs, axis=-1)
  if len(axes) != num_pairs:
    raise ValueError(f"axes must name {num_pairs} pairs, got {len(axes)}")
  return jnp.take(pos, jnp.asarray(axes), axis=-1)


def flat_position_ids(layout: VideoLayout) -> np.ndarray:
  """``(length,)`` positions ``0..length-1`` of 1-D RoPE over the flat sequence."""
  return np.arange(layout.length, dtype=np.int32)


def block_ids(layout: VideoLayout) -> np.ndarray:
  """Attention block of every position: text token ``i`` is block ``i``, frame ``f`` is
  block ``text_len + f``."""
  return np.concatenate([np.arange(layout.text_len),
                         layout.text_len + np.repeat(np.arange(layout.frames),
                                                     layout.tokens_per_frame)]).astype(np.int32)


def ardf_mask(layout: VideoLayout) -> np.ndarray:
  """``(length, length)`` bool AR-DF attention mask (True = attend): query ``i`` sees key
  ``j`` iff ``block(j) <= block(i)`` (causal across text tokens and frames, bidirectional
  within a frame)."""
  b = block_ids(layout)
  return b[None, :] <= b[:, None]


def mask_ratio(key: jax.Array, min_ratio: float = MIN_MASK_RATIO) -> jax.Array:
  """``max(cos(pi t / 2), min_ratio)`` with ``t ~ U(0, 1)``."""
  return jnp.maximum(jnp.cos(jnp.pi * jax.random.uniform(key) / 2), min_ratio)


def _spatial_mask(key: jax.Array, n: int, ratio: jax.Array) -> jax.Array:
  """A uniformly random set of ``round(ratio * n)`` of ``n`` positions, as a bool mask."""
  rank = jnp.argsort(jnp.argsort(jax.random.uniform(key, (n,))))
  return rank < jnp.round(ratio * n)


def tube_mask(key: jax.Array, layout: VideoLayout,
              min_ratio: float = MIN_MASK_RATIO) -> jax.Array:
  """Lumos-1's training mask ``(frames, tokens_per_frame)`` bool (True = masked): one
  spatial mask of ``round(r n)`` tokens, ``r = max(cos(pi t/2), min_ratio)``, repeated over
  every frame."""
  k_r, k_m = jax.random.split(key)
  m = _spatial_mask(k_m, layout.tokens_per_frame, mask_ratio(k_r, min_ratio))
  return jnp.broadcast_to(m, (layout.frames, layout.tokens_per_frame))


def frame_random_mask(key: jax.Array, layout: VideoLayout,
                      min_ratio: float = MIN_MASK_RATIO) -> jax.Array:
  """The ablation: the same ratio ``r`` per video, an independent spatial mask per frame."""
  k_r, k_m = jax.random.split(key)
  r = mask_ratio(k_r, min_ratio)
  keys = jax.random.split(k_m, layout.frames)
  return jax.vmap(lambda k: _spatial_mask(k, layout.tokens_per_frame, r))(keys)


MASKINGS = {"tube": tube_mask, "random": frame_random_mask}


def history_mask(n: int, ratio: float = MASK_HISTORY_RATIO) -> np.ndarray:
  """``(n,)`` bool: ``round(ratio * n)`` evenly spaced indices (``round(linspace(0, n - 1,
  m))``) masked, as a finished frame enters the KV cache."""
  if not 0.0 <= ratio <= 1.0:
    raise ValueError(f"mask_history_ratio must be in [0, 1], got {ratio!r}")
  m = int(round(ratio * n))
  out = np.zeros(n, bool)
  if m:
    out[np.round(np.linspace(0, n - 1, m)).astype(int)] = True
  return out


def _check_video(text: Any, video: Any, layout: VideoLayout, num_codes: int,
                 mask_id: int) -> None:
  if not isinstance(layout, VideoLayout):
    raise TypeError(f"layout must be a VideoLayout, got {type(layout).__name__}")
  if not isinstance(num_codes, int) or num_codes < 2:
    raise ValueError(f"num_codes must be an int >= 2, got {num_codes!r}")
  if not isinstance(mask_id, int) or 0 <= mask_id < num_codes:
    raise ValueError(f"mask_id must be an int outside the visual codes 0..{num_codes - 1}, "
                     f"got {mask_id!r}")
  if jnp.shape(text)[-1:] != (layout.text_len,) or jnp.ndim(text) != 2:
    raise ValueError(f"text must be (batch, text_len={layout.text_len}), got "
                     f"{jnp.shape(text)}")
  want = (jnp.shape(text)[0], layout.frames, layout.tokens_per_frame)
  if video is not None and tuple(jnp.shape(video)) != want:
    raise ValueError(f"video must be (batch, frames, rows * cols) = {want}, got "
                     f"{jnp.shape(video)}")


def _check_vocab(net: Any, num_codes: int, mask_id: int) -> None:
  """The codes and the [MASK] id must be token ids of the network (an id past the
  embedding would be read silently as garbage)."""
  if not isinstance(net, Net):
    raise TypeError(f"net must be a jaxlab.nn.Net holding a Transformer, got "
                    f"{type(net).__name__}")
  vocab = net.module().cfg.vocab_size
  if num_codes > vocab or mask_id >= vocab:
    raise ValueError(f"num_codes ({num_codes}) and mask_id ({mask_id}) must be token ids of "
                     f"the network's vocab_size={vocab}")


def _check_positions(positions: Any, layout: VideoLayout) -> None:
  shape = tuple(jnp.shape(positions))
  if len(shape) not in (1, 2) or shape[0] != layout.length:
    raise ValueError(f"positions must be ({layout.length},) or ({layout.length}, axes), got "
                     f"{shape}")


def _visual_logits(net: Net, tokens, positions, mask, num_codes):
  out = net.module().forward(tokens, positions=positions, mask=mask, causal=False)
  return out.logits[..., :num_codes]


def video_loss(net: Net, text: jax.Array, video: jax.Array, key: jax.Array,
               layout: VideoLayout, positions: jax.Array, *, num_codes: int, mask_id: int,
               masking: str = "tube", min_ratio: float = MIN_MASK_RATIO,
               z_weight: float = 1e-5, mask: jax.Array | None = None) -> tuple[jax.Array, dict]:
  r"""Lumos-1's training loss on a batch of tokenized videos.

  Each video gets a mask (``masking``: ``"tube"`` or ``"random"`` per frame); masked visual
  tokens become ``mask_id``; one forward pass with AR-DF attention; the loss is

  .. math::
    \frac{1}{|M|}\sum_{i \in M} \big[-\log \mathrm{softmax}(z_i)_{x_i}
      + \lambda_z (\log \textstyle\sum_v e^{z_{i,v}})^2\big],

  with ``z_i`` the logits restricted to the visual codes and ``M`` the masked tokens.

  Args:
    net: a :class:`Net` holding a :class:`~jaxlab.models.transformer.Transformer`.
    text: int ``(B, text_len)`` caption tokens.
    video: int ``(B, frames, rows * cols)`` visual codes.
    key: PRNG key for the masks.
    layout: the :class:`VideoLayout`.
    positions: ``(length,)`` or ``(length, 3)`` RoPE positions (:func:`mm_position_ids`).
    num_codes: visual codebook size (codes ``0..num_codes-1``).
    mask_id: the [MASK] token id.
    masking: ``"tube"`` (Lumos-1) or ``"random"`` (independent per frame).
    min_ratio: the floor of the mask ratio (0.7).
    z_weight: weight of the z-loss.
    mask: optional bool ``(B, frames, rows * cols)`` (True = masked) used instead of
      drawing one (``key`` and ``masking`` are then unused).

  Returns:
    ``(loss, info)`` with ``info["loss/ce"]`` and ``info["loss/mask_ratio"]``.
  """
  _check_video(text, video, layout, num_codes, mask_id)
  _check_vocab(net, num_codes, mask_id)
  _check_positions(positions, layout)
  if masking not in MASKINGS:
    raise ValueError(f"masking must be one of {tuple(MASKINGS)}, got {masking!r}")
  for name, v in (("min_ratio", min_ratio), ("z_weight", z_weight)):
    if isinstance(v, (int, float)) and not (v >= 0.0 and math.isfinite(v)
                                            and (name != "min_ratio" or v <= 1.0)):
      raise ValueError(f"{name} must be finite and >= 0{' and <= 1' * (name == 'min_ratio')},"
                       f" got {v!r}")
  b = video.shape[0]
  if mask is None:
    m = jax.vmap(lambda k: MASKINGS[masking](k, layout, min_ratio))(jax.random.split(key, b))
  elif tuple(jnp.shape(mask)) != tuple(jnp.shape(video)):
    raise ValueError(f"mask must have the video's shape {jnp.shape(video)}, got "
                     f"{jnp.shape(mask)}")
  else:
    m = jnp.asarray(mask, bool)
  m = m.reshape(b, -1)
  target = video.reshape(b, -1)
  tokens = jnp.concatenate([text, jnp.where(m, mask_id, target)], 1)
  logits = _visual_logits(net, tokens, positions, ardf_mask(layout), num_codes)
  logits = logits[:, layout.text_len:].astype(jnp.float32)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, target)
  z = jax.nn.logsumexp(logits, -1) ** 2
  w = m.astype(jnp.float32)
  denom = jnp.maximum(jnp.sum(w), 1.0)
  ce_mean = jnp.sum(ce * w) / denom
  loss = ce_mean + z_weight * jnp.sum(z * w) / denom
  return loss, {"loss/ce": ce_mean, "loss/mask_ratio": jnp.mean(w)}


def frame_cross_entropy(net: Net, text: jax.Array, video: jax.Array, layout: VideoLayout,
                        positions: jax.Array, frame: int, *, num_codes: int, mask_id: int,
                        mask_history_ratio: float = MASK_HISTORY_RATIO) -> jax.Array:
  """Per-video mean cross-entropy ``(B,)`` of frame ``frame``'s tokens, the frame fully
  masked and every earlier frame masked as it enters the cache at inference
  (:func:`history_mask`); later frames are invisible (AR-DF)."""
  _check_video(text, video, layout, num_codes, mask_id)
  _check_vocab(net, num_codes, mask_id)
  _check_positions(positions, layout)
  if not isinstance(frame, int) or not 0 <= frame < layout.frames:
    raise ValueError(f"frame must be an int in 0..{layout.frames - 1}, got {frame!r}")
  return _frame_ce(net, text, video, positions, layout, frame, num_codes, mask_id,
                   float(mask_history_ratio))


@functools.partial(jax.jit, static_argnums=(4, 6, 7, 8))
def _frame_ce(net, text, video, positions, layout, frame, num_codes, mask_id, hist_ratio):
  """``frame`` may be traced (vmap it over frames: one program)."""
  hist = jnp.asarray(history_mask(layout.tokens_per_frame, hist_ratio))
  f_idx = jnp.arange(layout.frames)[:, None]
  m = jnp.where(f_idx < frame, hist[None, :], f_idx >= frame)  # (F, n)
  b, n = video.shape[0], layout.tokens_per_frame
  tokens = jnp.concatenate([text, jnp.where(m, mask_id, video).reshape(b, -1)], 1)
  logits = _visual_logits(net, tokens, positions, ardf_mask(layout), num_codes)
  logits = jax.lax.dynamic_slice_in_dim(logits, layout.text_len + frame * n, n, 1)
  target = jax.lax.dynamic_index_in_dim(video, frame, 1, keepdims=False)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), target)
  return jnp.mean(ce, -1)


def later_frames_cross_entropy(net: Net, text: jax.Array, video: jax.Array,
                               layout: VideoLayout, positions: jax.Array, *, num_codes: int,
                               mask_id: int,
                               mask_history_ratio: float = MASK_HISTORY_RATIO) -> jax.Array:
  """:func:`frame_cross_entropy` of frames ``1..frames-1``, ``(B, frames - 1)``, in one
  program (vmapped over the frame)."""
  _check_video(text, video, layout, num_codes, mask_id)
  _check_vocab(net, num_codes, mask_id)
  _check_positions(positions, layout)
  history_mask(layout.tokens_per_frame, mask_history_ratio)  # validates the ratio
  return jax.vmap(lambda f: _frame_ce(net, text, video, positions, layout, f, num_codes,
                                      mask_id, float(mask_history_ratio)),
                  out_axes=-1)(jnp.arange(1, layout.frames))


def cosine_schedule(step: jax.Array, steps: int) -> jax.Array:
  """MaskGIT's share of tokens still masked after ``step`` (0-based) of ``steps``:
  ``cos(pi / 2 * (step + 1) / steps)``."""
  return jnp.cos(jnp.pi / 2 * (step + 1) / steps)


def maskgit_step(logits: jax.Array, x: jax.Array, key: jax.Array, step: jax.Array, steps: int,
                 mask_id: int, temperature: float, choice_temperature: float) -> jax.Array:
  """One MaskGIT round on ``x (B, n)`` given the visual ``logits (B, n, K)``: sample every
  masked token, keep the known ones, then re-mask the ``floor(n cos(pi/2 (s+1)/S))`` least
  confident new tokens (at least 1, at most all but one of those still masked; none in the
  last round; known tokens are never re-masked). Confidence:
  ``log p(sampled) + choice_temperature (1 - (s+1)/S) g``, ``g ~ Gumbel``; known tokens have
  infinite confidence."""
  k_tok, k_g = jax.random.split(key)
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
  if temperature == 0.0:
    tok = jnp.argmax(logp, -1)
  else:
    tok = jax.random.categorical(k_tok, logp / temperature)
  unknown = x == mask_id
  tok = jnp.where(unknown, tok, x).astype(x.dtype)
  sel = jnp.take_along_axis(logp, tok[..., None].astype(jnp.int32), -1)[..., 0]
  ratio = (step + 1) / steps
  conf = sel + choice_temperature * (1.0 - ratio) * jax.random.gumbel(k_g, sel.shape)
  conf = jnp.where(unknown, conf, jnp.inf)
  n = x.shape[-1]
  remaining = jnp.sum(unknown, -1, keepdims=True)
  mask_len = jnp.floor(n * cosine_schedule(step, steps)).astype(jnp.int32)
  mask_len = jnp.maximum(1, jnp.minimum(remaining - 1, mask_len))
  rank = jnp.argsort(jnp.argsort(conf, -1), -1)  # 0 = least confident
  remask = (rank < mask_len) & unknown & (step < steps - 1)
  return jnp.where(remask, mask_id, tok)


def generate_video(net: Net, text: jax.Array, key: jax.Array, layout: VideoLayout,
                   positions: jax.Array, *, num_codes: int, mask_id: int, steps: int = 8,
                   temperature: float = 1.0, choice_temperature: float = 4.5,
                   mask_history_ratio: float = MASK_HISTORY_RATIO,
                   first_frame: jax.Array | None = None) -> jax.Array:
  """Lumos-1's inference: frames one at a time, each by ``steps`` MaskGIT rounds against
  the KV cache, then written into the cache partially masked.

  Args:
    net: a :class:`Net` holding the transformer.
    text: int ``(B, text_len)`` captions.
    key: PRNG key.
    layout: the :class:`VideoLayout`.
    positions: the RoPE positions the model was trained with.
    num_codes: visual codebook size; only codes are predicted.
    mask_id: the [MASK] id.
    steps: MaskGIT rounds per frame (``1..rows * cols``).
    temperature: token sampling temperature (0: argmax).
    choice_temperature: scale of the Gumbel noise on the confidences (annealed by
      ``1 - (s + 1) / steps``).
    mask_history_ratio: share of a finished frame's tokens masked (evenly spaced) in the
      cache.
    first_frame: optional int ``(B, rows * cols)``: frame 0's known tokens (image to video;
      ``mask_id`` entries are generated by MaskGIT around the known ones, so a row of
      ``mask_id`` is text to video); the finished frame enters the cache like any other.

  Returns:
    int ``(B, frames, rows * cols)`` visual codes (unmasked).
  """
  _check_video(text, None, layout, num_codes, mask_id)
  _check_vocab(net, num_codes, mask_id)
  _check_positions(positions, layout)
  n = layout.tokens_per_frame
  if not isinstance(steps, int) or not 1 <= steps <= n:
    raise ValueError(f"steps must be an int in 1..{n} (rows * cols), got {steps!r}")
  for name, v in (("temperature", temperature), ("choice_temperature", choice_temperature)):
    if not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
      raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")
  history_mask(n, mask_history_ratio)  # validates the ratio
  if first_frame is not None and tuple(jnp.shape(first_frame)) != (text.shape[0], n):
    raise ValueError(f"first_frame must be (batch, rows * cols) = {(text.shape[0], n)}, got "
                     f"{jnp.shape(first_frame)}")
  return _generate(net, text, key, positions, first_frame, layout, num_codes, mask_id, steps,
                   float(temperature), float(choice_temperature), float(mask_history_ratio))


@functools.partial(jax.jit, static_argnums=(5, 6, 7, 8, 9, 10, 11))
def _generate(net, text, key, positions, first_frame, layout, num_codes, mask_id, steps,
              temperature, choice_temperature, hist_ratio):
  module = net.module()
  b, n, lt = text.shape[0], layout.tokens_per_frame, layout.text_len
  positions = jnp.asarray(positions)
  cache = init_cache(module.cfg, b, layout.length)
  if lt:  # the caption, causal
    cache = module.forward(text, positions=positions[:lt], cache=cache).cache
  hist = jnp.asarray(history_mask(n, hist_ratio))

  def frame_(cache, inp):  # one frame: MaskGIT rounds against the cache, then commit
    f, k_f = inp
    pos = jax.lax.dynamic_slice_in_dim(positions, lt + f * n, n, 0)

    def round_(x, inp):
      s, k = inp
      logits = module.forward(x, positions=pos, cache=cache, causal=False).logits
      return maskgit_step(logits[..., :num_codes], x, k, s, steps, mask_id, temperature,
                          choice_temperature), None

    x0 = jnp.full((b, n), mask_id, text.dtype)
    if first_frame is not None:  # image to video: frame 0's known tokens stay
      x0 = jnp.where(f == 0, first_frame.astype(x0.dtype), x0)
    x, _ = jax.lax.scan(round_, x0, (jnp.arange(steps), jax.random.split(k_f, steps)))
    # the finished frame enters the cache partially masked (bidirectional within itself)
    cache = module.forward(jnp.where(hist, mask_id, x), positions=pos, cache=cache,
                           causal=False).cache
    return cache, x

  _, frames = jax.lax.scan(frame_, cache, (jnp.arange(layout.frames),
                                           jax.random.split(key, layout.frames)))
  return jnp.swapaxes(frames, 0, 1)
