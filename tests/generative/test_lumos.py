"""Lumos-1: MM-RoPE positions and frequency split, AR-DF mask, tube masks, MaskGIT, decoding."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.generative import lumos
from jaxlab.models import transformer
from jaxlab.models.transformer import TransformerConfig


def test_mm_position_ids_hand_worked():
  """Paper strides 4 x 8 x 8: 3 text tokens, 2 frames of 1 x 2 tokens; P0 = 3."""
  lay = lumos.VideoLayout(text_len=3, frames=2, rows=1, cols=2, strides=(4, 8, 8))
  want = [[0, 0, 0], [1, 1, 1], [2, 2, 2],  # text: (i, i, i)
          [3, 3, 3], [3, 3, 11],  # frame 0: (P0, P0 + 8r, P0 + 8c)
          [7, 3, 3], [7, 3, 11]]  # frame 1: t = P0 + 4
  np.testing.assert_array_equal(lumos.mm_position_ids(lay), want)
  # our tokenizer's strides (1, 2, 2): 2 text tokens, 2 frames of 2 x 2
  lay = lumos.VideoLayout(text_len=2, frames=2, rows=2, cols=2, strides=(1, 2, 2))
  want = [[0, 0, 0], [1, 1, 1],
          [2, 2, 2], [2, 2, 4], [2, 4, 2], [2, 4, 4],
          [3, 2, 2], [3, 2, 4], [3, 4, 2], [3, 4, 4]]
  np.testing.assert_array_equal(lumos.mm_position_ids(lay), want)
  np.testing.assert_array_equal(lumos.flat_position_ids(lay), np.arange(10))


def test_mm_rope_frequency_assignment():
  block = [0, 0, 0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2]  # {0..3} t, {4,5,8,9,12,13} h
  assert lumos.mm_rope_axes(16) == tuple(block)
  assert lumos.mm_rope_axes(32) == tuple(block + block)
  axes = np.array(lumos.mm_rope_axes(32))
  assert [int((axes == a).sum()) for a in range(3)] == [8, 12, 12]  # 2 : 3 : 3
  assert set(np.flatnonzero(axes == 2) % 16) == {6, 7, 10, 11, 14, 15}
  # h and w each reach from the first block's mid frequencies to the last block's lowest
  assert np.flatnonzero(axes == 1).max() == 29 and np.flatnonzero(axes == 2).max() == 31
  assert lumos.contiguous_sections(16) == (4, 6, 6)
  with pytest.raises(ValueError, match="multiple of 16"):
    lumos.mm_rope_axes(24)


def test_mm_rope_is_1d_rope_on_text_and_rotates_by_axis():
  x = jax.random.normal(jax.random.key(0), (1, 4, 1, 32))
  lay = lumos.VideoLayout(text_len=2, frames=1, rows=1, cols=2, strides=(1, 2, 2))
  pos = lumos.mm_position_ids(lay)
  axes = lumos.mm_rope_axes(16)
  mm = transformer.rope(x, jnp.asarray(pos), 100.0, axes=axes)
  flat = transformer.rope(x, jnp.arange(4), 100.0)
  np.testing.assert_allclose(mm[:, :2], flat[:, :2], rtol=1e-6, atol=1e-6)  # text tokens
  # the two visual tokens differ in w only: pairs of axis t and h rotate alike
  same = np.array([a != 2 for a in axes])
  w = 100.0 ** (-np.arange(16) / 16)
  z = np.asarray(x[0, 2:, 0, :16] + 1j * x[0, 2:, 0, 16:])
  p = pos[2:, list(axes)]  # (2, 16)
  ref = z * np.exp(1j * p * w)
  np.testing.assert_allclose(np.asarray(mm[0, 2:, 0, :16]), ref.real, rtol=1e-5, atol=1e-5)
  assert np.all(p[0, same] == p[1, same]) and np.all(p[1, ~same] - p[0, ~same] == 2)


def test_pair_positions_reproduce_rope_axes_in_the_model():
  lay = lumos.VideoLayout(text_len=2, frames=2, rows=2, cols=2, strides=(1, 2, 2))
  pos = jnp.asarray(lumos.mm_position_ids(lay))
  mk = lambda axes: transformer.create(TransformerConfig(  # noqa: E731
      vocab_size=20, d_model=32, num_heads=1, num_layers=1, seq_len=lay.length,
      rope_base=100.0, rope_axes=axes), jax.random.key(0))
  tok = jax.random.randint(jax.random.key(1), (2, lay.length), 0, 20)
  run = jax.jit(lambda net, p: net(tok, positions=p))
  ref = run(mk(lumos.mm_rope_axes(16)), pos)
  per_pair = mk(tuple(range(16)))
  ours = run(per_pair, lumos.pair_positions(pos, lumos.mm_rope_axes(16), 16))
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
  # flat positions on every pair: plain 1-D RoPE (rope_axes=None, default positions)
  flat = transformer.create(TransformerConfig(vocab_size=20, d_model=32, num_heads=1,
                                              num_layers=1, seq_len=lay.length,
                                              rope_base=100.0), jax.random.key(0))
  np.testing.assert_allclose(
      run(per_pair, lumos.pair_positions(jnp.arange(lay.length), None, 16)),
      run(flat, jnp.arange(lay.length)), rtol=1e-5, atol=1e-5)


def test_ardf_mask_hand_built():
  lay = lumos.VideoLayout(text_len=2, frames=2, rows=1, cols=2)
  want = np.array([[1, 0, 0, 0, 0, 0],
                   [1, 1, 0, 0, 0, 0],
                   [1, 1, 1, 1, 0, 0],  # frame 0 sees the text and all of itself
                   [1, 1, 1, 1, 0, 0],
                   [1, 1, 1, 1, 1, 1],
                   [1, 1, 1, 1, 1, 1]], bool)
  np.testing.assert_array_equal(lumos.ardf_mask(lay), want)


def test_tube_mask_properties():
  lay = lumos.VideoLayout(text_len=0, frames=3, rows=10, cols=10)
  keys = jax.random.split(jax.random.key(0), 4000)
  tube = np.asarray(jax.jit(jax.vmap(lambda k: lumos.tube_mask(k, lay)))(keys))
  assert tube.shape == (4000, 3, 100)
  assert np.all(tube == tube[:, :1])  # one spatial mask repeated over frames
  count = tube[:, 0].sum(-1)
  assert count.min() >= 70 and count.max() <= 100  # r = max(cos(pi t / 2), 0.7)
  # P(round(100 r) == 70) = P(cos(pi t/2) < 0.705) = 1 - 2 arccos(0.705) / pi
  p = 1 - 2 * math.acos(0.705) / math.pi
  assert abs(np.mean(count == 70) - p) <= 5 * math.sqrt(p * (1 - p) / 4000)
  # E[count] for r > 0.7: the density of r = cos(pi t / 2) is 2 / (pi sqrt(1 - r^2))
  r = np.linspace(0.705, 1.0, 200_001)[:-1]
  dens = 2 / (np.pi * np.sqrt(1 - r**2))
  mean_hi = np.trapezoid(np.round(100 * r) * dens, r) / np.trapezoid(dens, r)
  big = count[count > 70]
  assert abs(big.mean() - mean_hi) <= 5 * big.std() / math.sqrt(big.size) + 0.5
  # random per-frame masks: the same count in every frame, different positions
  rnd = np.asarray(jax.vmap(lambda k: lumos.frame_random_mask(k, lay))(keys[:200]))
  assert np.all(rnd.sum(-1) == rnd[:, :1].sum(-1))
  assert np.mean(np.all(rnd == rnd[:, :1], axis=(1, 2))) < 0.05


def test_history_mask_evenly_spaced():
  np.testing.assert_array_equal(lumos.history_mask(10, 0.5),
                                [1, 0, 1, 0, 1, 0, 0, 1, 0, 1])  # round(linspace(0, 9, 5))
  assert lumos.history_mask(64, 0.7).sum() == 45
  assert not lumos.history_mask(5, 0.0).any() and lumos.history_mask(5, 1.0).all()
  with pytest.raises(ValueError, match="mask_history_ratio"):
    lumos.history_mask(5, 1.5)


def test_maskgit_step_scripted():
  """No noise (choice_temperature 0, argmax): step 0 of 2 keeps n - floor(n cos(pi/4))."""
  logits = jnp.log(jnp.array([[[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.55, 0.45]]]))
  x = jnp.full((1, 4), 7)
  out = lumos.maskgit_step(logits, x, jax.random.key(0), jnp.array(0), 2, 7, 0.0, 0.0)
  # confidences 0.9, 0.6, 0.8, 0.55: floor(4 cos(pi / 4)) = 2 least confident re-masked
  np.testing.assert_array_equal(out, [[0, 7, 1, 7]])
  last = lumos.maskgit_step(logits, out, jax.random.key(0), jnp.array(1), 2, 7, 0.0, 0.0)
  np.testing.assert_array_equal(last, [[0, 1, 1, 0]])  # the last round fills everything
  # known tokens are never re-masked, at least one new token is kept per round
  part = jnp.array([[1, 7, 7, 7]])
  out = lumos.maskgit_step(logits, part, jax.random.key(0), jnp.array(0), 8, 7, 0.0, 0.0)
  assert int(out[0, 0]) == 1 and int(jnp.sum(out != 7)) >= 2


@jax.jit
def _fwd(net, seq, pos, mask):
  return net(seq, positions=pos, mask=mask, causal=False)


def _net(lay, layers=1):
  cfg = TransformerConfig(vocab_size=24, d_model=32, num_heads=1, num_layers=layers,
                          seq_len=lay.length, rope_base=100.0,
                          rope_axes=lumos.mm_rope_axes(16))
  return transformer.create(cfg, jax.random.key(3))


def test_generation_with_cache_matches_full_forward_reference():
  """One greedy MaskGIT round per frame (the whole frame at once): the KV-cache decoder
  equals full AR-DF forward passes over [text, partially masked history, masked frame]."""
  lay = lumos.VideoLayout(text_len=2, frames=3, rows=2, cols=3, strides=(1, 2, 2))
  net, pos = _net(lay, 2), jnp.asarray(lumos.mm_position_ids(lay))
  text = jnp.array([[20, 21], [22, 23]])
  kw = dict(num_codes=16, mask_id=16)
  t2v = jnp.full((2, 6), 16)  # an all-[MASK] first frame: text to video
  out = lumos.generate_video(net, text, jax.random.key(0), lay, pos, steps=1, temperature=0.0,
                             mask_history_ratio=0.5, first_frame=t2v, **kw)
  n, hist = lay.tokens_per_frame, lumos.history_mask(6, 0.5)
  frames = np.full((2, lay.frames, n), 16)
  for f in range(lay.frames):
    seq = jnp.concatenate([text, jnp.asarray(frames.reshape(2, -1))], 1)
    logits = _fwd(net, seq, pos, lumos.ardf_mask(lay))
    tok = np.asarray(jnp.argmax(logits[:, 2 + f * n: 2 + (f + 1) * n, :16], -1))
    np.testing.assert_array_equal(out[:, f], tok)
    frames[:, f] = np.where(hist, 16, tok)
  # image to video (the same compiled program): frame 0 is the given one; same key -> same
  first = jnp.arange(12).reshape(2, 6) % 16
  gen = lambda f: lumos.generate_video(net, text, jax.random.key(1), lay, pos, steps=1,  # noqa: E731
                                       temperature=0.0, mask_history_ratio=0.5, first_frame=f,
                                       **kw)
  i2v = gen(first)
  np.testing.assert_array_equal(i2v[:, 0], first)
  assert int(i2v.max()) < 16
  np.testing.assert_array_equal(i2v, gen(first))
  # a partly known first frame: known tokens stay, [MASK] entries are generated
  out = gen(first.at[:, ::2].set(16))
  np.testing.assert_array_equal(out[:, 0, 1::2], first[:, 1::2])
  assert int(out.max()) < 16


def test_video_loss_and_ardf_attention():
  lay = lumos.VideoLayout(text_len=2, frames=2, rows=2, cols=2, strides=(1, 2, 2))
  net, pos = _net(lay), jnp.asarray(lumos.mm_position_ids(lay))
  text = jnp.array([[20, 21]])
  video = jnp.array([[[1, 2, 3, 4], [5, 6, 7, 8]]])
  mask = jnp.array([[[True, False, False, True], [False, True, True, False]]])
  loss, info = jax.jit(lambda net, m: lumos.video_loss(
      net, text, video, jax.random.key(0), lay, pos, num_codes=16, mask_id=16, mask=m,
      z_weight=0.0))(net, mask)
  seq = jnp.array([[20, 21, 16, 2, 3, 16, 5, 16, 16, 8]])
  logits = _fwd(net, seq, pos, lumos.ardf_mask(lay))[0, 2:, :16]
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, video.reshape(-1))
  np.testing.assert_allclose(loss, ce[np.asarray(mask.reshape(-1))].mean(), rtol=1e-5)
  np.testing.assert_allclose(info["loss/mask_ratio"], 0.5)
  # AR-DF: a later frame does not change frame 0; a token of the same frame does
  fwd = lambda s: _fwd(net, s, pos, lumos.ardf_mask(lay))  # noqa: E731
  later, same = seq.at[0, 7].set(9), seq.at[0, 3].set(9)
  np.testing.assert_allclose(fwd(later)[0, :6], fwd(seq)[0, :6], rtol=1e-6, atol=1e-6)
  assert float(jnp.abs(fwd(same)[0, 2] - fwd(seq)[0, 2]).max()) > 1e-4
  # per-frame CE: frame 1 fully masked, frame 0 half masked (evenly spaced)
  ce1 = lumos.later_frames_cross_entropy(net, text, video, lay, pos, num_codes=16, mask_id=16,
                                         mask_history_ratio=0.5)
  h = lumos.history_mask(4, 0.5)
  seq1 = jnp.array([[20, 21, *np.where(h, 16, [1, 2, 3, 4]), 16, 16, 16, 16]])
  lg = _fwd(net, seq1, pos, lumos.ardf_mask(lay))[0, 6:, :16]
  np.testing.assert_allclose(ce1[:, 0], optax.softmax_cross_entropy_with_integer_labels(
      lg, video[0, 1]).mean()[None], rtol=1e-5)


def test_bad_input():
  lay = lumos.VideoLayout(text_len=2, frames=2, rows=2, cols=2)
  net, pos = _net(lay), jnp.asarray(lumos.mm_position_ids(lay))
  text, video = jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2, 4), jnp.int32)
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="mask_id"):
    lumos.video_loss(net, text, video, key, lay, pos, num_codes=16, mask_id=3)
  with pytest.raises(ValueError, match="video"):
    lumos.video_loss(net, text, video[:, :1], key, lay, pos, num_codes=16, mask_id=16)
  with pytest.raises(ValueError, match="masking"):
    lumos.video_loss(net, text, video, key, lay, pos, num_codes=16, mask_id=16, masking="x")
  with pytest.raises(ValueError, match="positions"):
    lumos.video_loss(net, text, video, key, lay, pos[:-1], num_codes=16, mask_id=16)
  with pytest.raises(ValueError, match="steps"):
    lumos.generate_video(net, text, key, lay, pos, num_codes=16, mask_id=16, steps=5)
  with pytest.raises(ValueError, match="temperature"):
    lumos.generate_video(net, text, key, lay, pos, num_codes=16, mask_id=16, steps=4,
                         temperature=-1.0)
  with pytest.raises(ValueError, match="frame"):
    lumos.frame_cross_entropy(net, text, video, lay, pos, 2, num_codes=16, mask_id=16)
  with pytest.raises(ValueError, match="strides"):
    lumos.VideoLayout(text_len=1, frames=1, rows=1, cols=1, strides=(1, 2))
  with pytest.raises(ValueError, match="frames"):
    lumos.VideoLayout(text_len=1, frames=0, rows=1, cols=1)
  with pytest.raises(TypeError, match="layout"):
    lumos.video_loss(net, text, video, key, "layout", pos, num_codes=16, mask_id=16)
