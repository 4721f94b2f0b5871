"""Layout-conditioned digits: boxes inside the canvas and apart, digits where the boxes are."""

import jax
import numpy as np
import pytest

from jaxlab.data import digit_layouts as dl


def _overlap(a, b):
  return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_layouts_render_and_captions():
  lay = dl.random_layouts(jax.random.key(0), 64)
  again = dl.random_layouts(jax.random.key(0), 64)
  np.testing.assert_array_equal(lay.boxes, again.boxes)  # same key, same scenes
  assert lay.valid[:, 0].all() and 10 < lay.valid[:, 1].sum() < 54
  assert lay.boxes.min() >= 0 and lay.boxes[..., 2:].max() <= 24
  np.testing.assert_array_equal((lay.boxes[..., 2:] - lay.boxes[..., :2])[lay.valid], 8)
  for b, v in zip(lay.boxes, lay.valid, strict=True):
    assert not (v.all() and _overlap(b[0], b[1]))
  img = dl.render(jax.random.key(1), lay).reshape(64, 24, 24)
  assert img.min() >= -1 and img.max() <= 1
  for i in range(64):  # ink only inside the boxes
    ink = img[i] > -1
    inside = np.zeros((24, 24), bool)
    for b, v in zip(lay.boxes[i], lay.valid[i], strict=True):
      if v:
        inside[b[0]:b[2], b[1]:b[3]] = True
    assert ink.any() and not (ink & ~inside).any()
  tok = dl.caption_tokens(lay)
  np.testing.assert_array_equal(tok[~lay.valid], dl.PAD)
  np.testing.assert_array_equal(tok[lay.valid], lay.names[lay.valid])


def test_types_and_stream():
  types = dl.layout_types(jax.random.key(2), 6)
  assert len({(b.tobytes(), n.tobytes()) for b, n in zip(types.boxes, types.names,
                                                          strict=True)}) == 6
  ids, stream = dl.prompt_stream(jax.random.key(3), types, 40, jitter=1)
  np.testing.assert_array_equal(stream.names, types.names[ids])
  shift = np.abs(stream.boxes - types.boxes[ids])
  assert shift.max() <= 1 and shift.max() > 0
  assert stream.boxes.min() >= 0 and stream.boxes[..., 2:].max() <= 24
  _, exact = dl.prompt_stream(jax.random.key(3), types, 40)
  np.testing.assert_array_equal(exact.boxes, types.boxes[ids])


def test_bad_input():
  with pytest.raises(ValueError, match="canvas"):
    dl.random_layouts(jax.random.key(0), 4, canvas=6)
  with pytest.raises(ValueError, match="two_prob"):
    dl.random_layouts(jax.random.key(0), 4, two_prob=1.5)
  with pytest.raises(TypeError, match="layout"):
    dl.render(jax.random.key(0), np.zeros((2, 2, 4)))
