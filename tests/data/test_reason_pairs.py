"""ReCouPLe's synthetic reason-annotated pairs: the design, and the label noise's closed form."""

import numpy as np

from jaxlab.data import reason_pairs as rp

CFG = dict(segment_len=8, train_pairs=400, test_pairs=400, few_shot_pairs=16)


def test_data_design():
  geo = rp.geometry()
  np.testing.assert_allclose(geo.reasons @ geo.reasons.T, np.eye(rp.N_CAUSAL), atol=1e-5)
  # task vectors: weights on the reasons plus a task direction orthogonal to every reason
  np.testing.assert_allclose(geo.train_tasks @ geo.reasons.T, rp.TRAIN_WEIGHTS, atol=1e-5)
  np.testing.assert_allclose(geo.new_tasks @ geo.reasons.T, rp.NEW_WEIGHTS, atol=1e-5)

  data = rp.setting_data(0, 0, geo, "partial", 0.5, CFG)
  mask = np.asarray(rp.REGIMES["partial"])
  blocks = lambda v: np.asarray(v).reshape(len(rp.TRAIN_WEIGHTS), -1)
  for split, sign in (("train", 1), ("id", 1), ("ood", -1), ("decorrelated", 0)):
    d = data[split]
    win = 2 * d.labels - 1  # +1 when segment b is preferred
    s_gap = (d.segments_b - d.segments_a)[..., rp.SPURIOUS].mean(1) * win
    per_task = blocks(s_gap).mean(1)  # spurious advantage of the preferred segment, per task
    np.testing.assert_allclose(per_task, sign * mask * 2 * 0.5, atol=0.15)
  # test labels are the sign of the true return gap; training labels are noisy
  gap = rp.true_return_gap(data["id"], rp.TRAIN_WEIGHTS)
  np.testing.assert_array_equal(data["id"].labels, (gap > 0).astype(np.float32))
  noise = np.mean((rp.true_return_gap(data["train"], rp.TRAIN_WEIGHTS) > 0)
                  != (data["train"].labels > 0.5))
  assert 0.05 < noise < 0.3
  # the splits share their segments apart from the spurious feature
  for split in ("ood", "decorrelated"):
    np.testing.assert_array_equal(np.delete(data[split].segments_a, rp.SPURIOUS, -1),
                                  np.delete(data["id"].segments_a, rp.SPURIOUS, -1))
  # each reason is one of the task's causal features, mostly the one favouring the choice
  d = data["train"]
  reason_idx = np.argmax(d.reasons @ geo.reasons.T, -1)
  a = np.repeat(rp.TRAIN_WEIGHTS, CFG["train_pairs"], axis=0)
  assert np.all(a[np.arange(len(a)), reason_idx] > 0)
  np.testing.assert_allclose(d.tasks, np.repeat(geo.train_tasks, CFG["train_pairs"], 0))
  contrib = a * (d.segments_b - d.segments_a)[..., :rp.N_CAUSAL].sum(1) * (2 * d.labels - 1)[
      :, None]
  best = np.argmax(np.where(a > 0, contrib, -np.inf), -1)
  assert np.mean(best == reason_idx) > 0.8


def test_return_gap_std_matches_the_closed_form():
  # per causal feature the segment sum is T m + sum_t eps_t with m ~ N(0, 0.5^2): variance
  # T (1 + 0.25 T); the gap of two independent segments weighted by a has variance
  # 2 T (1 + 0.25 T) |a|^2, the scale make_pairs divides by
  t, n = 8, 20_000
  rng = np.random.default_rng(3)
  data = rp.make_pairs(rng, rp.TRAIN_WEIGHTS[:1], np.eye(1, rp.EMBED_DIM), np.eye(
      rp.N_CAUSAL, rp.EMBED_DIM), n, t, np.zeros(1), 0.0, noisy_labels=True)
  gap = rp.true_return_gap(data, rp.TRAIN_WEIGHTS[:1])
  a = rp.TRAIN_WEIGHTS[0]
  std = np.sqrt(2 * t * (1 + rp.SEGMENT_MEAN_STD**2 * t) * np.sum(a * a))
  assert abs(gap.std() / std - 1) < 0.02
  # Bradley-Terry labels at temperature 0.25 std: P(label disagrees with the gap's sign) is
  # E[sigmoid(-|g| / (0.25 std))] for g ~ N(0, std^2), i.e. E[sigmoid(-4 |z|)], z ~ N(0, 1)
  z = np.random.default_rng(0).standard_normal(1_000_000)
  expected = np.mean(1 / (1 + np.exp(4 * np.abs(z))))
  noise = np.mean((gap > 0) != (data.labels > 0.5))
  assert abs(noise - expected) < 4 * np.sqrt(expected * (1 - expected) / n)
  assert data.segments_a.dtype == np.float32 and data.segments_a.shape == (n, t, rp.N_FEATURES)
