"""The ssToken experiment: its smoke results (checked on the Colab notebook's run), the noisy
data, and claims() on hand-built results."""

import json
import pathlib

import jax
import numpy as np

from experiments import sstoken


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.sstoken --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "sstoken.png").exists()
  assert saved["config"]["length"] == 3
  run = saved["runs"][0]
  for arm in sstoken.ARMS:
    assert [h["step"] for h in run[arm]] == [4, 8]
    assert all(0.0 <= h["em"] <= 1.0 and np.isfinite(h["ce"]) for h in run[arm])
  # full SFT trains on every response token, the selecting arms on ceil(0.6 * 6) = 4 of 6
  assert all(h["train_kept"] == 1.0 for h in run["full"])
  assert all(abs(h["train_kept"] - 4 / 6) < 1e-6 for h in run["sstoken"])
  assert all(h["train_noise_kept"] == 1.0 == h["train_clean_kept"] for h in run["full"])
  assert len(sstoken.claims(saved)) == 4


def test_corruption_hits_the_stated_shares():
  data = sstoken.task_rows(jax.random.key(0), 1000, 5)
  noisy, where = sstoken.corrupt(jax.random.key(1), data, 5, 0.3, 0.4)
  rows = where.any(1)
  assert abs(float(rows.mean()) - 0.3) < 0.05
  assert set(np.asarray(where.sum(1))[np.asarray(rows)].tolist()) == {2}  # round(0.4 * 5)
  assert bool(np.all((noisy != data.tokens) == where))  # a corrupted digit always changes
  text = sstoken.TOKENIZER.decode(data.tokens[0]).split()
  assert text[0] == "<bos>" and text[1] in ("sort", "reverse") and text[7] == "<sep>"
  assert text[8:10] == ["answer", "is"] and text[-1] == "<eos>" and data.prompt_len == 8
  digits = [int(t) for t in text[2:7]]
  answer = sorted(digits) if text[1] == "sort" else digits[::-1]
  assert [int(t) for t in text[10:15]] == answer
  np.testing.assert_array_equal(data.loss_mask[0], [0] * 7 + [1] * 8)  # answer is y EOS


def _result(em):
  runs = [{a: [{"em": em[a][s], "ce": 1.0}] for a in sstoken.ARMS} for s in range(3)]
  return {"runs": runs}


def test_claims_on_hand_built_results():
  good = {"full": [0.5, 0.4, 0.6], "random": [0.5] * 3, "loss_only": [0.6, 0.5, 0.7],
          "attn_only": [0.55, 0.45, 0.65], "sstoken": [0.7, 0.6, 0.8],
          "sstoken_ema": [0.7] * 3}
  assert [c.held for c in sstoken.claims(_result(good))] == [True] * 4
  bad = {**good, "sstoken": [0.3, 0.9, 0.2], "attn_only": [0.4, 0.3, 0.5]}
  assert [c.held for c in sstoken.claims(_result(bad))] == [False] * 4
  assert sstoken.claims({"runs": []}) == []
