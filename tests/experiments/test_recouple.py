"""The ReCouPLe experiment: its synthetic data, and a run end to end at the smallest setting."""

import json
import pathlib

import numpy as np
import pytest

from experiments import recouple as ex
from experiments.common import check_claims

CFG = dict(segment_len=8, train_pairs=400, test_pairs=400, few_shot_pairs=16)


def test_data_design():
  geo = ex.geometry()
  np.testing.assert_allclose(geo.reasons @ geo.reasons.T, np.eye(ex.N_CAUSAL), atol=1e-5)
  # task vectors: weights on the reasons plus a task direction orthogonal to every reason
  np.testing.assert_allclose(geo.train_tasks @ geo.reasons.T, ex.TRAIN_WEIGHTS, atol=1e-5)
  np.testing.assert_allclose(geo.new_tasks @ geo.reasons.T, ex.NEW_WEIGHTS, atol=1e-5)

  data = ex.setting_data(0, 0, geo, "partial", 0.5, CFG)
  mask = np.asarray(ex.REGIMES["partial"])
  blocks = lambda v: np.asarray(v).reshape(len(ex.TRAIN_WEIGHTS), -1)
  for split, sign in (("train", 1), ("id", 1), ("ood", -1), ("decorrelated", 0)):
    d = data[split]
    win = 2 * d.labels - 1  # +1 when segment b is preferred
    s_gap = (d.segments_b - d.segments_a)[..., ex.SPURIOUS].mean(1) * win
    per_task = blocks(s_gap).mean(1)  # spurious advantage of the preferred segment, per task
    np.testing.assert_allclose(per_task, sign * mask * 2 * 0.5, atol=0.15)
  # test labels are the sign of the true return gap; training labels are noisy
  gap = ex.true_return_gap(data["id"], ex.TRAIN_WEIGHTS)
  np.testing.assert_array_equal(data["id"].labels, (gap > 0).astype(np.float32))
  noise = np.mean((ex.true_return_gap(data["train"], ex.TRAIN_WEIGHTS) > 0)
                  != (data["train"].labels > 0.5))
  assert 0.05 < noise < 0.3
  # the splits share their segments apart from the spurious feature
  for split in ("ood", "decorrelated"):
    np.testing.assert_array_equal(np.delete(data[split].segments_a, ex.SPURIOUS, -1),
                                  np.delete(data["id"].segments_a, ex.SPURIOUS, -1))
  # each reason is one of the task's causal features, mostly the one favouring the choice
  d = data["train"]
  reason_idx = np.argmax(d.reasons @ geo.reasons.T, -1)
  a = np.repeat(ex.TRAIN_WEIGHTS, CFG["train_pairs"], axis=0)
  assert np.all(a[np.arange(len(a)), reason_idx] > 0)
  np.testing.assert_allclose(d.tasks, np.repeat(geo.train_tasks, CFG["train_pairs"], 0))
  contrib = a * (d.segments_b - d.segments_a)[..., :ex.N_CAUSAL].sum(1) * (2 * d.labels - 1)[
      :, None]
  best = np.argmax(np.where(a > 0, contrib, -np.inf), -1)
  assert np.mean(best == reason_idx) > 0.8


def test_smoke_run(tmp_path, capsys):
  res = ex.main(["--smoke", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["wall_time_s"] > 0 and len(saved["settings"]) == 1
  for name in res["figures"]:
    assert (tmp_path / name).stat().st_size > 0
  st = res["settings"][0]
  assert set(st["methods"]) == {"bt", "recouple"} and 0.05 < st["label_noise"] < 0.3
  for row in st["methods"].values():
    for split in ex.SPLITS:
      assert len(row[split]["per_seed"]) == 2
      assert all(0.0 <= v <= 1.0 for v in row[split]["per_seed"])
    loss = np.asarray(row["train_loss"])
    assert np.all(loss[:, -1] < loss[:, 0])  # both methods train
    assert row["clean"]["mean"] > 0.6  # and learn the causal reward on unconfounded tasks
  bt, recouple = st["methods"]["bt"], st["methods"]["recouple"]
  # Bradley-Terry takes the shortcut: right in distribution, wrong once it reverses
  assert bt["id"]["mean"] > 0.9 and bt["ood"]["mean"] < 0.5
  # ReCouPLe relies on it less (the effect the experiment measures; seeds are fixed)
  assert recouple["ood"]["mean"] > bt["ood"]["mean"] + 0.05
  assert "recouple − bt (paired)" in capsys.readouterr().out


def test_bad_seeds():
  with pytest.raises(ValueError, match="--seeds"):
    ex.main(["--smoke", "--seeds", "0"])


@pytest.mark.parametrize("name", ["recouple/quick", "recouple/full"])
def test_claims_on_recorded_runs(name):
  path = pathlib.Path(__file__).parents[2] / "docs/results" / name / "results.json"
  rows = ex.claims(json.loads(path.read_text()))
  assert len(rows) == 4  # (ood, zero-shot) for the partial, then the all regime
  check_claims(rows)
  # README: robust out of distribution and zero-shot where the shortcut is in some tasks;
  # with the shortcut in every task the gain nearly vanishes (quick and full runs alike)
  assert [row.held for row in rows] == [True, True, False, False]
