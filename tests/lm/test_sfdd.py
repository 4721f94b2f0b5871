"""SFDD's scores, filter and acceptance rate on hand cases; speculative sampling against the
target distribution and the closed-form tokens per call."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.lm import sfdd


def test_flatness_of_uniform_and_one_hot():
  v = 16
  assert float(sfdd.flatness(jnp.full(v, 1 / v))) == pytest.approx(1.0)
  assert float(sfdd.flatness(jnp.eye(v)[3])) == pytest.approx(1 / np.sqrt(v))
  assert float(sfdd.flatness_score(jnp.full(v, 1 / v))) == pytest.approx(0.0, abs=1e-6)
  p = jnp.array([0.5, 0.25, 0.25, 0.0])  # cos = 1 / (2 * sqrt(0.375))
  assert float(sfdd.flatness(p)) == pytest.approx(1 / (2 * np.sqrt(0.375)))
  assert float(sfdd.entropy(p)) == pytest.approx(1.5 * np.log(2))


def test_sample_scores_and_keep_lowest():
  flat, peaked = jnp.full(4, 0.25), jnp.array([0.97, 0.01, 0.01, 0.01])
  probs = jnp.stack([jnp.stack([flat, peaked]), jnp.stack([peaked, peaked])])  # (2, 2, 4)
  mask = jnp.array([[1.0, 0.0], [1.0, 1.0]])  # row 0 counts only its flat token
  s = sfdd.sample_scores(probs, mask)
  assert float(s[0]) == pytest.approx(0.0, abs=1e-6) and float(s[1]) > 0.4
  np.testing.assert_allclose(sfdd.sample_scores(probs, mask, "top1"), [0.25, 0.97], rtol=1e-6)
  assert float(sfdd.sample_scores(probs, mask, "entropy")[0]) == pytest.approx(-np.log(4))
  with pytest.raises(ValueError, match="kind"):
    sfdd.sample_scores(probs, mask, "margin")
  scores = jnp.array([0.3, 0.1, 0.5, 0.2, 0.4])
  keep = jax.jit(sfdd.keep_lowest)
  np.testing.assert_array_equal(keep(scores, 0.4), [False, True, False, True, False])
  np.testing.assert_array_equal(keep(scores, 0.5), [False, True, False, True, False])  # round 2.5
  np.testing.assert_array_equal(keep(scores, 0.6), [True, True, False, True, False])
  np.testing.assert_array_equal(keep(scores, 0.7), [True, True, False, True, True])  # 3.5 -> 4
  assert int(keep(scores, 1.0).sum()) == 5 and int(keep(scores, 0.0).sum()) == 0


def test_acceptance_rate_is_one_minus_total_variation():
  p = jnp.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
  assert float(sfdd.acceptance_rate(p, p)) == pytest.approx(1.0)
  q = jnp.array([[0.25, 0.25, 0.5], [0.2, 0.3, 0.5]])
  assert float(sfdd.acceptance_rate(p, q)) == pytest.approx((0.5 + 1.0) / 2)
  assert float(sfdd.acceptance_rate(p, q, jnp.array([1.0, 0.0]))) == pytest.approx(0.5)
  tv = 0.5 * jnp.sum(jnp.abs(p - q), -1)
  assert float(sfdd.acceptance_rate(p, q)) == pytest.approx(float(1 - tv.mean()))


def test_subset_epochs_visits_each_kept_row_once_per_epoch():
  keep = jnp.array([True, False, True, True, False, True, True])
  sample, per_epoch = sfdd.subset_epochs(jax.random.key(0), keep, 2)
  assert int(per_epoch) == 3
  ids, weights = jax.jit(jax.vmap(lambda step: sample(None, step)))(jnp.arange(6))
  ids, weights = np.asarray(ids).reshape(2, -1), np.asarray(weights).reshape(2, -1)
  for epoch in range(2):
    ids_e = ids[epoch][weights[epoch] > 0]
    assert sorted(ids_e.tolist()) == [0, 2, 3, 5, 6]


@jax.jit
def _decode(key, p_table, q_table, prompt):
  return sfdd.speculative_decode(key, lambda x: p_table[x], lambda x: q_table[x], prompt, 32,
                                 gamma=5)


def test_speculative_sampling_keeps_the_target_distribution():
  # a 3-token Markov target and a draft that disagrees with it everywhere
  p = jnp.array([[0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])
  q = jnp.array([[0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.8, 0.1, 0.1]])
  prompt = jnp.arange(768, dtype=jnp.int32)[:, None] % 3
  out = _decode(jax.random.key(0), p, q, prompt)
  tok = np.asarray(out.tokens)
  counts = np.zeros((3, 3))
  np.add.at(counts, (tok[:, :-1].ravel(), tok[:, 1:].ravel()), 1)
  freq = counts / counts.sum(1, keepdims=True)
  # ~8k transitions per row: the sampling std of a frequency is below 0.006
  np.testing.assert_allclose(freq, p, atol=0.025)
  assert np.all(np.asarray(out.new_tokens) >= 32) and np.all(np.asarray(out.calls) >= 32 / 6)


def test_tokens_per_call_matches_the_closed_form():
  p = jnp.tile(jnp.array([0.5, 0.3, 0.2]), (3, 1))  # i.i.d. tokens, alpha = 0.2 + 0.3 + 0.2
  q = jnp.tile(jnp.array([0.2, 0.3, 0.5]), (3, 1))
  alpha = float(sfdd.acceptance_rate(p, q))
  assert alpha == pytest.approx(0.7)
  out = _decode(jax.random.key(1), p, q, jnp.zeros((768, 1), jnp.int32))
  expected = float(sfdd.expected_tokens_per_call(alpha, 5))
  assert expected == pytest.approx((1 - 0.7 ** 6) / 0.3)
  assert float(out.tokens_per_call) == pytest.approx(expected, rel=0.03)
  assert float(jnp.sum(out.accepted)) == pytest.approx(
      float(jnp.sum(out.new_tokens) - jnp.sum(out.calls)))  # one target token per call
  freq = np.bincount(np.asarray(out.tokens[:, 1:]).ravel(), minlength=3) / out.tokens[:, 1:].size
  np.testing.assert_allclose(freq, [0.5, 0.3, 0.2], atol=0.02)
  assert float(sfdd.expected_tokens_per_call(1.0, 5)) == 6.0
