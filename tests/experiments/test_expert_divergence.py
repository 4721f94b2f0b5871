"""The Expert Divergence Learning experiment end to end at its smallest setting.

Its ``--smoke`` run executes in the Colab notebook's test, which checks it with
:func:`check_smoke_results`; the rest of this module tests the report rows.
"""

import json
import math
import pathlib

from experiments import expert_divergence as edl_exp
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.expert_divergence --smoke`` must have written under ``out``.

  The smoke run itself executes once per suite, inside its Colab notebook
  (``tests/colab/test_notebooks.py::test_notebook_runs[expert_divergence]``).
  """
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  cfg = saved["config"]
  names = [a["name"] for a in saved["arms"]]
  assert len(names) == len(cfg["betas"]) + 1 and saved["arms"][-1]["random_labels"]
  for name in names:
    final = saved["final"][name]
    assert len(final["ce"]) == cfg["seeds"]
    assert len(final["ce_domain"][0]) == cfg["domains"]
    # the model learned something: below the uniform guess over the vocabulary
    assert all(0 < ce < math.log(cfg["vocab"] + 5) for ce in final["ce"])
    assert all(0 <= j <= math.log(2) + 1e-6 for j in final["jsd"])
    assert all(0 <= m <= math.log(cfg["domains"]) + 1e-6 for m in final["mi"])
    assert all(0 < h <= math.log(cfg["experts"]) + 1e-6 for h in final["load_entropy"])
    assert len(saved["curves"][name]["ce"][0]) == cfg["num_evals"]
  check_claims(edl_exp.claims(saved))
  for name in saved["figures"]:
    assert (out / name).stat().st_size > 0, name
  assert "routing JSD" in (out / "summary.md").read_text()


def _synthetic(jsd_up=(0.1, 0.2), ce_change=-0.01, control_ce=0.02, control_jsd=0.01):
  """Two seeds: the baseline, beta 0.05 and its random-label control."""
  base = {"ce": [2.0, 2.1], "jsd": [0.01, 0.02], "mi": [0.05, 0.06]}
  edl = {"ce": [2.0 + ce_change, 2.1 + ce_change],
         "jsd": [0.01 + jsd_up[0], 0.02 + jsd_up[1]], "mi": [0.3, 0.4]}
  ctrl = {"ce": [2.0 + control_ce, 2.1 + control_ce], "jsd": [control_jsd, 0.03],
          "mi": [0.06, 0.07]}
  arms = [{"name": "beta=0", "beta": 0.0, "random_labels": False},
          {"name": "beta=0.05", "beta": 0.05, "random_labels": False},
          {"name": "random", "beta": 0.05, "random_labels": True}]
  return {"arms": arms, "final": {"beta=0": base, "beta=0.05": edl, "random": ctrl}}


def test_claims_on_synthetic_results():
  rows = check_claims(edl_exp.claims(_synthetic()))
  assert len(rows) == 5
  assert [r.held for r in rows] == [True, True, True, True, True]
  assert "up in 2/2" in rows[0].measured and "lower in 2/2" in rows[4].measured
  # JSD falls in one seed, CE rises, the control helps CE and diverges more than EDL
  rows = edl_exp.claims(_synthetic(jsd_up=(0.1, -0.01), ce_change=0.01, control_ce=-0.01,
                                   control_jsd=0.5))
  assert [r.held for r in rows] == [False, True, False, False, False]
  assert edl_exp.claims({"arms": [], "final": {}}) == []
