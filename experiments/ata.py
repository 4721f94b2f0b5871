"""ATA: steering selected heads to the active subtask on multi-subtask prompts.

    python -m experiments.ata [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. one tiny transformer (``jaxlab.models.transformer``, trained with
   ``jaxlab.training.fit``) on Parallel multi-subtask prompts (``jaxlab.data.subtasks``)
   with ``m`` in {1, 2} subtasks, each ``<label> <op> d d d ;`` (ops copy / rev / inc / sort),
   answered in order as ``<label> r r r`` separated by ``|``;
2. heads ranked by their attention mass on the gold active span
   (``jaxlab.safety.ata.head_scores``) on held-out ``m = 2`` rows (teacher-forced);
3. on fresh prompts with ``m = 3`` and ``m = 4`` subtasks, greedy decoding in the arms
   ``direct`` (no masks), ``ata`` (mutual + dynamic mask on the top-k heads, alpha =
   log 100), ``no_mutual``, ``no_dynamic``, ``random_heads`` (k random heads) and
   ``wrong_key`` (the dynamic mask keyed to the next subtask instead of the active one), and
   the diagnostic ``oracle_key`` (not the paper's: ATA with the gold key, the number of
   ``|`` generated so far, in place of the score and its gate);
   then a sweep of alpha and of the head count k for ATA.

Metrics: per-subtask exact match (pooled and per subtask index), and the shares of
subtasks answered Mixed (another (op, digits) pair of the prompt), Wrong or Omitted
(``jaxlab.data.subtasks.grade``); the share of prompts whose score-chosen key ever moved
past the first subtask; the in-distribution exact match at ``m = 2`` (direct) is recorded
as a check of training.

The paper (LLMs, real instructions) reports that ATA raises exact match and cuts Mixed and
Wrong errors, and that random or misguided steering falls below direct. Spec-scale flags
for a GPU run: ``--d-model 128 --num-layers 4 --steps 6000 --train-rows 40000 --tests 1000``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.data import subtasks as st
from jaxlab.models import transformer as tfm
from jaxlab.safety import ata

ARMS = ("direct", "ata", "no_mutual", "no_dynamic", "random_heads", "wrong_key", "oracle_key")
TEST_MS = (3, 4)
M_MAX = max(TEST_MS)
PROMPT = st.prompt_len(M_MAX) + 8  # test prompts: 8 filler tokens at m = 4
MAX_NEW = st.answer_len(M_MAX)
ROW = PROMPT + MAX_NEW
FAIL_MAX = 0.8  # the failure occurs: direct exact match at m = 3, 4 below this (every seed)

CONFIGS = {
    "smoke": dict(seeds=1, train_rows=64, d_model=16, num_heads=2, num_layers=1, steps=4,
                  batch=16, lr=3e-3, tests=8, calib=8, heads=1, alphas=(1.0,),
                  head_counts=(1,), digit_pool=6),
    "quick": dict(seeds=1, train_rows=4000, d_model=64, num_heads=4, num_layers=2, steps=1000,
                  batch=64, lr=3e-3, tests=150, calib=128, heads=4, alphas=(1.0, 2.0, 4.6, 8.0),
                  head_counts=(2, 4, 8), digit_pool=6),
    "full": dict(seeds=3, train_rows=8000, d_model=64, num_heads=4, num_layers=2, steps=2500,
                 batch=64, lr=3e-3, tests=300, calib=256, heads=4,
                 alphas=(1.0, 2.0, 4.6, 8.0), head_counts=(2, 4, 8), digit_pool=6),
}


def make_programs(cfg: dict) -> dict:
  """The jitted training program of one scale (compiled once, shared by the seeds)."""
  model_cfg = tfm.TransformerConfig(st.VOCAB, cfg["d_model"], cfg["num_heads"],
                                    cfg["num_layers"], ROW)

  @jax.jit
  def train(key, tokens, mask):
    return tfm.fit_next_token(key, model_cfg, tokens, mask, optax.adamw(cfg["lr"]),
                              num_steps=cfg["steps"], batch_size=cfg["batch"])

  return {"train": train, "net": tfm.graph(model_cfg)}


def _rates(tests: st.TestSet, tokens: np.ndarray, keys: np.ndarray | None = None) -> dict:
  """Category shares over all subtasks, exact match per subtask index, and (given the
  keys ATA used) the share of prompts whose key ever left the first subtask."""
  graded = [st.grade(ts, row) for ts, row in zip(tests.tasks, tokens, strict=True)]
  cats = [c for g in graded for c in g]
  out = {c: cats.count(c) / len(cats) for c in st.CATEGORIES}
  out["by_index"] = [float(np.mean([g[i] == "correct" for g in graded]))
                     for i in range(len(graded[0]))]
  if keys is not None:
    out["key_moved"] = float(np.mean(keys.max(1) > 0))
  return out


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  rng = np.random.default_rng(seed)
  k_train, k_rand = jax.random.split(jax.random.key(seed))
  rows = st.training_rows(rng, cfg["train_rows"], (1, 2), ROW, cfg["digit_pool"])
  params, losses = prog["train"](k_train, jnp.asarray(rows.tokens), jnp.asarray(rows.mask))
  net = prog["net"].replace(params=params)
  shape = (cfg["num_layers"], cfg["num_heads"])

  # head ranking on teacher-forced held-out m = 2 rows (gold active spans)
  calib = st.training_rows(rng, cfg["calib"], (2,), ROW, cfg["digit_pool"])
  attn = net.module().forward(jnp.asarray(calib.tokens[:, :-1]), return_attention=True).attention
  scores = ata.head_scores(attn, jnp.asarray(calib.query_span),
                           jnp.asarray(calib.span_id[:, :-1]))
  exclusive = ata.exclusive_pairs(M_MAX, ata.PARALLEL)

  def decode(tests, heads, **kw):
    out = ata.generate(net, tests.prompts, tests.span_id, exclusive, heads, max_new=MAX_NEW,
                       num_spans=M_MAX, structure=ata.PARALLEL, **kw)
    return _rates(tests, np.asarray(out.tokens), np.asarray(out.keys))

  top = ata.select_heads(scores, cfg["heads"])
  rand = ata.random_heads(k_rand, shape, cfg["heads"])
  zero = jnp.zeros(shape)
  arms_kw = {"direct": (zero, {}), "ata": (top, {}), "no_mutual": (top, {"mutual": False}),
             "no_dynamic": (top, {"dynamic": False}), "random_heads": (rand, {}),
             "wrong_key": (top, {"key_shift": 1}),
             "oracle_key": (top, {"oracle_sep": st.BAR})}
  result = {"seed": seed, "final_loss": float(np.mean(np.asarray(losses)[-20:])),
            "head_scores": np.asarray(scores).tolist(), "arms": {}, "alpha_sweep": {},
            "head_sweep": {}}
  result["in_dist_m2"] = decode(st.test_set(rng, cfg["tests"], 2, PROMPT, cfg["digit_pool"]),
                                zero)["correct"]
  for m in TEST_MS:
    tests = st.test_set(rng, cfg["tests"], m, PROMPT, cfg["digit_pool"])
    result["arms"][m] = {a: decode(tests, h, **kw) for a, (h, kw) in arms_kw.items()}
    result["alpha_sweep"][m] = {str(a): decode(tests, top, alpha=a)["correct"]
                                for a in cfg["alphas"]}
    result["head_sweep"][m] = {
        str(k): decode(tests, ata.select_heads(scores, k))["correct"]
        for k in cfg["head_counts"] if k <= shape[0] * shape[1]}
  return result


def run(cfg: dict, args) -> dict:
  prog = make_programs(cfg)
  runs = seed_runs(args.out, cfg, lambda s: run_seed(s, cfg, prog), "ata")
  return {"runs": runs}


def _g(result: dict, m, arm: str, metric: str) -> np.ndarray:
  return np.array([r["arms"][str(m)][arm][metric] for r in result["runs"]], float)


def claims(result: dict) -> list[Claim]:
  """The claims as report rows, from a ``results.json`` dict of any scale.

  1. The failure occurs: direct exact match at m = 3 and m = 4 is below ``FAIL_MAX`` in
     every seed, while m = 2 (in distribution) is higher than both.
  2. ATA raises per-subtask exact match over direct at m = 3 and 4 (means).
  3. ATA cuts the Mixed + Wrong error rate vs direct at m = 3 and 4 (means).
  4. Random heads and the wrong key fall below ATA (means, m = 3 and 4).
  5. Each of the mutual and the dynamic mask matters: dropping either lowers exact match
     vs ATA (means, m = 3 and 4).
  """
  if not result["runs"]:
    return []
  runs = result["runs"]
  ms = TEST_MS
  direct = {m: _g(result, m, "direct", "correct") for m in ms}
  ataem = {m: _g(result, m, "ata", "correct") for m in ms}
  m2 = np.array([r["in_dist_m2"] for r in runs], float)
  fmt = lambda d: ", ".join(f"m={m} {pm(d[m])}" for m in ms)  # noqa: E731
  rows = [Claim("Trained on m <= 2, the direct model fails at m = 3, 4 (the failure ATA fixes)",
                f"direct exact match {fmt(direct)}; in distribution m=2 {pm(m2)} (threshold "
                f"{FAIL_MAX:.2f})",
                bool(all(np.all(direct[m] < FAIL_MAX) for m in ms)
                     and all(m2.mean() > direct[m].mean() for m in ms)))]
  rows.append(Claim("ATA raises per-subtask exact match over direct",
                    f"ATA {fmt(ataem)} vs direct {fmt(direct)}",
                    bool(all(ataem[m].mean() > direct[m].mean() for m in ms))))
  mw = lambda arm, m: _g(result, m, arm, "mixed") + _g(result, m, arm, "wrong")  # noqa: E731
  rows.append(Claim("ATA cuts Mixed + Wrong errors vs direct",
                    "; ".join(f"m={m} ATA {pm(mw('ata', m))} vs direct {pm(mw('direct', m))}"
                              for m in ms),
                    bool(all(mw("ata", m).mean() < mw("direct", m).mean() for m in ms))))
  bad = {a: {m: _g(result, m, a, "correct") for m in ms} for a in ("random_heads", "wrong_key")}
  rows.append(Claim("Random heads and a wrong key steer worse than ATA",
                    "; ".join(f"{a} {fmt(bad[a])}" for a in bad),
                    bool(all(bad[a][m].mean() < ataem[m].mean() for a in bad for m in ms))))
  abl = {a: {m: _g(result, m, a, "correct") for m in ms} for a in ("no_mutual", "no_dynamic")}
  rows.append(Claim("Both masks matter: dropping the mutual or the dynamic mask lowers exact "
                    "match", "; ".join(f"{a} {fmt(abl[a])}" for a in abl),
                    bool(all(abl[a][m].mean() < ataem[m].mean() for a in abl for m in ms))))
  return rows


TABLE_HEAD = ["m", "arm", "exact match", "mixed", "wrong", "omitted",
              "exact match by subtask", "key moved"]


def _by_index(result: dict, m, arm: str) -> str:
  per = np.array([r["arms"][str(m)][arm]["by_index"] for r in result["runs"]], float)
  return " / ".join(f"{v:.2f}" for v in per.mean(0))


def table_rows(result: dict) -> list[list[str]]:
  return [[str(m), arm] + [pm(_g(result, m, arm, c)) for c in st.CATEGORIES]
          + [_by_index(result, m, arm), pm(_g(result, m, arm, "key_moved"), ".2f")]
          for m in TEST_MS for arm in ARMS]


def sweep_rows(result: dict, which: str) -> list[list[str]]:
  keys = list(result["runs"][0][which][str(TEST_MS[0])]) if result["runs"] else []
  return [[str(m), k, pm([r[which][str(m)][k] for r in result["runs"]])]
          for m in TEST_MS for k in keys]


def table(result: dict) -> str:
  from experiments.reporting import markdown_table  # noqa: PLC0415

  return (table_and_claims(TABLE_HEAD, table_rows(result), claims(result))
          + "\n\nalpha sweep (ATA exact match)\n\n"
          + markdown_table(["m", "alpha", "exact match"], sweep_rows(result, "alpha_sweep"))
          + "\n\nhead-count sweep (ATA exact match)\n\n"
          + markdown_table(["m", "k", "exact match"], sweep_rows(result, "head_sweep")))


def note(result: dict) -> str:
  runs = result["runs"]
  return (f"{len(runs)} seed(s); final training loss {pm([r['final_loss'] for r in runs])}; "
          f"trained on m in {{1, 2}}, tested on m in {TEST_MS}.")


def plot(result: dict, out: str) -> list[str]:
  if not result["runs"]:
    return []
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
  x = np.arange(len(ARMS))
  for j, m in enumerate(TEST_MS):
    bottom = np.zeros(len(ARMS))
    for c in st.CATEGORIES:
      v = np.array([_g(result, m, a, c).mean() for a in ARMS])
      axes[j].bar(x, v, bottom=bottom, label=c)
      bottom += v
    axes[j].set_xticks(x, ARMS, rotation=30, fontsize=7)
    axes[j].set_title(f"m = {m}: per-subtask outcome")
  axes[0].legend(fontsize=7)
  for m in TEST_MS:
    sw = result["runs"][0]["alpha_sweep"][str(m)]
    a = [float(k) for k in sw]
    axes[2].plot(a, [np.mean([r["alpha_sweep"][str(m)][k] for r in result["runs"]])
                     for k in sw], "o-", label=f"m={m}")
  axes[2].set_xlabel("alpha")
  axes[2].set_ylabel("ATA exact match")
  axes[2].legend(fontsize=7)
  return [save_figure(fig, out, "ata.png")]


def cli() -> ExperimentCLI:
  return ExperimentCLI(__doc__, CONFIGS, out="results/ata",
                       quick_help="1 seed, small sizes (about a minute on one core)")


def main(argv=None) -> dict:
  return run_experiment(argv, cli(), "ata", run, plot, table, note,
                        after=lambda r, a: clear_seed_runs(a.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/ata.md


def _report(record: dict) -> str:
  runs, c = record["runs"], record["config"]
  m2 = [r["in_dist_m2"] for r in runs]
  return ("\n" + f"Model {c['num_layers']} layers x {c['num_heads']} heads, d = {c['d_model']} "
          f"({P.thousands(c['steps'])} steps on {P.thousands(c['train_rows'])} rows with m in "
          f"{{1, 2}}), {c['heads']} steered heads, {P.thousands(c['tests'])} test prompts per m, "
          + (f"{c['seeds']} seeds, {P.seconds(record['wall_time_s'])}; mean ± std over seeds:"
             if c["seeds"] > 1 else f"1 seed, {P.seconds(record['wall_time_s'])}:") + "\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + f"In distribution (m = 2, direct) exact match: {P.pm(m2)}.\n\n"
          + "ATA's exact match over alpha and over the number of steered heads k:\n\n"
          + P.table(["m", "alpha", "exact match"], sweep_rows(record, "alpha_sweep"))
          + "\n\n"
          + P.table(["m", "k", "exact match"], sweep_rows(record, "head_sweep")) + "\n\n"
          + P.claims_table("ata", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("ata", _report)


if __name__ == "__main__":
  main()
