"""G-NLL against a transformer whose next-token distributions are a known bigram table;
PE / LN-PE / SE / D-SE on hand-built samples; AUROC against scikit-learn; bad input."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from sklearn.metrics import roc_auc_score

from jaxlab.data.lm_tasks import EOS, PAD
from jaxlab.inference import g_nll as gn
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

V, D = 10, 16
EPS = 0.01  # probability mass spread over every token


def _table() -> np.ndarray:
  """Next-token probabilities ``P[prev, next]`` (rows sum to 1). From 5 the greedy path is
  6, 7, EOS (0.5 * 0.4 * 0.9 of the main mass); the most likely answer is 8, EOS (0.45 *
  0.95): greedy is not the MSP here."""
  main = {5: {6: 0.5, 8: 0.45}, 6: {7: 0.4, 9: 0.35}, 7: {EOS: 0.9}, 8: {EOS: 0.95},
          9: {EOS: 0.5, 5: 0.3}}
  p = np.full((V, V), EPS)
  for a, row in main.items():
    for b, q in row.items():
      p[a, b] += q
  for a in range(V):
    if a not in main:
      p[a, 5] += 0.6  # loops without EOS: 0 -> 5 ...
  return p / p.sum(1, keepdims=True)


P = _table()


def bigram_net(p: np.ndarray) -> Net:
  """A 1-layer transformer whose logits are ``log p[last token]``: the attention and MLP
  outputs are zero, the embedding one-hot, and the head solves ``LN(onehot) W = log p``."""
  cfg = tfm.TransformerConfig(vocab_size=V, d_model=D, num_heads=2, num_layers=1, seq_len=16)
  model = tfm.Transformer(cfg, rngs=nnx.Rngs(0))
  for block in model.blocks:
    for lin in (block.attn.out, block.proj):
      lin.kernel[...] = jnp.zeros_like(lin.kernel[...])
      lin.bias[...] = jnp.zeros_like(lin.bias[...])
  onehot = np.eye(V, D)
  model.embed.embedding[...] = jnp.asarray(onehot, jnp.float32)
  centred = onehot - onehot.mean(1, keepdims=True)
  normed = centred / np.sqrt(centred.var(1, keepdims=True) + model.ln_f.epsilon)
  model.head.kernel[...] = jnp.asarray(np.linalg.pinv(normed) @ np.log(p), jnp.float32)
  model.head.bias[...] = jnp.zeros(V)
  return Net.create(model)


NET = bigram_net(P)


def test_the_bigram_net_has_the_table_as_its_distributions():
  tokens = jnp.array([[1, 5, 6, 7, 9, 0]])
  logp = jax.nn.log_softmax(NET(tokens))
  np.testing.assert_allclose(logp[0], np.log(P[np.asarray(tokens[0])]), atol=2e-5)


def test_g_nll_is_the_hand_summed_greedy_log_likelihood():
  prompt = jnp.array([[1, 2, 5], [1, 2, 0]])
  out = jax.jit(lambda net, x: gn.g_nll(net, x, 5, eos_id=EOS))(NET, prompt)
  # row 0: 5 -> 6 -> 7 -> EOS, then padding; row 1: 0 -> 5 -> 6 -> 7 -> EOS
  np.testing.assert_array_equal(out.tokens, [[6, 7, EOS, PAD, PAD], [5, 6, 7, EOS, PAD]])
  np.testing.assert_array_equal(out.lengths, [3, 4])
  nll0 = -(np.log(P[5, 6]) + np.log(P[6, 7]) + np.log(P[7, EOS]))
  nll1 = -np.log(P[0, 5]) + nll0
  np.testing.assert_allclose(out.g_nll, [nll0, nll1], rtol=1e-4)
  np.testing.assert_allclose(out.ln_g_nll, [nll0 / 3, nll1 / 4], rtol=1e-4)
  # each step's log-prob is the log of the row's maximum
  np.testing.assert_allclose(out.log_probs[0, :3], np.log(P[[5, 6, 7]].max(1)), rtol=1e-4)


def test_g_nll_without_eos_sums_every_step():
  prompt = jnp.array([[1, 5]])
  out = gn.g_nll(NET, prompt, 2, eos_id=EOS)  # 5 -> 6 -> 7: no EOS within 2 steps
  np.testing.assert_array_equal(out.lengths, [2])
  np.testing.assert_allclose(out.g_nll, [-(np.log(P[5, 6]) + np.log(P[6, 7]))], rtol=1e-4)


def test_beam_nll_finds_the_exact_msp_and_greedy_does_not():
  prompt = jnp.array([[1, 2, 5]])
  n = 3
  best = -np.inf  # brute force over every answer of at most n tokens (EOS ends it)
  for length in range(1, n + 1):
    for seq in itertools.product(range(V), repeat=length):
      ended = seq[-1] == EOS
      if EOS in seq[:-1] or (not ended and length < n):
        continue
      best = max(best, sum(np.log(P[a, b]) for a, b in zip((5, *seq[:-1]), seq, strict=True)))
  nll, tokens, passes = gn.beam_nll(NET, prompt, 4, n, eos_id=EOS)
  np.testing.assert_allclose(nll, [-best], rtol=1e-4)
  np.testing.assert_array_equal(tokens, [[8, EOS, PAD]])
  assert int(passes[0]) <= 4 * n
  greedy = gn.g_nll(NET, prompt, n, eos_id=EOS)
  assert float(greedy.g_nll[0]) > float(nll[0]) + 0.5  # 0.18 vs 0.43 of the main mass


def test_sampled_log_probs_follow_the_table():
  prompt = jnp.array([[1, 2, 5], [1, 2, 9]])
  s = gn.sample_answers(NET, prompt, jax.random.key(0), 64, 4, eos_id=EOS)
  assert s.tokens.shape == (2, 64, 4) and s.lengths.shape == (2, 64)
  tokens, lp = np.asarray(s.tokens), np.asarray(s.log_probs)
  for b, first in enumerate((5, 9)):
    for n in range(64):
      prev = (first, *tokens[b, n, :-1])
      L = int(s.lengths[b, n])
      want = [np.log(P[a, t]) for a, t in zip(prev[:L], tokens[b, n, :L], strict=True)]
      np.testing.assert_allclose(lp[b, n, :L], want, rtol=1e-4)
      assert np.all(lp[b, n, L:] == 0) and np.all(tokens[b, n, L:] == PAD)
      assert (tokens[b, n, L - 1] == EOS) == (L < 4 or tokens[b, n, 3] == EOS)
  # from 5 the first token is 6 or 8 about 95% of the time
  assert 0.8 < np.isin(tokens[0, :, 0], (6, 8)).mean() <= 1.0


# ---------------------------------------------------------------- the sampled scores
SAMPLE_TOKENS = jnp.array([[[8, 5, EOS], [9, 5, EOS], [6, EOS, PAD], [6, EOS, PAD]]])
SEQ_P = np.array([0.4, 0.2, 0.1, 0.1])
LENGTHS = jnp.array([[3, 3, 2, 2]])
SYNONYMS = jnp.arange(V).at[9].set(8)  # token 9 is a synonym of 8


def test_clusters_from_the_canonicalising_map():
  np.testing.assert_array_equal(gn.cluster_ids(SAMPLE_TOKENS), [[0, 1, 2, 2]])
  canon = gn.canonicalize(SAMPLE_TOKENS, SYNONYMS)
  np.testing.assert_array_equal(jax.jit(gn.cluster_ids)(canon), [[0, 0, 2, 2]])


def test_entropies_on_hand_built_samples():
  lp = jnp.log(jnp.asarray(SEQ_P, jnp.float32))[None]
  clusters = gn.cluster_ids(gn.canonicalize(SAMPLE_TOKENS, SYNONYMS))
  np.testing.assert_allclose(gn.predictive_entropy(lp), [-np.log(SEQ_P).mean()], rtol=1e-6)
  np.testing.assert_allclose(gn.ln_predictive_entropy(lp, LENGTHS),
                             [-(np.log(SEQ_P) / [3, 3, 2, 2]).mean()], rtol=1e-6)
  # clusters {0, 1}: 0.6 of the mass, {2, 3}: 0.2 -> p = (0.75, 0.25)
  se = jax.jit(gn.semantic_entropy)(lp, clusters)
  np.testing.assert_allclose(se, [-(0.75 * np.log(0.75) + 0.25 * np.log(0.25))], rtol=1e-5)
  np.testing.assert_allclose(gn.discrete_semantic_entropy(clusters), [np.log(2)], rtol=1e-6)
  # without the synonym map: three clusters with counts 1, 1, 2
  raw = gn.cluster_ids(SAMPLE_TOKENS)
  np.testing.assert_allclose(gn.discrete_semantic_entropy(raw),
                             [-(2 * 0.25 * np.log(0.25) + 0.5 * np.log(0.5))], rtol=1e-6)
  p = np.array([0.4, 0.2, 0.2]) / 0.8
  np.testing.assert_allclose(gn.semantic_entropy(lp, raw), [-(p * np.log(p)).sum()], rtol=1e-5)


def test_entropies_of_one_cluster_are_zero_and_batch():
  lp = jnp.log(jnp.array([[0.5, 0.25, 0.125], [0.2, 0.2, 0.2]]))
  one = jnp.zeros((2, 3), jnp.int32)
  np.testing.assert_allclose(gn.semantic_entropy(lp, one), [0, 0], atol=1e-6)
  np.testing.assert_allclose(gn.discrete_semantic_entropy(one), [0, 0], atol=1e-6)
  apart = jnp.tile(jnp.arange(3), (2, 1))
  np.testing.assert_allclose(gn.semantic_entropy(lp, apart)[1], np.log(3), rtol=1e-6)
  # very unlikely samples (log-probs near -200) still give finite, exact masses
  far = jnp.array([[-200.0, -200.0 - np.log(3.0)]])
  np.testing.assert_allclose(gn.semantic_entropy(far, jnp.array([[0, 1]])),
                             [-(0.75 * np.log(0.75) + 0.25 * np.log(0.25))], rtol=1e-4)


# ---------------------------------------------------------------- AUROC
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_matches_sklearn_with_ties(seed):
  rng = np.random.default_rng(seed)
  labels = rng.random(200) < 0.4
  scores = np.round(rng.normal(size=200) + labels, 1)  # rounding makes many ties
  assert len(np.unique(scores)) < 100
  ours = float(jax.jit(gn.auroc)(scores, labels))
  assert ours == pytest.approx(roc_auc_score(labels, scores), abs=1e-6)


def test_auroc_edge_values():
  labels = np.array([0, 0, 1, 1])
  assert float(gn.auroc(np.array([0.1, 0.2, 0.3, 0.4]), labels)) == 1.0
  assert float(gn.auroc(np.array([0.4, 0.3, 0.2, 0.1]), labels)) == 0.0
  assert float(gn.auroc(np.ones(4), labels)) == 0.5
  assert float(gn.auroc(np.array([0.1, 0.5, 0.5, 0.9]), labels)) == 0.875  # one tie: 1/2


# ---------------------------------------------------------------- bad input
def test_bad_input_is_named():
  prompt = jnp.array([[1, 2, 5]])
  with pytest.raises(ValueError, match="eos_id"):
    gn.g_nll(NET, prompt, 3, eos_id=None)
  with pytest.raises(ValueError, match="eos_id"):
    gn.g_nll(NET, prompt, 3, eos_id=-1)
  with pytest.raises(ValueError, match="max_new_tokens"):
    gn.g_nll(NET, prompt, 0, eos_id=EOS)
  with pytest.raises(TypeError, match="prompt"):
    gn.g_nll(NET, prompt.astype(jnp.float32), 3, eos_id=EOS)
  with pytest.raises(TypeError, match="model"):
    gn.g_nll(lambda x: x, prompt, 3, eos_id=EOS)
  with pytest.raises(ValueError, match="num_samples"):
    gn.sample_answers(NET, prompt, jax.random.key(0), 0, 3, eos_id=EOS)
  with pytest.raises(ValueError, match="beam_size"):
    gn.beam_nll(NET, prompt, 0, 3, eos_id=EOS)
  with pytest.raises(ValueError, match="tokens"):
    gn.cluster_ids(jnp.zeros(4, jnp.int32))
  with pytest.raises(ValueError, match="both classes"):
    gn.auroc(np.array([0.1, 0.2]), np.array([1, 1]))
  with pytest.raises(ValueError, match="1-D"):
    gn.auroc(np.zeros(3), np.array([0, 1]))
