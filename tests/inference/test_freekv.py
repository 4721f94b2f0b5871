"""FreeKV's selection rules against hand-built cases and NumPy, and the decode hook against
dense decoding (a full budget is full attention; the default path is unchanged)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.inference import freekv as fk
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm

P = 16


def test_page_summaries_and_incremental_update():
  rng = np.random.default_rng(0)
  k = rng.normal(size=(2, 64, 3, 4)).astype(np.float32)  # (B, S, H, D), 4 pages
  kmax, kmin = fk.page_summaries(k, jnp.int32(37), P)
  paged = k.reshape(2, 4, P, 3, 4)
  np.testing.assert_array_equal(kmax[:, :, :2], paged[:, :2].max(2).swapaxes(1, 2))
  np.testing.assert_array_equal(kmin[:, :, 1], paged[:, 1].min(1))
  np.testing.assert_array_equal(kmax[:, :, 2], k[:, 32:37].max(1))  # filled part only
  assert np.all(np.asarray(kmax[:, :, 3]) == 0)  # an empty page
  # writing tokens 37..47 one at a time gives the summaries of 48 filled tokens
  for pos in range(37, 48):
    kmax, kmin = fk.update_summaries(kmax, kmin, k[:, pos], jnp.int32(pos), P)
  want = fk.page_summaries(k, jnp.int32(48), P)
  np.testing.assert_array_equal(kmax, want[0])
  np.testing.assert_array_equal(kmin, want[1])
  # a page's first token replaces whatever the page held
  kmax, kmin = fk.update_summaries(kmax, kmin, k[:, 48], jnp.int32(48), P)
  np.testing.assert_array_equal(kmax[:, :, 3], k[:, 48])


def test_group_scores_grouped_query_heads_and_groups():
  rng = np.random.default_rng(1)
  q = rng.normal(size=(1, 4, 8)).astype(np.float32)
  kmax = rng.normal(size=(1, 2, 3, 8)).astype(np.float32)  # 2 KV heads for 4 query heads
  kmin = kmax - np.abs(rng.normal(size=kmax.shape)).astype(np.float32)
  out = np.asarray(fk.group_scores(q, kmax, kmin, jnp.int32(40), page_size=P, group_size=2))
  # NumPy: head h reads KV head h // 2; softmax over the 3 filled pages of s / sqrt(D)
  s = np.stack([np.maximum(q[0, h] * kmax[0, h // 2], q[0, h] * kmin[0, h // 2]).sum(-1)
                for h in range(4)]) / np.sqrt(8)
  p = np.exp(s - s.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  np.testing.assert_allclose(out[0], p.reshape(2, 2, 3).mean(1), rtol=1e-5)
  # unfilled pages score 0; every group's scores sum to 1
  out = np.asarray(fk.group_scores(q, kmax, kmin, jnp.int32(17), page_size=P, group_size=4))
  assert out.shape == (1, 1, 3) and out[0, 0, 2] == 0
  np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="must divide the query heads"):
    fk.group_scores(q, kmax, kmin, jnp.int32(40), page_size=P, group_size=3)


def test_select_pages_keeps_sink_and_recent_then_the_top():
  scores = jnp.array([[0.05, 0.3, 0.1, 0.4, 0.02, 0.13, 0.0, 0.0]])  # 6 of 8 pages filled
  kw = dict(page_size=P, max_select=4, sink_pages=1, recent_pages=1)
  pages, count = fk.select_pages(scores, jnp.int32(81), 4, **kw)
  # sink 0 and recent 5 first, then 3 (0.4) and 1 (0.3)
  assert sorted(np.asarray(pages[0, :2]).tolist()) == [0, 5]
  assert np.asarray(pages[0, 2:]).tolist() == [3, 1] and int(count[0]) == 4
  # a traced smaller budget keeps a prefix; sink + recent alone
  pages, count = jax.jit(lambda n: fk.select_pages(scores, jnp.int32(81), n, **kw))(2)
  assert sorted(np.asarray(pages[0, :int(count[0])]).tolist()) == [0, 5]
  # fewer filled pages than the budget: all of them
  pages, count = fk.select_pages(scores, jnp.int32(20), 4, **kw)
  assert int(count[0]) == 2 and sorted(np.asarray(pages[0, :2]).tolist()) == [0, 1]


def test_query_cosine_group_mean():
  q = jnp.array([[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 0.0]]])
  prev = jnp.array([[[2.0, 0.0], [0.0, -1.0], [1.0, 0.0], [0.0, 0.0]]])
  np.testing.assert_allclose(fk.query_cosine(q, prev, 1), [[1.0, -1.0, 1 / np.sqrt(2), 0.0]],
                             rtol=1e-6)
  np.testing.assert_allclose(fk.query_cosine(q, prev, 2), [[0.0, 0.5 / np.sqrt(2)]], rtol=1e-6)


def _step_inputs(seed=2, b=1, h=2, s=96, d=8):
  rng = np.random.default_rng(seed)
  k = rng.normal(size=(b, s, h, d)).astype(np.float32)
  v = rng.normal(size=(b, s, h, d)).astype(np.float32)
  q = rng.normal(size=(b, h, d)).astype(np.float32)
  return q, k, v


def _state(cfg, k, q_prev, position, tau):
  kmax, kmin = fk.page_summaries(k, jnp.int32(position), cfg.page_size)
  b, h = q_prev.shape[:2]
  g = h // cfg.group_size
  return fk.FreeKVState(jnp.asarray(q_prev), kmax, kmin, jnp.float32(tau),
                        jnp.int32(cfg.num_select), jnp.zeros((b, g), bool),
                        jnp.zeros((b, g), jnp.int32), jnp.zeros((b, g)))


def test_step_reuses_previous_pages_and_corrects_below_tau():
  """Head 0's previous query equals its query (cosine 1), head 1's is its negation (-1)."""
  cfg = fk.FreeKVConfig(page_size=P, budget=32, sink_pages=0, recent_pages=1)
  q, k, v = _step_inputs()
  k = 0.1 * k
  k[0, 16:32, 1] = 3 * q[0, 1]  # head 1: page 1 matches q, page 3 matches -q
  k[0, 48:64, 1] = -3 * q[0, 1]
  q_prev = np.stack([q[:, 0], -q[:, 1]], 1)
  pos = jnp.int32(90)

  def run(tau):
    return fk.freekv_step(cfg, q, k, v, pos, _state(cfg, k, q_prev, 90, tau))

  def selected(query):
    kmax, kmin = fk.update_summaries(*fk.page_summaries(k, pos, P), k[:, 90], pos, P)
    sc = fk.group_scores(query, kmax, kmin, pos + 1, page_size=P, group_size=1)
    return fk.select_pages(sc, pos + 1, 2, page_size=P, max_select=2, sink_pages=0,
                           recent_pages=1)[0]

  def attend(pages):
    return fk.page_attention(q, k, v, pages, jnp.full((1, 2), 2, jnp.int32), pos + 1,
                             page_size=P, kv_layout="bshd", use_kernel=False)

  exact, reuse = attend(selected(q)), attend(selected(jnp.asarray(q_prev)))
  assert np.asarray(selected(q))[0, 1].tolist() == [5, 1]  # recent page, then the match
  assert np.asarray(selected(jnp.asarray(q_prev)))[0, 1].tolist() == [5, 3]
  assert not np.allclose(exact[0, 1], reuse[0, 1])
  y, st = run(0.9)
  assert np.asarray(st.corrected).tolist() == [[False, True]]
  np.testing.assert_allclose(y[0, 0], reuse[0, 0], atol=1e-6)  # = exact: same query
  np.testing.assert_allclose(y[0, 1], exact[0, 1], atol=1e-6)  # corrected
  y, st = run(-math.inf)  # reuse without correction
  assert not np.asarray(st.corrected).any()
  np.testing.assert_allclose(y, reuse, atol=1e-6)
  y, st = run(math.inf)  # exact per-step selection
  assert np.asarray(st.corrected).all()
  np.testing.assert_allclose(y, exact, atol=1e-6)
  np.testing.assert_array_equal(st.q_prev, q)
  assert np.asarray(st.attended).tolist() == [[2, 2]]


def _net():
  cfg = tfm.TransformerConfig(vocab_size=40, d_model=32, num_heads=4, num_layers=2, seq_len=96)
  return tfm.create(cfg, jax.random.key(0))


def _decode(net, tokens, prompt_len, max_len, hook=None, tau=None, num_select=None):
  if hook is None:
    logits, cache = decoding.prefill(net, tokens[:, :prompt_len], max_len)
  else:
    logits, cache, state = decoding.prefill(net, tokens[:, :prompt_len], max_len, attend=hook)
    state = fk.with_knobs(state, tau=tau, num_select=num_select)
  out, corrected = [logits], []
  for i in range(prompt_len, tokens.shape[1]):
    if hook is None:
      logits, cache = decoding.decode_step(net, tokens[:, i:i + 1], cache)
    else:
      logits, cache, state = decoding.decode_step(net, tokens[:, i:i + 1], cache, attend=hook,
                                                  attend_state=state)
      corrected.append(np.asarray(state.corrected))
    out.append(logits)
  return np.stack(out), corrected


def test_full_budget_decode_equals_full_attention():
  net = _net()
  tokens = jax.random.randint(jax.random.key(1), (2, 60), 0, 40)
  full, _ = _decode(net, tokens, 40, 64)
  hook = fk.FreeKVAttention(fk.FreeKVConfig(page_size=P, budget=64, group_size=2))
  for tau in (math.inf, 0.9, -math.inf):  # every page selected, whatever the query
    logits, corrected = _decode(net, tokens, 40, 64, hook, tau)
    np.testing.assert_allclose(logits, full, atol=2e-6)
    assert corrected[0].shape == (2, 2, 2)  # (layers, batch, groups)
  np.testing.assert_array_equal(logits[0], full[0])  # the prefill is the dense one
  # a budget of two pages of four changes the decoded logits (the comparison can fail)
  small = fk.FreeKVAttention(fk.FreeKVConfig(page_size=P, budget=32))
  logits, corrected = _decode(net, tokens, 40, 64, small, 0.9)
  assert np.abs(logits[1:] - full[1:]).max() > 1e-3
  assert 0 < np.mean(corrected) <= 1


def test_default_forward_unchanged_by_the_hook_point():
  """An identity hook (the library's attention) is bit-identical to no hook: the hook sits
  exactly where attention was, and without one nothing else changes."""
  net = _net()
  module = net.module()
  tokens = jax.random.randint(jax.random.key(2), (2, 12), 0, 40)

  def identity(q, k, v, *, mask, bias, start, state):
    del start, state
    return tfm.attention(q, k, v, mask=mask, bias=bias), None

  cache = tfm.init_cache(module.cfg, 2, 16)
  plain = module.forward(tokens, cache=cache)
  hooked = module.forward(tokens, cache=cache, attend=identity)
  np.testing.assert_array_equal(plain.logits, hooked.logits)
  np.testing.assert_array_equal(plain.cache.k, hooked.cache.k)
  assert plain.attend_state is None and hooked.attend_state is None
  # the jitted decode step too, with and without the hook
  logits, cache = decoding.decode_step(net, tokens[:, :1], plain.cache)
  hooked, cache_h, state = decoding.decode_step(net, tokens[:, :1], plain.cache,
                                                attend=identity)
  np.testing.assert_array_equal(logits, hooked)
  np.testing.assert_array_equal(cache.v, cache_h.v)
  assert state is None and int(cache.length) == 13
  with pytest.raises(ValueError, match="attend needs a cache"):
    module.forward(tokens, attend=identity)
  with pytest.raises(ValueError, match="attend_state was given without"):
    module.forward(tokens, cache=cache, attend_state=jnp.zeros(2))


def test_bad_settings_raise():
  with pytest.raises(ValueError, match="budget must be a multiple of page_size"):
    fk.FreeKVConfig(page_size=16, budget=40)
  with pytest.raises(ValueError, match="must cover sink_pages"):
    fk.FreeKVConfig(page_size=16, budget=16, sink_pages=1, recent_pages=1)
  with pytest.raises(ValueError, match="page_size must be a positive int"):
    fk.FreeKVConfig(page_size=0)
  with pytest.raises(TypeError, match="tau must be a float"):
    fk.FreeKVConfig(tau="0.9")
  net = _net()
  tokens = jnp.zeros((1, 20), jnp.int32)
  with pytest.raises(ValueError, match="must be a multiple of page_size"):
    decoding.prefill(net, tokens, 40, attend=fk.FreeKVAttention())
  with pytest.raises(ValueError, match="group_size = 3 must divide the heads"):
    decoding.prefill(net, tokens, 48, attend=fk.FreeKVAttention(fk.FreeKVConfig(group_size=3)))
  hook = fk.FreeKVAttention(fk.FreeKVConfig(budget=32))
  _, cache, state = decoding.prefill(net, tokens, 48, attend=hook)
  with pytest.raises(ValueError, match="one token per step"):
    decoding.decode_step(net, tokens[:, :2], cache, attend=hook, attend_state=state)
