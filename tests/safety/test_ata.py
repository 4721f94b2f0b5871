"""ATA against references: the masks on hand-built spans, the active-subtask score against
its formula written as loops, the entropy gate and the structure rules on hand-built
cases, the steering hook against the toolkit's attention, and ATA decoding with no head
selected against the toolkit's greedy decoder."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import subtasks as st
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.safety import ata

A = 2.0
SPANS = np.array([-1, 0, 0, 1, 1, -1, 2])  # filler, T0 T0, T1 T1, filler, T2


def test_exclusive_pairs_per_structure():
  np.testing.assert_array_equal(ata.exclusive_pairs(3, ata.PARALLEL), ~np.eye(3, dtype=bool))
  np.testing.assert_array_equal(ata.exclusive_pairs(3, ata.BRANCH), ~np.eye(3, dtype=bool))
  np.testing.assert_array_equal(ata.exclusive_pairs(3, ata.CHAIN),
                                [[0, 1, 1], [0, 0, 1], [0, 0, 0]])
  with pytest.raises(ValueError, match="structure"):
    ata.exclusive_pairs(3, 7)


def test_mutual_mask_on_hand_built_spans():
  # Parallel: a query in T_i never reads a key in T_j != T_i; filler is untouched
  got = np.asarray(jax.jit(ata.mutual_bias)(jnp.asarray(SPANS), ata.exclusive_pairs(3, 2), A))
  want = np.zeros((7, 7))
  for q, k in [(1, 3), (1, 4), (2, 3), (2, 4), (1, 6), (2, 6), (3, 1), (3, 2), (4, 1), (4, 2),
               (3, 6), (4, 6), (6, 1), (6, 2), (6, 3), (6, 4)]:
    want[q, k] = -A
  np.testing.assert_array_equal(got, want)
  # Chain: T_i only must not read later steps; batched rows with their own matrices
  chain = ata.mutual_bias(jnp.stack([jnp.asarray(SPANS)] * 2),
                          jnp.stack([ata.exclusive_pairs(3, ata.CHAIN),
                                     np.zeros((3, 3), bool)]), A)
  want_chain = np.where((SPANS[:, None] >= 0) & (SPANS[None] > SPANS[:, None]), -A, 0.0)
  np.testing.assert_array_equal(chain[0], want_chain)
  np.testing.assert_array_equal(chain[1], np.zeros((7, 7)))


def test_dynamic_mask_on_hand_built_spans():
  span = jnp.asarray(np.stack([SPANS] * 3))
  got = ata.dynamic_bias(span, jnp.array([0, 2, -1]), jnp.asarray(ata.exclusive_pairs(3, 2)), A)
  np.testing.assert_array_equal(got[0], [0, 0, 0, -A, -A, 0, -A])  # key T0: hide T1, T2
  np.testing.assert_array_equal(got[1], [0, -A, -A, -A, -A, 0, 0])  # key T2
  np.testing.assert_array_equal(got[2], np.zeros(7))  # no key yet: no mask


def _score_loops(attn, span, t, m):
  """The paper's formula as written: (1/|T_i|) sum_k 1/(t-k) sum_{k<=q<=t} A(q, k)."""
  out = np.zeros(m)
  for i in range(m):
    ks = [k for k in range(len(span)) if span[k] == i]
    out[i] = np.mean([sum(attn[q, k] for q in range(k, t + 1)) / (t - k) for k in ks])
  return out


def test_active_score_against_its_formula():
  rng = np.random.default_rng(0)
  s, t = 10, 8
  logits = rng.normal(size=(s, s))
  attn = np.where(np.tril(np.ones((s, s))) > 0, np.exp(logits), 0)
  attn /= attn.sum(1, keepdims=True)
  span = np.array([0, 0, 1, 1, 1, -1, 2, -1, -1, -1])
  cols = attn[:t + 1].sum(0)  # column sums over the queries up to t
  got = jax.jit(ata.active_scores, static_argnums=3)(jnp.asarray(cols)[None],
                                                     jnp.asarray(span)[None], t, 3)
  np.testing.assert_allclose(got[0], _score_loops(attn, span, t, 3), rtol=1e-5)
  # a hand case: every query q >= 2 puts mass 1 on key 2 (span 1); t = 4
  hand = np.zeros((5, 5))
  hand[2:, 2] = 1.0
  cols = hand.sum(0)
  got = ata.active_scores(jnp.asarray(cols)[None], jnp.array([[0, 0, 1, -1, -1]]), 4, 2)
  np.testing.assert_allclose(got[0], [0.0, 3.0 / 2.0])  # 3 queries on key 2, t - k = 2


