"""G-NLL: one greedy decode as the uncertainty score, against four sampled scores.

    python -m experiments.g_nll [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. a synthetic fact world (``jaxlab.data.fact_qa``): ``entities x relations`` questions
   ``BOS e r SEP``, answers of 2-6 words ending in EOS, 20% of the questions with 2-3
   valid answers (0.6 / 0.3 / 0.1), every answer in two surface forms (its first word or
   that word's synonym token, 0.7 / 0.3);
2. ``steps x batch`` training statements whose entity is drawn with Zipf weight
   ``(rank + 1) ** -zipf_a``, so questions are seen from 0 to hundreds of times and the
   greedy accuracy on all questions lands near 50%;
3. a small transformer (``layers`` x ``d_model``, RoPE) trained on them by next-token loss
   on the answer tokens, one pass in order: a question's count of statements is the number
   of times training saw it;
4. on every question: the greedy answer (correct if it canonicalises to a valid answer),
   G-NLL and LN-G-NLL from it, ``samples`` = 10 answers at temperature 1 for PE, LN-PE,
   SE and D-SE (clusters: synonym -> canonical token, then exact match), the NLL of one
   sampled answer, and a width-``beam`` beam search's best NLL (the "exact MSP" check);
   AUROC of each score for telling incorrect from correct answers, and each score's cost
   in forward passes per question (one per decoded token up to EOS).

The paper (6 LLMs x 6 QA sets) finds G-NLL at least as good as the sampled scores at the
cost of one decode, and length normalisation hurting. Sized to run on CPU: the spec's
model (2 layers, d = 128) at every scale; a GPU run can raise ``--entities`` and
``--steps`` together (the accuracy is set by the training views per question, i.e. by
``steps x batch`` over the questions and ``--zipf-a``).
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
from jaxlab.data import fact_qa
from jaxlab.data.lm_tasks import EOS, PAD
from jaxlab.inference import g_nll as gn
from jaxlab.models import transformer as tfm
from jaxlab.training import fit

# (key, label) of every score, the paper's first
SCORES = (("g_nll", "G-NLL"), ("ln_g_nll", "LN-G-NLL"), ("pe", "PE"), ("ln_pe", "LN-PE"),
          ("se", "SE"), ("dse", "D-SE"), ("sample_nll", "NLL of one sample"),
          ("beam_nll", "beam NLL"))
SAMPLED = ("pe", "ln_pe", "se", "dse")
COST = {"g_nll": "greedy", "ln_g_nll": "greedy", "pe": "samples", "ln_pe": "samples",
        "se": "samples", "dse": "samples", "sample_nll": "one_sample", "beam_nll": "beam"}
MATCH = 0.02  # "matches": mean AUROC at most this far below
TENTH = 0.15  # "about a tenth of the cost": G-NLL's passes / the sampled scores' passes
ACCURACY_RANGE = (0.35, 0.65)  # "near 50%": the test bed's check
EXPOSURE_BINS = ((0, 0), (1, 2), (3, 9), (10, None))

CONFIGS = {
    "smoke": dict(seeds=1, entities=24, relations=2, words=8, zipf_a=1.0,
                  synonym_prob=0.3, multi_share=0.2, layers=1, d_model=16, heads=2,
                  steps=20, batch=32, lr=3e-3, samples=4, beam=4),
    "quick": dict(seeds=1, entities=150, relations=2, words=24, zipf_a=1.6,
                  synonym_prob=0.3, multi_share=0.2, layers=2, d_model=128, heads=4,
                  steps=600, batch=64, lr=2e-3, samples=10, beam=16),
    "full": dict(seeds=3, entities=300, relations=2, words=32, zipf_a=1.6,
                 synonym_prob=0.3, multi_share=0.2, layers=2, d_model=128, heads=4,
                 steps=2000, batch=64, lr=2e-3, samples=10, beam=16),
}


def _model_config(cfg: dict, world: fact_qa.FactQA) -> tfm.TransformerConfig:
  return tfm.TransformerConfig(world.vocab_size, cfg["d_model"], cfg["heads"], cfg["layers"],
                               fact_qa.PROMPT_LEN + world.answer_tokens_len)


def _world(cfg: dict, key: jax.Array) -> fact_qa.FactQA:
  return fact_qa.fact_qa(key, cfg["entities"], cfg["relations"], cfg["words"],
                         multi_share=cfg["multi_share"])


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, compiled once and shared by every seed."""
  # the world's sizes (static); its arrays come from `data`
  shape = fact_qa.FactQA(None, None, None, cfg["entities"], cfg["relations"], cfg["words"],
                         fact_qa.MAX_LEN)
  model_cfg = _model_config(cfg, shape)
  net = tfm.graph(model_cfg)
  max_new = shape.answer_tokens_len

  @jax.jit
  def data(k_world, k_data):
    world = _world(cfg, k_world)
    d, counts = fact_qa.statements(k_data, world, cfg["steps"] * cfg["batch"],
                                   zipf_a=cfg["zipf_a"], synonym_prob=cfg["synonym_prob"])
    return (world.words, world.lengths, world.probs), d.tokens, d.loss_mask, counts

  @jax.jit
  def train(key, tokens, mask):
    params = tfm.create(model_cfg, key).params
    loss = lambda p, batch, _: tfm.next_token_loss(net.replace(params=p), *batch)  # noqa: E731
    sched = optax.warmup_cosine_decay_schedule(0.0, cfg["lr"], cfg["steps"] // 20,
                                               cfg["steps"], cfg["lr"] / 10)
    per_step = lambda x: x.reshape(cfg["steps"], cfg["batch"], *x.shape[1:])  # noqa: E731
    res = fit(loss, optax.adam(sched), params, batches=(per_step(tokens), per_step(mask)))
    return res.state.params, res.losses

  @jax.jit
  def evaluate(params, key, world_arrays):
    world = shape._replace(words=world_arrays[0], lengths=world_arrays[1],
                           probs=world_arrays[2])
    prompts, table = fact_qa.questions(world), fact_qa.canonical_map(world)
    model = net.replace(params=params)
    greedy = gn.g_nll(model, prompts, max_new, eos_id=EOS, pad_id=PAD)
    s = gn.sample_answers(model, prompts, key, cfg["samples"], max_new, eos_id=EOS,
                          pad_id=PAD)
    lp = jnp.sum(s.log_probs, -1)  # (Q, N) sequence log-probs
    clusters = gn.cluster_ids(gn.canonicalize(s.tokens, table))
    beam, beam_tokens, beam_passes = gn.beam_nll(model, prompts, cfg["beam"], max_new,
                                                 eos_id=EOS, pad_id=PAD)
    scores = {"g_nll": greedy.g_nll, "ln_g_nll": greedy.ln_g_nll,
              "pe": gn.predictive_entropy(lp), "ln_pe": gn.ln_predictive_entropy(lp, s.lengths),
              "se": gn.semantic_entropy(lp, clusters),
              "dse": gn.discrete_semantic_entropy(clusters), "sample_nll": -lp[:, 0],
              "beam_nll": beam}
    passes = {"greedy": greedy.lengths, "samples": jnp.sum(s.lengths, -1),
              "one_sample": s.lengths[:, 0], "beam": beam_passes}
    extra = {"clusters": jnp.sum(jnp.arange(cfg["samples"]) == clusters, -1),
             "greedy_is_beam": jnp.all(greedy.tokens == beam_tokens, -1)}
    correct = fact_qa.is_correct(world, greedy.tokens)
    aurocs = {k: gn.auroc(v, ~correct) for k, v in scores.items()}  # NaN for one class
    return correct, greedy.lengths, scores, aurocs, passes, extra

  return {"data": data, "train": train, "evaluate": evaluate}


