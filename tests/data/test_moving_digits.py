"""Moving digits: deterministic rolls, the binary 2 x 2 codebook, lossless tokenization."""

import numpy as np
import pytest

from jaxlab.data import moving_digits as md


def test_codebook_and_tokenizer_hand_worked():
  cb = md.binary_codebook()
  assert cb.shape == (16, 4) and len({tuple(r) for r in cb}) == 16
  np.testing.assert_array_equal(cb[0b0110], [0, 1, 1, 0])  # bit j = pixel j (row-major)
  frame = np.array([[0, 1, 1, 1],
                    [1, 0, 0, 1],
                    [0.2, 0.9, 0, 0],
                    [0.6, 0.4, 0, 0]], np.float32)
  # patches (row-major pixels): [0,1,1,0] -> 6, [1,1,0,1] -> 11, [0,1,1,0] -> 6 after
  # thresholding (nearest codeword), zeros -> 0
  np.testing.assert_array_equal(md.tokenize(frame), [[6, 11], [6, 0]])
  np.testing.assert_array_equal(md.detokenize([[6, 11], [6, 0]]), (frame >= 0.5) * 1.0)


def test_videos_roll_deterministically_and_tokenize_losslessly():
  v = md.make_videos(3, 16)
  assert v.frames.shape == (16, 4, 8, 8) and set(np.unique(v.frames)) <= {0.0, 1.0}
  for i in range(16):
    dr, dc = {0: (0, 1), 1: (0, -1), 2: (1, 0), 3: (-1, 0)}[int(v.directions[i])]
    for f in range(4):
      np.testing.assert_array_equal(v.frames[i, f], np.roll(v.frames[i, 0], (f * dr, f * dc),
                                                             (0, 1)))
  tok = md.tokenize(v.frames)
  assert tok.shape == (16, 4, 4, 4)
  np.testing.assert_array_equal(md.detokenize(tok), v.frames)
  same = md.make_videos(3, 16)
  np.testing.assert_array_equal(same.frames, v.frames)
  big = md.make_videos(3, 2, scale=2, digits=np.arange(10))
  assert big.frames.shape == (2, 4, 16, 16) and big.labels.max() <= 9
  with pytest.raises(ValueError, match="frames"):
    md.make_videos(0, 2, frames=0)
  with pytest.raises(ValueError, match="multiples of patch"):
    md.tokenize(np.zeros((3, 5)))
  with pytest.raises(ValueError, match="directions"):
    md.roll_frames(np.zeros((1, 4, 4)), np.array([4]), 2)
  with pytest.raises(ValueError, match="codebook indices"):
    md.detokenize(np.array([[16]]))
