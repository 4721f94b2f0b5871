"""The synthetic Markov-document corpus: chains, sampling statistics, and the HQ slice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import markov_text as mt

SPEC = mt.MarkovTextSpec(vocab_size=16, branching=2, global_branching=4, global_prob=0.5)
CHAINS = mt.make_chains(jax.random.key(0), SPEC)


@jax.jit
def _streams(starts, lengths):
  """A document stream and copies with HQ slices (vmapped over slices): one compile."""
  docs = mt.step_batches(jax.random.key(3), CHAINS, SPEC, 20, 4, 9)
  sliced = jax.vmap(lambda s, n: mt.with_hq_slice(jax.random.key(4), CHAINS, SPEC, docs, s, n,
                                                  max_length=3))(starts, lengths)
  return docs, sliced


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


def test_stream_and_hq_slices():
  starts, lengths = jnp.array([5, 0, 17, 9]), jnp.array([3, 2, 3, 0])
  docs, sliced = _streams(starts, lengths)
  docs, sliced = np.asarray(docs), np.asarray(sliced)
  assert docs.shape == (20, 4, 9) and docs.dtype == np.int32 and sliced.shape == (4, 20, 4, 9)
  assert docs.min() >= 0 and docs.max() < 16
  np.testing.assert_array_equal(_streams(starts, lengths)[0], docs)  # deterministic
  changed = (sliced != docs[None]).any(axis=(2, 3))
  for row, s, n in zip(changed, starts.tolist(), lengths.tolist(), strict=True):
    assert row.tolist() == [s <= t < s + n for t in range(20)]
  # the i-th slice step holds the same HQ text wherever the slice starts
  np.testing.assert_array_equal(sliced[0, 5:8], sliced[2, 17:20])
  np.testing.assert_array_equal(sliced[0, 5:7], sliced[1, 0:2])
  # inside a slice every transition lies on the support of the high-quality mixture;
  # the document steps it replaced do not
  support = np.asarray(mt.mixture(CHAINS, CHAINS.hq_chain, SPEC)) > 0
  s = sliced[0, 5:8]
  assert support[s[..., :-1], s[..., 1:]].all()
  assert not support[docs[5:8, :, :-1], docs[5:8, :, 1:]].all()


def test_bad_spec():
  with pytest.raises(ValueError, match="vocab_size"):
    mt.MarkovTextSpec(vocab_size=1)
  with pytest.raises(ValueError, match="branching"):
    mt.MarkovTextSpec(vocab_size=8, branching=9)
  with pytest.raises(ValueError, match="global_prob"):
    mt.MarkovTextSpec(global_prob=1.5)
