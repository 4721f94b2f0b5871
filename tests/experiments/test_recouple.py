"""The ReCouPLe experiment end to end at the smallest setting (its data: tests/data).

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the flags and the report rows.
"""

import json
import pathlib

import numpy as np
import pytest

from experiments import recouple as ex
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.recouple --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[recouple]`` runs that notebook's
  ``--smoke`` cell and then calls this on its output).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["wall_time_s"] > 0 and len(saved["settings"]) == 1 and saved["scale"] == "smoke"
  assert saved["figures"]
  for name in saved["figures"]:
    assert (out / pathlib.Path(name).name).stat().st_size > 0, name
  st = saved["settings"][0]
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
  assert "recouple − bt (paired)" in (out / "summary.md").read_text()


def test_bad_seeds():
  with pytest.raises(ValueError, match="--seeds"):
    ex.main(["--smoke", "--seeds", "0"])


def _synthetic(all_gain=0.02):
  """The two regimes, one shift each, two seeds; ReCouPLe gains 0.2 (partial) and
  ``all_gain`` (all) over Bradley-Terry in every seed and split."""
  acc = lambda v: {"per_seed": v, "mean": float(np.mean(v))}
  settings = []
  for regime, gain in (("partial", 0.2), ("all", all_gain)):
    bt = {split: acc([0.5, 0.6]) for split in ("ood", "new_zero_shot")}
    ours = {split: acc([0.5 + gain, 0.6 + gain]) for split in ("ood", "new_zero_shot")}
    settings.append({"regime": regime, "shift": 0.5, "methods": {"bt": bt, "recouple": ours}})
  return {"config": {"seeds": 2}, "settings": settings}


def test_claims_on_synthetic_results():
  rows = ex.claims(_synthetic())
  assert len(rows) == 4  # (ood, zero-shot) for the partial, then the all regime
  check_claims(rows)
  # a gain of 0.2 in every seed holds; 0.02 is below the 0.1 the claim needs
  assert [row.held for row in rows] == [True, True, False, False]
  assert [row.held for row in ex.claims(_synthetic(all_gain=0.15))] == [True] * 4
