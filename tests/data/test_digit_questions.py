"""The digit questions follow their definition: answers, hints, copy positions, patches."""

import jax
import numpy as np
import pytest

from jaxlab.data import digit_questions as dq
from jaxlab.data import load_digits


def test_questions_follow_their_definition():
  d = load_digits("unit_images")
  q = dq.make_questions(jax.random.key(3), d.x, d.y, 2000, hint_agree=0.8, patch=4)
  which, copy = np.asarray(q.kind) == 0, np.asarray(q.kind) == 1
  assert abs(which.mean() - 0.5) < 0.03
  text, ans = np.asarray(q.text), np.asarray(q.answer)
  assert np.all(text[which, 0] == dq.WHICH) and np.all(text[copy, 0] == dq.COPY)
  assert np.all(text[:, -1] == dq.ASK)
  np.testing.assert_array_equal(ans[which], np.asarray(q.label)[which])
  np.testing.assert_array_equal(text[which, 1], np.asarray(q.hint)[which])
  k = text[copy, 1] - dq.POS
  np.testing.assert_array_equal(ans[copy], text[copy][np.arange(copy.sum()), 2 + k])
  assert abs((np.asarray(q.hint)[which] == ans[which]).mean() - 0.8) < 0.03
  c = dq.make_questions(jax.random.key(4), d.x, d.y, 2000, which_share=1.0, hint_agree=0.0, patch=4)
  assert np.all(np.asarray(c.hint) != np.asarray(c.label)) and np.all(np.asarray(c.kind) == 0)
  # the patches tile the image: patch (0, 1) is rows 0..3, columns 4..7
  img = np.asarray(d.x[:2])
  np.testing.assert_array_equal(dq.patchify(img, 4)[:, 1], img[:, :4, 4:].reshape(2, 16))
  again = dq.make_questions(jax.random.key(3), d.x, d.y, 2000, hint_agree=0.8, patch=4)
  np.testing.assert_array_equal(again.text, q.text)


def test_bad_input_raises():
  d = load_digits("unit_images")
  with pytest.raises(ValueError, match="hint_agree"):
    dq.make_questions(jax.random.key(0), d.x, d.y, 8, hint_agree=1.5)
  with pytest.raises(ValueError, match="patch"):
    dq.make_questions(jax.random.key(0), d.x, d.y, 8, patch=3)
  with pytest.raises(ValueError, match="n must"):
    dq.make_questions(jax.random.key(0), d.x, d.y, 0)
  with pytest.raises(ValueError, match="test_share"):
    dq.split_indices(0, 10, 1.0)
