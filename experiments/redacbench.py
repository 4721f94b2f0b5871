"""RedacBench: keyword masking vs a learned rewriter, once and iterated, judged exactly.

    python -m experiments.redacbench [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. rendered fact texts (``jaxlab.data.fact_texts``): 2-3 people with jobs, homes, clinic
   visits, diagnoses, a marriage, and where companies are and what clinics treat; Horn
   rules imply ``in_city`` (from work + office city, or a spouse's home) and
   ``has_condition`` (from a clinic visit + the clinic's specialty), facts no sentence
   states. The policy marks a person's whereabouts and health sensitive;
2. the rewriter: a tiny transformer trained by teacher forcing on
   ``text -> one step of adversarial redaction`` (``redacbench.redaction_step``: drop the
   sentences stating sensitive facts, then one premise, preferring the person's
   ``works_at`` / ``treated_at`` / ``married``, of each sensitive proposition still
   entailed). A share ``sub_share`` of the training sources are random subsets of a
   text's sentences, so the rewriter also sees partly redacted texts;
3. on held-out texts, the redactors: keyword masking (the object of every sensitive
   sentence becomes ``<mask>``), the rewriter once and iterated on its own output
   (``passes``), and the symbolic step it imitates (the oracle, a reference);
4. the exact judge (the closure of what the redacted text still states) and Security =
   TN / (TN + FP), Utility = TP / (TP + FN), pooled micro and per text, on all
   propositions and on the implied sensitive ones.

The paper (LLM redactors on real texts, GPT-4.1-mini judge) finds masking keeps Utility
but leaks what can be inferred, and adversarial redaction, more so iterated, trades
Utility for Security. Spec scale for a GPU run: ``--train 40000 --steps 20000 --d_model 256
--layers 4 --test 2000``.
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
from jaxlab.data import fact_texts as ft
from jaxlab.models import transformer as tfm
from jaxlab.safety import redacbench as rb
from jaxlab.training import fit, minibatch_sampler

PREFER = ("works_at", "treated_at", "married")  # drop a person's own premise first

CONFIGS = {
    "smoke": dict(seeds=1, min_people=2, max_people=2, train=32, test=4, sub_share=0.3,
                  d_model=8, heads=1, layers=1, steps=2, batch=4, lr=3e-3, passes=2),
    "quick": dict(seeds=2, min_people=2, max_people=2, train=3000, test=150, sub_share=0.3,
                  d_model=48, heads=4, layers=2, steps=800, batch=32, lr=3e-3, passes=3),
    "full": dict(seeds=3, min_people=2, max_people=3, train=6000, test=300, sub_share=0.3,
                 d_model=64, heads=4, layers=2, steps=2000, batch=32, lr=2e-3, passes=3),
}


def arm_names(passes: int) -> list[str]:
  """The redactors in report order: masking, rewriter passes 1..passes, the oracle step."""
  return ["mask"] + [f"rewrite_{i}" for i in range(1, passes + 1)] + ["oracle"]


def _training_pairs(rng: np.random.Generator, texts: list, share: float) -> tuple[list, list]:
  """Sources (a share replaced by random subsets of their sentences) and their targets,
  one redaction step each."""
  sources = []
  for words in texts:
    facts = ft.parse(words)
    if rng.random() < share:
      keep = rng.random(len(facts)) < rng.uniform(0.3, 0.9)
      facts = [f for f, k in zip(facts, keep, strict=True) if k]
    sources.append(ft.render(facts))
  targets = [ft.decisions(s, rb.redaction_step(ft.parse(s), ft.RULES, rb.POLICY, PREFER))
             for s in sources]
  return sources, targets


def score(originals: list, redacted: list) -> dict:
  """Security / Utility of one redactor on the test texts: micro and per text, on all
  propositions and on the implied ones, with the summed counts and words kept."""
  out = {}
  for subset in ("all", "implied"):
    confs = [rb.score_text(ft.parse(o), ft.parse(r), ft.RULES, rb.POLICY, subset)
             for o, r in zip(originals, redacted, strict=True)]
    for how in rb.POOLINGS:
      s = rb.pooled(confs, how)
      out[f"{subset}/{how}/security"], out[f"{subset}/{how}/utility"] = s.security, s.utility
    if subset == "all":
      out["counts"] = list(sum(confs[1:], confs[0]))
  out["words_kept"] = float(np.mean([len(r) for r in redacted])
                            / np.mean([len(o) for o in originals]))
  return out


def make_programs(cfg: dict) -> dict:
  """The rewriter's model and its jitted training program, compiled once for every seed."""
  tok = ft.tokenizer()
  src_len = ft.max_words(cfg["max_people"])
  max_sentences = ft.max_sentences(cfg["max_people"])
  model_cfg = tfm.TransformerConfig(tok.vocab_size, cfg["d_model"], cfg["heads"], cfg["layers"],
                                    src_len + max_sentences + 3, positions="learned")
  # the graph from an abstract module; parameters are initialized inside the program
  net = tfm.graph(model_cfg)

  @jax.jit
  def train(key, tokens, mask):
    k_init, k_fit = jax.random.split(key)
    params = tfm.create(model_cfg, k_init).params
    loss = lambda p, b, _: rb.rewriter_loss(net.replace(params=p), *b)  # noqa: E731
    res = fit(loss, optax.adamw(cfg["lr"]), params, k_fit, num_steps=cfg["steps"],
              sample=minibatch_sampler((tokens, mask), cfg["batch"]))
    return res.state.params, res.losses

  return {"tok": tok, "src_len": src_len, "max_sentences": max_sentences, "net": net,
          "train": train}


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_train, k_test, k_fit = jax.random.split(key, 3)
  rng = np.random.default_rng(seed)
  people = dict(min_people=cfg["min_people"], max_people=cfg["max_people"])
  train = ft.sample_texts(k_train, cfg["train"], **people)
  test = ft.sample_texts(k_test, cfg["test"], **people)
  sources, targets = _training_pairs(rng, train, cfg["sub_share"])
  tok, src_len = prog["tok"], prog["src_len"]
  data = ft.encode_pairs(tok, sources, targets, src_len, prog["max_sentences"])
  params, losses = prog["train"](k_fit, jnp.asarray(data.tokens), jnp.asarray(data.loss_mask))
  net = prog["net"].replace(params=params)
  losses = np.asarray(losses)
  rewriter = lambda texts: rb.rewrite(net, tok, texts, src_len, prog["max_sentences"])  # noqa: E731
  passes = rb.iterate(rewriter, test, cfg["passes"])
  oracle = [ft.render(rb.redaction_step(ft.parse(t), ft.RULES, rb.POLICY, PREFER))
            for t in test]
  masked = [rb.mask_keywords(t, rb.POLICY, ft.parse_sentence) for t in test]
  outputs = {"mask": masked, **{f"rewrite_{i + 1}": p for i, p in enumerate(passes)},
             "oracle": oracle}
  arms = {name: score(test, red) for name, red in outputs.items()}
  # exact match of one rewrite to its training target on the test texts (imitation quality)
  exact = float(np.mean([a == b for a, b in zip(passes[0], oracle, strict=True)]))
  return {"seed": seed, "arms": arms, "exact_match_once": exact,
          "final_loss": float(losses[-max(1, len(losses) // 20):].mean()),
          "example": {"text": " ".join(test[0]), **{k: " ".join(v[0]) for k, v in
                                                     outputs.items()}}}


def _per_seed(result: dict, arm: str, metric: str) -> np.ndarray:
  return np.array([r["arms"][arm][metric] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. The failure occurs: masking keeps Utility (micro >= 0.95) but its Security on the
     implied sensitive propositions is low (micro <= 0.5), in every seed.
  2. Rewriting trades Utility for Security: the rewriter once has higher micro Security
     and lower micro Utility than masking, in every seed.
  3. Iterating the rewriter raises Security further at a Utility cost: the last pass has
     higher micro Security than one pass and no higher Utility, in every seed.
  """
  if not result["runs"]:
    return []
  n = len(result["runs"])
  last = f"rewrite_{result['config']['passes']}"
  g = lambda arm, m: _per_seed(result, arm, m)  # noqa: E731
  sec, util, imp = "all/micro/security", "all/micro/utility", "implied/micro/security"
  rows = [Claim(
      "Masking keeps Utility high but leaves implied sensitive facts inferable",
      f"masking Utility {pm(g('mask', util))}, Security {pm(g('mask', sec))}, on implied "
      f"sensitive propositions {pm(g('mask', imp))} (micro)",
      bool(np.all(g("mask", util) >= 0.95) and np.all(g("mask", imp) <= 0.5)))]
  up = int(np.sum((g("rewrite_1", sec) > g("mask", sec))
                  & (g("rewrite_1", util) < g("mask", util))))
  rows.append(Claim(
      "A learned rewriter trades Utility for Security against masking",
      f"rewriter once Security {pm(g('rewrite_1', sec))} vs masking {pm(g('mask', sec))}, "
      f"Utility {pm(g('rewrite_1', util))} vs {pm(g('mask', util))}; in {up}/{n} seeds",
      up == n))
  it = int(np.sum((g(last, sec) > g("rewrite_1", sec)) & (g(last, util) <= g("rewrite_1", util))))
  rows.append(Claim(
      "Iterating the rewriter raises Security further at a Utility cost",
      f"{last} Security {pm(g(last, sec))} vs once {pm(g('rewrite_1', sec))}, Utility "
      f"{pm(g(last, util))} vs {pm(g('rewrite_1', util))}; in {it}/{n} seeds", it == n))
  return rows


TABLE_HEAD = ["redactor", "Security (micro)", "Utility (micro)", "Security (per text)",
              "Utility (per text)", "Security, implied (micro)", "words kept"]


def table_rows(result: dict) -> list[list[str]]:
  """One row per redactor: Security / Utility micro and per text, on implied, words kept."""
  keys = ["all/micro/security", "all/micro/utility", "all/text/security", "all/text/utility",
          "implied/micro/security", "words_kept"]
  return [[arm, *(pm(_per_seed(result, arm, k)) for k in keys)]
          for arm in arm_names(result["config"]["passes"])]


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  arms = arm_names(result["config"]["passes"])
  for ax, how in zip(axes, rb.POOLINGS, strict=True):
    s = np.array([_per_seed(result, a, f"all/{how}/security") for a in arms])
    u = np.array([_per_seed(result, a, f"all/{how}/utility") for a in arms])
    rw = [i for i, a in enumerate(arms) if a.startswith("rewrite")]
    ax.plot(u[rw].mean(1), s[rw].mean(1), "-", color="C0", alpha=0.5)
    for i, a in enumerate(arms):
      color = "C3" if a == "mask" else ("C7" if a == "oracle" else "C0")
      ax.plot(u[i], s[i], ".", color=color, alpha=0.4)
      ax.plot(u[i].mean(), s[i].mean(), "o", color=color)
      ax.annotate(a, (u[i].mean(), s[i].mean()), fontsize=7, xytext=(4, 4),
                  textcoords="offset points")
    ax.set(xlabel=f"Utility ({how})", ylabel=f"Security ({how})", xlim=(0, 1.05),
           ylim=(0, 1.05), title={"micro": "micro (counts pooled)", "text": "per text (mean)"}[how])
  fig.suptitle(f"security-utility trade-off, {len(result['runs'])} seeds (dots: seeds)")
  save_figure(fig, out, "redacbench.png")
  return ["redacbench.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/redacbench",
                       quick_help="2 seeds, a small rewriter: the pipeline in under 90 s on "
                                  "one core",
                       helps={"train": "training texts of the rewriter",
                              "test": "held-out texts redacted and judged",
                              "sub_share": "share of training sources cut to a random subset "
                                           "of their sentences",
                              "steps": "rewriter training steps",
                              "passes": "rewriter passes (1 = once)"})


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "redacbench")
    return {"arms": arm_names(cfg["passes"]), "prefer": list(PREFER), "runs": runs}

  return run_experiment(
      argv, cli(), "redacbench", run, plot,
      lambda r: table_and_claims(TABLE_HEAD, table_rows(r), claims(r)),
      lambda r: (f"{r['config']['seeds']} seeds, mean ± std over seeds; exact judge (the "
                 f"closure of what is left); rewriter once matches its target exactly on "
                 f"{pm([x['exact_match_once'] for x in r['runs']], '.2f')} of the test texts."),
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/redacbench.md


def _report(record: dict) -> str:
  c, runs = record["config"], record["runs"]
  exact = [r["exact_match_once"] for r in runs]
  people = (f"{c['min_people']}" if c["min_people"] == c["max_people"]
            else f"{c['min_people']}-{c['max_people']}")
  ex = runs[0]["example"]
  example = "\n".join(f"* {name}: `{ex[name] or '(empty)'}`"
                      for name in ["text", *arm_names(c["passes"])])
  return ("\n" + f"{people} people per text, {P.thousands(c['train'])} training texts, "
          f"rewriter {c['layers']} layers d = {c['d_model']} ({P.thousands(c['steps'])} steps), "
          f"{P.thousands(c['test'])} held-out texts, {c['seeds']} seeds, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds:\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + f"The rewriter's single pass equals its target (the oracle step) on {P.pm(exact)} "
          "of the held-out texts. One held-out text (seed 0) and what each redactor left:\n\n"
          + example + "\n\n" + P.claims_table("redacbench", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("redacbench", _report)


if __name__ == "__main__":
  main()
