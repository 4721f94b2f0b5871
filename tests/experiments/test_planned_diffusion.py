"""The Planned Diffusion experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[planned_diffusion]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

import numpy as np

from experiments import planned_diffusion as pdx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.planned_diffusion --smoke`` must have written under
  ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "planned_diffusion.png").stat().st_size > 0
  run = saved["runs"][0]
  cfg = saved["config"]
  k = cfg["max_spans"]
  assert set(pdx.pd_settings(saved)) == {f"pd_r{r:g}" for r in cfg["step_ratios"]} | {
      f"pd_r{min(cfg['step_ratios']):g}_tau{pdx.TAU:g}"}
  for arm in run["arms"].values():
    assert 0.0 <= arm["em"] <= 1.0 and len(arm["em_k"]) == len(arm["passes_k"]) == k
  for name in pdx.pd_settings(saved):
    arm = run["arms"][name]
    # passes = plan + denoising, per K
    np.testing.assert_allclose(arm["passes_k"], np.add(arm["plan_passes_k"],
                                                       arm["denoise_passes_k"]))
    assert f"mdm_{run['matched_mdm'][name]}" in run["arms"]
  assert all(run["arms"][f"mdm_{s}"]["passes"] == s for s in cfg["mdm_steps"])
  assert len(pdx.claims(saved)) == 3


def _result(em: dict, passes_k: dict, seeds: int = 2) -> dict:
  """Hand-built runs: ``em[arm]`` per seed; ``passes_k[arm]`` (total, denoise) per K."""
  runs = []
  for s in range(seeds):
    arms = {}
    for name, value in em.items():
      tot, den = passes_k.get(name, ([10.0, 10.0, 10.0], [0.0, 0.0, 0.0]))
      arms[name] = {"em": value[s], "passes": float(np.mean(tot)), "passes_k": tot,
                    "denoise_passes_k": den, "plan_passes_k": list(np.subtract(tot, den))}
    runs.append({"arms": arms, "matched_mdm": {"pd_r1": 18, "pd_r0.5": 14}})
  return {"runs": runs, "config": {"max_spans": 3}}


def test_claims_on_hand_built_results():
  pd_k = ([14.0, 19.0, 23.0], [9.0, 10.0, 10.5])  # denoising flat in K, plan grows
  ar_k = ([9.0, 18.0, 27.0], [0.0, 0.0, 0.0])  # 9 passes per span
  good = _result({"ar": [0.95, 0.97], "pd_r1": [0.93, 0.94], "pd_r0.5": [0.9, 0.9],
                  "mdm_18": [0.1, 0.2], "mdm_14": [0.0, 0.1]},
                 {"pd_r1": pd_k, "pd_r0.5": pd_k, "ar": ar_k})
  assert [c.held for c in pdx.claims(good)] == [True, True, True]
  # PD 8 points below AR; denoising grows 3 per span (over 9 / 4); MDM ahead at r = 0.5
  steep = ([14.0, 19.0, 23.0], [4.0, 7.0, 10.0])
  bad = _result({"ar": [0.95, 0.97], "pd_r1": [0.87, 0.89], "pd_r0.5": [0.3, 0.3],
                 "mdm_18": [0.1, 0.2], "mdm_14": [0.4, 0.3]},
                {"pd_r1": steep, "pd_r0.5": steep, "ar": ar_k})
  assert [c.held for c in pdx.claims(bad)] == [False, False, False]
  assert pdx.claims({"runs": []}) == []
