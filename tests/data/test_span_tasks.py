"""Span tasks: the plan format and the plain answers written out by hand."""

import jax
import numpy as np
import pytest

from jaxlab.data import span_tasks as st


def test_planned_sequence_by_hand():
  seqs = st.planned_sequences(np.array([[3, 1], [6, -1]]), unit=4)
  assert seqs.prompt_len == 4
  # three -> threeeerht (10 letters): 3 units of 4, 2 filler; one -> oneeno: 2 units
  assert st.TOKENIZER.decode(seqs.tokens[0]) == (
      "<bos> 3 1 <sep> <promise>-<topic> 3 3 </topic> <promise>-<topic> 1 2 </topic> "
      "<async> t h r e e e e r h t _ _ </async> <async> o n e e n o _ _ </async> <eos>")
  assert st.TOKENIZER.decode(seqs.tokens[1]) == (
      "<bos> 6 . <sep> <promise>-<topic> 6 2 </topic> <async> s i x x i s _ _ </async> <eos>")
  np.testing.assert_array_equal(seqs.lengths, [4 + 8 + 14 + 10 + 1, 4 + 4 + 10 + 1])
  # padded to two spans of the longest word: 4 + 8 + 2 * 14 + 1
  assert seqs.tokens.shape == (2, 41) and np.all(seqs.tokens[1, 19:] == st.PAD)


def test_answers_and_decoding():
  tokens, loss_mask, plen = st.answer_sequences(np.array([[2, 0], [9, -1]]))
  assert plen == 4
  assert st.TOKENIZER.decode(tokens[0]) == (
      "<bos> 2 0 <sep> t w o o w t | z e r o o r e z <eos>")
  # the answer's next-token positions: from the last prompt token to the token before EOS
  np.testing.assert_array_equal(np.nonzero(loss_mask[0])[0], np.arange(3, 3 + 16))
  assert st.decode_answer(tokens[0, plen:]) == ["twoowt", "zeroorez"]
  assert st.gold_words(np.array([[2, 0], [9, -1]])) == [["twoowt", "zeroorez"], ["nineenin"]]
  ids = st.TOKENIZER.encode("o n e e n o _ _")
  assert st.decode_span(ids) == "oneeno"
  assert st.decode_span(st.TOKENIZER.encode("o n _ e")) == "?"  # a letter after the filler
  assert st.decode_span(st.TOKENIZER.encode("o <mask>")) == "?"


def test_span_problems_counts():
  d = np.asarray(st.span_problems(jax.random.key(0), 500, 4))
  counts = np.sum(d >= 0, 1)
  assert set(counts) == {1, 2, 3, 4}
  assert np.all((d >= 0) == (np.arange(4) < counts[:, None]))  # spans first, then -1
  d3 = np.asarray(st.span_problems(jax.random.key(1), 20, 4, num_spans=3))
  assert np.all(np.sum(d3 >= 0, 1) == 3)


def test_bad_input():
  with pytest.raises(ValueError, match="min_spans"):
    st.span_problems(jax.random.key(0), 4, 2, min_spans=3)
  with pytest.raises(ValueError, match="num_spans"):
    st.span_problems(jax.random.key(0), 4, 2, num_spans=5)
  with pytest.raises(ValueError, match="digits"):
    st.planned_sequences(np.array([[-1, 3]]))
  with pytest.raises(ValueError, match="unit"):
    st.planned_sequences(np.array([[3]]), unit=0)
  with pytest.raises(ValueError, match="length"):
    st.planned_sequences(np.array([[3]]), unit=4, length=5)