def test_entropy_gate():
  scores = jnp.array([[1.0, 1.0, 1.0, 0.0], [5.0, 0.1, 0.1, 0.0], [2.0, 0.0, 0.0, 0.0],
                      [0.3, 0.7, 0.0, 0.0]])
  p, h, accept, cand = ata.entropy_gate(scores, jnp.array([3, 3, 1, 2]))
  np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(h[0], np.log(3), rtol=1e-6)  # uniform: H = log m, refused
  q = np.array([5.0, 0.1, 0.1]) / 5.2
  np.testing.assert_allclose(h[1], -(q * np.log(q)).sum(), rtol=1e-5)
  h3 = -(0.3 * np.log(0.3) + 0.7 * np.log(0.7))  # 0.611 > 0.5 log 2 = 0.347: refused
  np.testing.assert_allclose(h[3], h3, rtol=1e-5)
  np.testing.assert_array_equal(accept, [False, True, True, False])  # m = 1: always open
  np.testing.assert_array_equal(cand, [0, 0, 0, 1])


def test_structure_rules():
  prev = jnp.array([-1, 0, 2, 2, 1, -1])
  cand = jnp.array([1, 2, 1, 3, 0, 2])
  acc = jnp.array([True, True, True, True, True, False])
  for structure in (ata.CHAIN, ata.PARALLEL):  # forward only; a refused switch keeps prev
    np.testing.assert_array_equal(ata.update_key(prev, cand, acc, structure),
                                  [1, 2, 2, 3, 1, -1])
  # Branch: the first accepted choice, then locked
  np.testing.assert_array_equal(ata.update_key(prev, cand, acc, ata.BRANCH),
                                [1, 0, 2, 2, 1, -1])


def test_head_scores_and_selection():
  # L = 1, B = 1, H = 3, T = S = 4; keys 0, 1 are span 0; query 3 is answering span 0
  attn = np.zeros((1, 1, 3, 4, 4))
  attn[0, 0, 0, 3] = [0.5, 0.5, 0, 0]  # all on the gold span
  attn[0, 0, 1, 3] = [0.25, 0, 0.75, 0]
  attn[0, 0, 2, 3] = [0, 0, 0, 1.0]
  attn[0, 0, :, 2] = [0.5, 0.5, 0, 0]  # query 2 is not scored
  sc = ata.head_scores(jnp.asarray(attn), jnp.array([[-1, -1, -1, 0]]),
                       jnp.array([[0, 0, -1, -1]]))
  np.testing.assert_allclose(sc, [[1.0, 0.25, 0.0]])
  np.testing.assert_array_equal(ata.select_heads(sc, 2), [[1, 1, 0]])
  with pytest.raises(ValueError, match="k must be"):
    ata.select_heads(sc, 4)
  r = ata.random_heads(jax.random.key(0), (2, 4), 3)
  assert r.shape == (2, 4) and float(r.sum()) == 3


def test_steering_hook_against_toolkit_attention():
  k1, k2, k3, k4 = jax.random.split(jax.random.key(1), 4)
  q, k, v = (jax.random.normal(kk, (2, 5, 3, 4)) for kk in (k1, k2, k3))
  bias = jax.random.normal(k4, (2, 1, 5, 5))
  mask = jnp.tril(jnp.ones((5, 5), bool))
  sel = jnp.array([1.0, 0.0, 1.0])
  y, plain = ata._steered_attention(q, k, v, mask=mask, bias=bias, start=0, state=sel)
  with_bias = tfm.attention(q, k, v, mask=mask, bias=bias)
  without = tfm.attention(q, k, v, mask=mask)
  np.testing.assert_allclose(y[:, :, 0], with_bias[:, :, 0], atol=1e-5)
  np.testing.assert_allclose(y[:, :, 2], with_bias[:, :, 2], atol=1e-5)
  np.testing.assert_allclose(y[:, :, 1], without[:, :, 1], atol=1e-5)
  _, w = tfm.attention(q, k, v, mask=mask, return_weights=True)
  np.testing.assert_allclose(plain, w, atol=1e-6)  # the score reads the unsteered weights


