"""The quant_optim experiment end to end at its smallest setting."""

import json
import os

import numpy as np
import pytest

from experiments import quant_optim


def test_smoke_run_writes_results_figures_and_table(tmp_path, capsys):
  res = quant_optim.main(["--smoke", "--out", str(tmp_path)])
  for name in ("results.json", "summary.md", "mantissa_sweep.png", "component_ablation.png",
               "beta2_sweep.png", "mantissa_vs_horizon.png", "mlp_accuracy.png"):
    assert os.path.getsize(tmp_path / name) > 0, name
  saved = json.loads((tmp_path / "results.json").read_text())
  assert len(saved["mantissa_sweep"]["final_loss"]["adam/nearest"]) == 23
  table = capsys.readouterr().out
  assert "| result | headline | detail |" in table and "MLP Adam storage=int8" in table
  # Values, not just shapes: at M = 1 nearest, quantized weights stall the noisy
  # least squares above fp32 (the ablation's W column, component index 1), even
  # after the smoke setting's 40 steps.
  ablation = np.array(res["ablation"]["final_loss"]["adam/nearest"])  # (M, 4, seeds)
  fp32 = np.median(res["ablation"]["final_loss"]["adam/fp32"])
  assert ablation[0, 1].mean() > 1.3 * fp32
  assert np.allclose(ablation[-1, 0], fp32, rtol=0.05)  # G at M = 7 ~ fp32


def test_bad_flags():
  with pytest.raises(SystemExit):
    quant_optim.main(["--dataset", "imagenet"])
  with pytest.raises(ValueError, match="seeds"):
    quant_optim.main(["--smoke", "--seeds", "0"])
