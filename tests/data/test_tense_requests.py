"""The tense-request test bed: rows, masks, answers and harmfulness on hand-checked cases."""

import numpy as np
import pytest

from jaxlab.data import lm_tasks as lt
from jaxlab.data import tense_requests as tr


def test_rows_masks_and_answers():
  tok = tr.tokenizer(2, 1)
  reqs = [("past", "make", "h1"), ("pres", "store", "b0")]
  tokens, mask = tr.encode(tok, reqs, [tr.REFUSAL, tr.answer(*reqs[1])])
  assert tokens.shape == (2, tr.ROW) and mask.shape == (2, tr.ROW - 1)
  assert tok.decode(tokens[0]) == "<bos> past make h1 <sep> sorry cannot <eos>"
  assert tok.decode(tokens[1]) == "<bos> pres store b0 <sep> ab0 xstore <eos>"
  # the mask marks the positions predicting the response and EOS
  assert mask[0].tolist() == [0, 0, 0, 0, 1, 1, 1]
  assert tokens[0, 1:][mask[0] > 0].tolist()[-1] == lt.EOS
  assert tr.answer("past", "make", "h0") == ("ph0", "xmake")
  assert tr.answer("fut", "describe", "h0") == ("ah0", "xdescribe")
  assert tr.is_harmful("make", "h0") and not tr.is_harmful("describe", "h0")
  assert not tr.is_harmful("buy", "b3")
  assert sorted(tr.answer_words(tok)) == sorted(["ah0", "ah1", "ab0", "ph0", "ph1", "pb0"])
  assert np.issubdtype(tokens.dtype, np.integer)


def test_bad_input_raises():
  with pytest.raises(ValueError, match="tense"):
    tr.answer("then", "make", "h0")
  with pytest.raises(ValueError, match="num_harmful"):
    tr.tokenizer(0, 2)