def _exposure_bin(counts: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
  return (counts >= lo) & (counts <= (np.inf if hi is None else hi))


def _bin_name(lo: int, hi: int | None) -> str:
  return f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_world, k_data, k_train, k_sample = jax.random.split(key, 4)
  world, tokens, mask, counts = prog["data"](k_world, k_data)
  params, losses = prog["train"](k_train, tokens, mask)
  correct, lengths, scores, aurocs, passes, extra = jax.device_get(
      prog["evaluate"](params, k_sample, world))
  correct = np.asarray(correct)
  both = 0 < correct.sum() < correct.size  # an AUROC needs both classes
  aurocs = {k: float(v) if both else None for k, v in aurocs.items()}
  scores = {k: np.asarray(v, np.float64) for k, v in scores.items()}
  counts, lengths = np.asarray(counts), np.asarray(lengths)
  multi = np.asarray(world[1][:, 1] > 0)
  bins = {}
  for lo, hi in EXPOSURE_BINS:
    sel = _exposure_bin(counts, lo, hi)
    bins[_bin_name(lo, hi)] = {"questions": int(sel.sum()),
                               "accuracy": float(correct[sel].mean()) if sel.any() else None}
  return {
      "seed": seed, "accuracy": float(correct.mean()), "auroc": aurocs,
      "passes": {k: float(np.mean(v)) for k, v in passes.items()},
      "final_loss": float(np.mean(np.asarray(losses)[-50:])),
      "greedy_length_mean": float(lengths.mean()), "greedy_length_std": float(lengths.std()),
      "greedy_length_counts": np.bincount(lengths, minlength=8).tolist(),
      # does a longer greedy answer go with a correct one? (None: one of them constant)
      "length_correct_corr": float(np.corrcoef(lengths, correct)[0, 1])
                             if lengths.std() > 0 and both else None,
      "accuracy_multi": float(correct[multi].mean()), "accuracy_single":
          float(correct[~multi].mean()),
      "by_exposure": bins, "zero_exposure_share": float((counts == 0).mean()),
      "clusters_mean": float(np.mean(extra["clusters"])),
      "greedy_is_beam": float(np.mean(extra["greedy_is_beam"])),
      "g_minus_beam_nll": float(np.mean(scores["g_nll"] - scores["beam_nll"])),
  }


def _per_seed(result: dict, score: str) -> np.ndarray:
  """Per-seed AUROCs (NaN for a seed whose answers were all correct or all incorrect)."""
  return np.array([np.nan if r["auroc"][score] is None else r["auroc"][score]
                   for r in result["runs"]], np.float64)


def _passes(result: dict, kind: str) -> np.ndarray:
  return np.array([r["passes"][kind] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. G-NLL matches or beats PE, LN-PE, SE and D-SE: for each, the mean over seeds of
     ``AUROC(G-NLL) - AUROC(score)`` (paired per seed) is at least ``-MATCH`` (0.02).
  2. At about a tenth of the cost: G-NLL's forward passes per question (the greedy
     answer's length) over the sampled scores' (the ``N`` samples' lengths) is at most
     ``TENTH`` (0.15).
  3. Length normalisation hurts: AUROC(LN-G-NLL) below AUROC(G-NLL) on average and in
     every seed.
  4. (The test bed's check) the greedy accuracy is near 50%: in ``ACCURACY_RANGE``.
  """
  if not result["runs"]:
    return []
  n = len(result["runs"])
  g = _per_seed(result, "g_nll")
  diffs = {k: g - _per_seed(result, k) for k in SAMPLED}
  label = dict(SCORES)
  rows = [Claim(
      "G-NLL matches or beats the sampled scores (PE, LN-PE, SE, D-SE) at telling incorrect "
      f"answers from correct ones (matches: mean AUROC at most {MATCH} below)",
      f"AUROC G-NLL {pm(g)}; " + ", ".join(
          f"{label[k]} {pm(_per_seed(result, k))} (G-NLL {pm(diffs[k], sign=True)})"
          for k in SAMPLED),
      bool(all(d.mean() >= -MATCH for d in diffs.values())))]
  ratio = _passes(result, "greedy") / _passes(result, "samples")
  rows.append(Claim(
      "G-NLL costs about a tenth of the sampled scores (forward passes per question)",
      f"greedy {pm(_passes(result, 'greedy'), '.2f')} vs {result['config']['samples']} samples "
      f"{pm(_passes(result, 'samples'), '.1f')} passes: ratio {pm(ratio)} (threshold {TENTH})",
      bool(ratio.mean() <= TENTH)))
  ln = g - _per_seed(result, "ln_g_nll")
  wins = int(np.sum(ln > 0))
  rows.append(Claim(
      "Length normalisation hurts: LN-G-NLL has a lower AUROC than G-NLL",
      f"AUROC LN-G-NLL {pm(_per_seed(result, 'ln_g_nll'))} vs G-NLL {pm(g)} (G-NLL "
      f"{pm(ln, sign=True)}); lower in {wins}/{n} seeds", bool(ln.mean() > 0 and wins == n)))
  acc = np.array([r["accuracy"] for r in result["runs"]])
  lo, hi = ACCURACY_RANGE
  rows.append(Claim(
      f"Test bed check: greedy accuracy near 50% (in [{lo}, {hi}]), so both classes are large",
      f"accuracy {pm(acc)}", bool(lo <= acc.mean() <= hi)))
  return rows


TABLE_HEAD = ["score", "AUROC (incorrect vs correct)", "forward passes / question"]


def table_rows(result: dict) -> list[list[str]]:
  """One row per score: AUROC and cost, mean ± std over seeds."""
  return [[label, pm(_per_seed(result, k)), pm(_passes(result, COST[k]), ".1f")]
          for k, label in SCORES]


def exposure_rows(result: dict) -> list[list[str]]:
  """Greedy accuracy by how often the question was seen in training."""
  rows = []
  for lo, hi in EXPOSURE_BINS:
    name = _bin_name(lo, hi)
    share = [r["by_exposure"][name]["questions"] for r in result["runs"]]
    acc = [r["by_exposure"][name]["accuracy"] for r in result["runs"]]
    acc = [a for a in acc if a is not None]
    rows.append([name, pm(share, ".0f"), pm(acc, ".2f") if acc else "-"])
  return rows


EXPOSURE_HEAD = ["statements seen", "questions", "greedy accuracy"]


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  keys = [k for k, _ in SCORES]
  vals = np.array([_per_seed(result, k) for k in keys])  # (S, seeds)
  x = np.arange(len(keys))
  colors = ["C0", "C0", "C1", "C1", "C2", "C2", "C7", "C3"]
  axes[0].bar(x, vals.mean(1), color=colors, alpha=0.7)
  for s in range(vals.shape[1]):
    axes[0].plot(x, vals[:, s], "k.", ms=4)
  axes[0].set_xticks(x, [lab for _, lab in SCORES], rotation=30, fontsize=8)
  if np.isfinite(vals).any():
    axes[0].set_ylim(max(0.0, np.nanmin(vals) - 0.1), min(1.0, np.nanmax(vals) + 0.05))
  axes[0].set(ylabel="AUROC (incorrect vs correct)")
  cost = np.array([_passes(result, COST[k]).mean() for k in keys])
  axes[1].scatter(cost, vals.mean(1), c=colors)
  for xi, yi, (_, lab) in zip(cost, vals.mean(1), SCORES, strict=True):
    axes[1].annotate(lab, (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
  axes[1].set_xscale("log")
  axes[1].set(xlabel="forward passes per question", ylabel="AUROC")
  fig.suptitle(f"G-NLL vs sampled scores, {len(result['runs'])} seeds (bars: mean, dots: seeds)")
  save_figure(fig, out, "g_nll.png")
  return ["g_nll.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/g_nll",
                       quick_help="1 seed, a smaller world: the pipeline in about a minute",
                       helps={"entities": "entities (questions: entities x relations)",
                              "words": "canonical answer words (each has a synonym token)",
                              "zipf_a": "Zipf exponent of the entities' training frequency",
                              "steps": "training steps (one pass over steps x batch statements)",
                              "synonym_prob": "share of statements in the synonym form",
                              "multi_share": "share of questions with 2-3 valid answers",
                              "samples": "sampled answers per question (PE, LN-PE, SE, D-SE)",
                              "beam": "beam width of the exact-MSP check"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def _note(result: dict) -> str:
  runs = result["runs"]
  acc = [r["accuracy"] for r in runs]
  return (f"{result['config']['seeds']} seeds, mean ± std over seeds; greedy accuracy "
          f"{pm(acc)}, greedy answer length {pm([r['greedy_length_mean'] for r in runs], '.2f')}"
          f" tokens (EOS included).")


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "g_nll")
    return {"scores": [list(s) for s in SCORES], "runs": runs}

  return run_experiment(argv, cli(), "g_nll", run, plot, _table, _note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/g_nll.md


def _report(record: dict) -> str:
  runs, c = record["runs"], record["config"]
  per = lambda key: np.array([r[key] for r in runs], np.float64)  # noqa: E731
  questions = c["entities"] * c["relations"]
  corr = [r["length_correct_corr"] for r in runs if r["length_correct_corr"] is not None]
  return ("\n" + f"{P.thousands(questions)} questions ({c['entities']} entities x "
          f"{c['relations']} relations, {c['words']} answer words), "
          f"{P.thousands(c['steps'] * c['batch'])} training statements (Zipf exponent "
          f"{c['zipf_a']}, one pass), model {c['layers']} layers d = {c['d_model']}, "
          f"{c['samples']} samples, beam width {c['beam']}, {c['seeds']} "
          f"seed{'s' if c['seeds'] > 1 else ''}, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds. Greedy accuracy "
          f"{P.pm(per('accuracy'))} (questions with one valid answer "
          f"{P.pm(per('accuracy_single'))}, with 2-3 {P.pm(per('accuracy_multi'))}); greedy "
          f"answers of {P.f(per('greedy_length_mean').mean())} tokens on average, EOS included "
          f"(std within a seed {P.f(per('greedy_length_std').mean())}); correlation of a greedy "
          f"answer's length with its correctness {P.pm(corr)}.\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + "Greedy accuracy by how often training saw the question:\n\n"
          + P.table(EXPOSURE_HEAD, exposure_rows(record)) + "\n\n"
          + f"The greedy answer is the best beam for {P.pm(per('greedy_is_beam'))} of the "
          f"questions; G-NLL exceeds the beam's NLL by {P.pm(per('g_minus_beam_nll'))} nats on "
          f"average. The {c['samples']} samples fall into {P.pm(per('clusters_mean'))} clusters "
          "per question.\n\n"
          + P.claims_table("g_nll", record) + "\n")


def _ln_above(record: dict) -> str:
  """``k of n``: the seeds where LN-G-NLL's AUROC is above G-NLL's."""
  above = [r["auroc"]["ln_g_nll"] > r["auroc"]["g_nll"] for r in record["runs"]]
  return f"{sum(above)} of {len(above)}"


def page() -> dict[str, str]:
  out = P.quick_and_full("g_nll", _report)
  quick = f"the quick run's: {_ln_above(P.load('g_nll', 'quick'))}"
  full = P.recorded("g_nll", "full")
  out["ln_above"] = (quick if full is None
                     else f"{_ln_above(full)} full-run seeds ({quick})")
  return out


if __name__ == "__main__":
  main()
