"""The TRU experiment: its smoke results (the smoke run executes in the Colab notebook's test,
which checks them with :func:`check_smoke_results`), its data splits and arm weights, and
claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import tru
from jaxlab.data import entity_facts as ef

CFG = tru.CONFIGS["smoke"]


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.tru --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "tru.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == {"base", *tru.arm_names(saved["config"])}
  for arm in run["arms"].values():
    for s in tru.SETS:
      m = arm[s]
      assert abs(m["answer"] + m["refusal"] + m["degenerate"] - 1) < 1e-9
      assert 0 <= m["accuracy"] <= min(m["answer"], m["leak"]) + 1e-9  # exact answers leak
  assert len(tru.claims(saved)) == 6


def test_splits_and_targets():
  data = tru.build_data(0, CFG)
  world, tok = data["world"], data["tok"]
  words = lambda row: [tok.words[i] for i in row]  # noqa: E731
  forget = {w[3] for w in map(words, data["evals"]["forget_A"]["tokens"])}
  held = {w[4] for w in map(words, data["evals"]["heldout_B"]["tokens"])}
  retain = {w[3] for w in map(words, data["evals"]["retain_A"]["tokens"])}
  ents = lambda names: {int(n[1:]) for n in names}  # noqa: E731
  # D_u and the held-out entities split forget domain d0; the retain facts are elsewhere
  assert ents(forget) | ents(held) == set(np.flatnonzero(world.domains == tru.FORGET_DOMAIN))
  assert not ents(forget) & ents(held) and len(forget) == len(held)
  assert all(world.domains[e] != tru.FORGET_DOMAIN for e in ents(retain))
  # TRU's target rows are the forget questions with the trace and the response
  t_tokens, t_trace, t_resp = data["targets"]["tru"]
  assert np.array_equal(t_tokens[:, :ef.PROMPT], data["forget"]["tokens"][:, :ef.PROMPT])
  assert (t_trace.sum(1) == 8).all() and (t_resp.sum(1) == 4).all()
  assert (data["targets"]["no_reason"][1].sum(1) == 0).all()
  assert words(data["targets"]["idk"][0][0])[ef.PROMPT:ef.PROMPT + 2] == ["idk", "<eos>"]
  # pretraining: every fact in both templates and every domain statement
  n = CFG["entities"] * CFG["relations"] * 2 + CFG["entities"]
  assert data["pretrain"][0].shape == (n, ef.ROW)


def test_arm_weights():
  w, kinds = tru.arm_weights(CFG)
  names = tru.arm_names(CFG)
  row = dict(zip(names, w.tolist(), strict=True))
  assert row["ga"] == [1, 0, 0, 0] and row["graddiff"] == [1, 1, 0, 0]
  assert row["npo"] == [0, 1, 1, 0] and row["idk"] == [0, 1, 0, 1]
  assert np.allclose(row["tru_a0.3"], [0.3, 0.3, 0, 1]) and row["tru_no_ga"] == [0, 0, 0, 1]
  assert np.allclose(row["tru_no_ascent"], [0, 0.3, 0, 1])
  assert dict(zip(names, kinds, strict=True))["tru_no_reason"] == "no_reason"


def _sets(leak=0.0, refusal=0.9, degenerate=0.1, accuracy=0.0, retain=1.0, over=0.0):
  forget = {"leak": leak, "accuracy": accuracy, "answer": 1 - refusal - degenerate,
            "refusal": refusal, "degenerate": degenerate}
  keep = {"leak": retain, "accuracy": retain, "answer": 1 - over, "refusal": over,
          "degenerate": 0.0}
  return {**{s: dict(forget) for s in tru.LEAK_SETS}, "retain_A": keep, "retain_B": dict(keep)}


def _result(arms: dict, seeds: int = 2) -> dict:
  names = ["base", *tru.arm_names(CFG)]
  return {"config": CFG, "runs": [{"arms": {a: _sets(**arms.get(a, {})) for a in names}}
                                  for _ in range(seeds)]}


def test_claims_on_hand_built_results():
  good = _result({"base": dict(leak=1.0, refusal=0.0, degenerate=0.0, accuracy=1.0),
                  "ga": dict(leak=0.4, refusal=0.0, degenerate=0.9, retain=0.1),
                  "graddiff": dict(leak=0.5, refusal=0.0, degenerate=0.5, retain=0.7),
                  "tru_no_reason": dict(retain=0.8, over=0.2),
                  "tru_no_ga": dict(leak=0.2)})
  assert [c.held for c in tru.claims(good)] == [True] * 6
  # base never learned; baselines neither leak nor degenerate; TRU leaks; TRU loses retention
  # (below GA's); no over-refusal without the trace; no-GA leaks as little as TRU
  bad = _result({"base": dict(leak=0.5, refusal=0.0, degenerate=0.0, accuracy=0.5),
                 "ga": dict(leak=0.0, degenerate=0.2, retain=1.0),
                 "graddiff": dict(leak=0.0, degenerate=0.2),
                 "tru_a0.3": dict(leak=0.3, refusal=0.3, retain=0.5),
                 "tru_no_reason": dict(retain=0.5),
                 "tru_no_ga": dict(leak=0.3)})
  assert [c.held for c in tru.claims(bad)] == [False] * 6
  assert tru.claims({"config": CFG, "runs": []}) == []