def _net():
  cfg = tfm.TransformerConfig(st.VOCAB, 16, 2, 1, 32)
  return tfm.create(cfg, jax.random.key(0))


def _prompts():
  rng = np.random.default_rng(0)
  return st.test_set(rng, 3, 3, st.prompt_len(3) + 2)


def test_generate_without_heads_is_greedy_decoding_and_masks_change_it():
  net, ts = _net(), _prompts()
  exc = ata.exclusive_pairs(3, ata.PARALLEL)
  out = ata.generate(net, ts.prompts, ts.span_id, exc, jnp.zeros((1, 2)), max_new=3,
                     num_spans=3)
  ref = decoding.generate(net, jnp.asarray(ts.prompts), jax.random.key(0), 3, temperature=0.0)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert out.keys.shape == (3, 3) and int(out.keys.min()) >= 0  # Parallel starts at T0
  # all heads, a huge alpha: the mutual mask equals the toolkit's boolean mask at prefill
  huge = ata.generate(net, ts.prompts, ts.span_id, exc, jnp.ones((1, 2)), max_new=3,
                      num_spans=3, alpha=1e9, dynamic=False)
  blocked = np.asarray(ata.mutual_bias(jnp.asarray(ts.span_id), exc, 1.0)) < 0
  logits = net.module()(jnp.asarray(ts.prompts), mask=~blocked[:, None])
  np.testing.assert_array_equal(huge.tokens[:, 0], jnp.argmax(logits[:, -1], -1))


def test_generate_rejects_bad_input():
  net, ts = _net(), _prompts()
  exc = ata.exclusive_pairs(3, ata.PARALLEL)
  h = jnp.zeros((1, 2))
  with pytest.raises(ValueError, match="alpha"):
    ata.generate(net, ts.prompts, ts.span_id, exc, h, max_new=2, num_spans=3, alpha=-1.0)
  with pytest.raises(ValueError, match="heads"):
    ata.generate(net, ts.prompts, ts.span_id, exc, jnp.zeros((3, 2)), max_new=2, num_spans=3)
  with pytest.raises(ValueError, match="exclusive"):
    ata.generate(net, ts.prompts, ts.span_id, exc, h, max_new=2, num_spans=4)
  with pytest.raises(ValueError, match="span_id"):
    ata.generate(net, ts.prompts, ts.span_id[:, :-1], exc, h, max_new=2, num_spans=3)
  with pytest.raises(TypeError, match="span_id"):
    ata.mutual_bias(jnp.zeros(4), exc, 1.0)


def test_subtask_rows_and_grading():
  tasks = [st.Subtask("A", "rev", (1, 2, 3)), st.Subtask("B", "inc", (9, 0, 4))]
  p, s, a = st.encode(tasks, [1, 0, 2])
  assert [st.WORDS[t] for t in p] == [".", "A", "rev", "1", "2", "3", ";", "B", "inc", "9",
                                      "0", "4", ";", ".", ".", "ANS"]
  assert s == [-1] + [0] * 6 + [1] * 6 + [-1] * 3
  assert [st.WORDS[t] for t in a] == ["A", "3", "2", "1", "|", "B", "0", "1", "5", "<eos>"]
  ids = lambda words: [st.IDS[w] for w in words.split()]  # noqa: E731
  assert st.grade(tasks, a) == ["correct", "correct"]
  # B answered with rev on A's digits (mixed), then nothing
  assert st.grade(tasks, ids("A 3 2 1 | B 3 2 1 <eos>")) == ["correct", "mixed"]
  assert st.grade(tasks, ids("A 3 2 1 <eos> | B 0 1 5")) == ["correct", "omitted"]
  assert st.grade(tasks, ids("A 7 7 7 | B 0 1 5 <eos>")) == ["wrong", "correct"]
  rows = st.training_rows(np.random.default_rng(0), 8, (1, 2), 30)
  for r in range(8):  # the masked targets are exactly the answer, with its segment ids
    tgt = rows.tokens[r, 1:][rows.mask[r] > 0]
    assert tgt[-1] == st.EOS and len(tgt) % st.SEGMENT_TOKENS == 0
    assert set(rows.query_span[r][rows.mask[r] > 0]) == set(range(len(tgt) // 5))
