"""The synthetic Markov-document corpus: chains, sampling statistics, and the HQ slice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.models import markov_text as mt

SPEC = mt.MarkovTextSpec(vocab_size=16, branching=2, global_branching=4, global_prob=0.5)
CHAINS = mt.make_chains(jax.random.key(0), SPEC)
# step_batches vmapped over (slice start, slice length): one compile for the stream tests
STREAM = jax.jit(jax.vmap(lambda start, length: mt.step_batches(
    jax.random.key(3), CHAINS, SPEC, 20, 4, 9, start, length)))


def test_sparse_chain_rows():
  p = np.asarray(mt.sparse_chain(jax.random.key(1), 16, 3))
  np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-6)
  assert ((p > 0).sum(1) == 3).all() and (p >= 0).all()
  docs = [np.asarray(mt.document_chain(jax.random.key(k), SPEC)) for k in range(2)]
  assert not np.array_equal(docs[0], docs[1])


def test_sampled_bigrams_follow_the_chain():
  chain = mt.mixture(CHAINS, CHAINS.hq_chain, SPEC)
  seqs = np.asarray(jax.jit(mt.hq_sequences, static_argnums=(2, 3, 4))(
      jax.random.key(2), CHAINS, SPEC, 2000, 40))
  assert seqs.shape == (2000, 40) and seqs.dtype == np.int32
  counts = np.zeros((16, 16))
  np.add.at(counts, (seqs[:, :-1].ravel(), seqs[:, 1:].ravel()), 1)
  assert counts[np.asarray(chain) == 0].sum() == 0  # never off the support
  freq = counts / counts.sum(1, keepdims=True)
  np.testing.assert_allclose(freq, chain, atol=0.03)  # ~5k transitions per row


def test_stream_shape_determinism_and_slice():
  starts, lengths = jnp.array([0, 5, 0]), jnp.array([0, 3, 2])
  plain, sliced, first = np.asarray(STREAM(starts, lengths))
  assert plain.shape == (20, 4, 9) and plain.dtype == np.int32
  assert plain.min() >= 0 and plain.max() < 16
  np.testing.assert_array_equal(STREAM(starts, lengths)[0], plain)  # deterministic
  # the same key gives the same documents; only the slice's steps change
  differs = (plain != sliced).any(axis=(1, 2))
  assert not differs[:5].any() and not differs[8:].any() and differs[5:8].all()
  assert (plain != first).any(axis=(1, 2)).tolist() == [True] * 2 + [False] * 18
  # inside the slice every transition lies on the support of the high-quality mixture
  support = np.asarray(mt.mixture(CHAINS, CHAINS.hq_chain, SPEC)) > 0
  s = sliced[5:8]
  assert support[s[..., :-1], s[..., 1:]].all()
  assert not support[plain[5:8, :, :-1], plain[5:8, :, 1:]].all()  # documents are elsewhere


def test_bad_spec():
  with pytest.raises(ValueError, match="vocab_size"):
    mt.MarkovTextSpec(vocab_size=1)
  with pytest.raises(ValueError, match="branching"):
    mt.MarkovTextSpec(vocab_size=8, branching=9)
  with pytest.raises(ValueError, match="global_prob"):
    mt.MarkovTextSpec(global_prob=1.5)
