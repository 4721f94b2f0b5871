"""The fact QA test bed: answer structure, statement frequencies, the synonym map and the
correctness check on hand-made decodes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import fact_qa
from jaxlab.data.lm_tasks import BOS, EOS, PAD, SEP

WORLD = fact_qa.fact_qa(jax.random.key(0), num_entities=40, num_relations=2, num_words=12)


def test_world_answers():
  w = WORLD
  lengths, probs, words = map(np.asarray, (w.lengths, w.probs, w.words))
  assert lengths.shape == probs.shape == (80, 3) and words.shape == (80, 3, 6)
  valid = lengths > 0
  assert np.all(valid[:, 0]) and np.all((lengths[valid] >= 2) & (lengths[valid] <= 6))
  np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(probs[valid.sum(1) == 3], np.tile([0.6, 0.3, 0.1], (
      int((valid.sum(1) == 3).sum()), 1)), rtol=1e-6)
  np.testing.assert_allclose(probs[valid.sum(1) == 2][:, :2], np.tile([2 / 3, 1 / 3], (
      int((valid.sum(1) == 2).sum()), 1)), rtol=1e-6)
  assert 0.05 < np.mean(valid[:, 1]) < 0.4  # about 20% with several answers
  for q in range(80):  # first words differ; words past the length are -1
    firsts = words[q, valid[q], 0]
    assert len(set(firsts.tolist())) == len(firsts)
    for k in range(3):
      assert np.all(words[q, k, lengths[q, k]:] == -1)
      assert np.all((words[q, k, :lengths[q, k]] >= 0) & (words[q, k, :lengths[q, k]] < 12))


def test_statements_follow_the_answer_and_surface_probabilities():
  data, counts = fact_qa.statements(jax.random.key(1), WORLD, 20000, zipf_a=1.0,
                                    synonym_prob=0.3)
  tokens, mask = np.asarray(data.tokens), np.asarray(data.loss_mask)
  assert tokens.shape == (20000, 11) and data.prompt_len == 4
  assert np.all(tokens[:, 0] == BOS) and np.all(tokens[:, 3] == SEP)
  assert int(np.asarray(counts).sum()) == 20000
  q = (tokens[:, 1] - fact_qa.FIRST_SYMBOL) * 2 + tokens[:, 2] - fact_qa.FIRST_SYMBOL - 40
  np.testing.assert_array_equal(np.bincount(q, minlength=80), counts)
  assert counts[0] > counts[-1]  # Zipf: entity 0 is the most frequent
  # the loss covers exactly the answer's words and its EOS
  eos_at = np.argmax(tokens == EOS, 1)
  np.testing.assert_array_equal(mask.sum(1), eos_at - 3)
  first = tokens[:, 4]
  assert abs(np.mean(first >= WORLD.synonym_token) - 0.3) < 0.02
  # the answers of a multi-answer question come at 0.6 / 0.3 / 0.1
  canon = fact_qa.canonicalize(jnp.asarray(tokens[:, 4:]), fact_qa.canonical_map(WORLD))
  answers = np.asarray(fact_qa.answer_tokens(WORLD))
  three = [i for i in np.flatnonzero(np.asarray(WORLD.lengths[:, 2]) > 0) if counts[i] > 150]
  assert three, "no frequent question with three answers in this world"
  rows = np.asarray(canon)[q == three[0]]
  share = [np.mean(np.all(rows == answers[three[0], k], 1)) for k in range(3)]
  np.testing.assert_allclose(share, [0.6, 0.3, 0.1], atol=0.08)


def test_is_correct_accepts_either_surface_form_and_nothing_else():
  answers = np.asarray(fact_qa.answer_tokens(WORLD))  # (Q, K, 7)
  decoded = answers[:, 0].copy()
  assert np.all(np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(decoded))))
  syn = decoded.copy()
  syn[:, 0] += WORLD.num_words  # the synonym of the first word
  assert np.all(np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(syn))))
  wrong = decoded.copy()
  wrong[:, 1] = np.where(wrong[:, 1] == EOS, WORLD.word_token, EOS)  # cut or extended
  assert not np.any(np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(wrong))))
  no_eos = np.where(decoded == EOS, WORLD.word_token, decoded)
  longer = np.concatenate([decoded, np.full((80, 2), PAD)], 1)  # longer decodes, PAD after
  assert not np.any(np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(no_eos))))
  assert np.all(np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(longer))))
  second = np.asarray(WORLD.lengths[:, 1]) > 0  # another valid answer is correct too
  ok = np.asarray(fact_qa.is_correct(WORLD, jnp.asarray(answers[:, 1])))
  np.testing.assert_array_equal(ok, second)


def test_bad_input_is_named():
  with pytest.raises(ValueError, match="num_words"):
    fact_qa.fact_qa(jax.random.key(0), 4, 1, 2)
  with pytest.raises(ValueError, match="max_len"):
    fact_qa.fact_qa(jax.random.key(0), 4, 1, 8, min_len=3, max_len=2)
  with pytest.raises(ValueError, match="multi_share"):
    fact_qa.fact_qa(jax.random.key(0), 4, 1, 8, multi_share=1.5)
  with pytest.raises(ValueError, match="answer_probs"):
    fact_qa.fact_qa(jax.random.key(0), 4, 1, 8, answer_probs=(0.5, 0.5))
  with pytest.raises(ValueError, match="synonym_prob"):
    fact_qa.statements(jax.random.key(0), WORLD, 10, synonym_prob=-0.1)
  with pytest.raises(ValueError, match="num"):
    fact_qa.statements(jax.random.key(0), WORLD, 0)
  with pytest.raises(ValueError, match="decoded"):
    fact_qa.is_correct(WORLD, jnp.zeros((80, 3), jnp.int32))
