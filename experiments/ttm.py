"""Test-Time Matching on digit pairs: GroupScore vs GroupMatch, before and after TTM.

    python -m experiments.ttm [--quick] [--out DIR] [--seeds S]

A dual encoder (``jaxlab.preference.digit_pairs``) is pre-trained from scratch
with a CLIP loss on images of two scikit-learn digits side by side and
captions "a left of b" whose order is wrong with probability ``order_noise``
(0.4 and 0.45: a weak order signal, as in web captions). Test groups pair the
images ``(a|b)``, ``(b|a)`` with the captions "a left of b", "b left of a".

Per seed and order noise: text / image / group score (Winoground) and
GroupMatch of the pre-trained encoder; then Test-Time Matching (rounds of
pseudo-labelling the test groups by their best assignment above a cosine-
decaying margin threshold and fine-tuning on them, no labels) and, as an
upper bound, the same fine-tuning on the true pairings ("oracle", the positive
control) and, as the negative control, on random pairings ("random": the same
rounds with each group's pairing a coin flip, so no information about order).
Seeds run one after another in Python (each pre-trains its own encoder per order
noise and runs TTM's rounds), so there is no vmapped seed axis to shard over
devices; a run resumes per seed (``seed<i>.json`` in the output folder).

The claims are decided under the verdict protocol (:data:`CLAIMS`,
``experiments/protocol.py``): per-seed paired differences, a t interval over the
seeds, a margin, the oracle and random controls, and guards on the pre-trained
scores. Writes ``results.json``, ``summary.md``, ``rounds.png`` and ``scores.png``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from experiments import pages as P
from experiments import protocol as V
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import sample_std, save_figure
from jaxlab.core.stats import t_interval
from jaxlab.data.digit_pairs import DigitSplit, load_split, make_groups
from jaxlab.preference import digit_pairs as D
from jaxlab.preference import ttm

METRICS = {"text": ttm.text_score, "image": ttm.image_score, "group": ttm.group_score,
           "group_match": ttm.group_match}

CONFIGS = {
    "smoke": dict(seeds=1, first_seed=0, order_noise=(0.45,), pretrain_steps=200, groups=60,
                  rounds=2, epochs=2),
    "quick": dict(seeds=3, first_seed=0, order_noise=(0.4, 0.45, 0.5), pretrain_steps=1500,
                  groups=500, rounds=5, epochs=10),
    # 16 seeds from seed 100 (fresh draws: seeds 0-12 ran the pilot whose failed negative
    # control shaped these claims); the claims need 201 and 331 (see CLAIMS), far past the
    # 45-minute cap, so they are declared underpowered and this run measures their intervals
    # and controls (about 15 minutes)
    "full": dict(seeds=16, first_seed=100, order_noise=(0.4, 0.45, 0.5), pretrain_steps=3000,
                 groups=1000, rounds=10, epochs=20),
}
STAGES = ("before", "after", "simple", "oracle", "random")
_STAGE = {"before": "pre-trained", "after": "after TTM", "simple": "SimpleMatch",
          "oracle": "oracle fine-tune", "random": "random pairings"}
CHANCE = {"group": ttm.group_score_chance(2), "group_match": ttm.group_match_chance(2)}


def scores(net, params, groups) -> dict[str, float]:
  sim = D.group_similarity(net, params, groups)
  return {name: float(jnp.mean(fn(sim))) for name, fn in METRICS.items()}


def run_one(seed: int, noise: float, cfg: dict, data: DigitSplit) -> dict:
  net, losses = D.pretrain(jax.random.key(seed), data, steps=cfg["pretrain_steps"],
                           order_noise=noise)
  groups = make_groups(jax.random.key(1000 + seed), data.test_images, data.test_labels,
                       cfg["groups"])
  before = scores(net, net.params, groups)
  finetune = D.make_finetune(net, epochs=cfg["epochs"], seed=seed)
  sim_fn = lambda p, g: D.group_similarity(net, p, g)  # noqa: E731
  _, hist = ttm.test_time_matching(
      net.params, groups, similarity_fn=sim_fn, finetune_fn=finetune, iterations=cfg["rounds"],
      callback=lambda r, p: scores(net, p, groups))
  # The same rounds and optimizer on fixed pairings of every group: SimpleMatch (the
  # pre-trained encoder's best matching of each group, labelled once; the paper's one-shot
  # baseline), the true pairings (oracle) and coin flips (random: fine-tuning with no
  # information about order)
  k, g = groups.tokens.shape[1], cfg["groups"]
  simple = ttm.pseudo_match(sim_fn(net.params, groups), -jnp.inf).permutation
  truth = jnp.tile(jnp.arange(k), (g, 1))
  coins = jax.vmap(lambda key: jax.random.permutation(key, k))(
      jax.random.split(jax.random.key(2000 + seed), g))
  simple_s, oracle, random = (
      scores(net, _finetune_on(finetune, net.params, groups, perm, cfg["rounds"]), groups)
      for perm in (simple, truth, coins))
  return {"seed": seed, "order_noise": noise, "pretrain_loss": losses, "before": before,
          "after": {m: hist[-1][m] for m in METRICS}, "simple": simple_s, "oracle": oracle,
          "random": random, "rounds": hist}


def _finetune_on(finetune, params, groups, permutation, rounds: int):
  """``rounds`` of TTM's fine-tuning on one fixed pairing of every group (all kept)."""
  g = permutation.shape[0]
  match = ttm.PseudoMatch(permutation, jnp.full(g, jnp.inf), jnp.ones(g, bool))
  for r in range(rounds):
    params = finetune(params, groups, match, r)
  return params


def summarize(runs: list[dict], noises) -> list[dict]:
  rows = []
  for noise in noises:
    rs = [r for r in runs if r["order_noise"] == noise]
    for stage in STAGES:
      row = {"order_noise": noise, "stage": stage}
      for m in METRICS:
        v = np.array([r[stage][m] for r in rs])
        row[m] = (float(v.mean()), sample_std(v))
      rows.append(row)
  return rows


def format_table(rows: list[dict]) -> str:
  lines = ["| order noise | stage | text | image | group score | group match |",
           "|---|---|---|---|---|---|"]
  for r in rows:
    cells = " | ".join(f"{r[m][0]:.3f} ± {r[m][1]:.3f}" for m in METRICS)
    lines.append(f"| {r['order_noise']} | {r['stage']} | {cells} |")
  k2 = f"chance (k = 2): group score {ttm.group_score_chance(2):.3f}, " \
       f"group match {ttm.group_match_chance(2):.3f}"
  return "\n".join(lines) + "\n\n" + k2


_NAMES = {"group": "group score", "group_match": "GroupMatch"}


def _arm(stage: str, metric: str, noise: float) -> V.Arm:
  return V.Arm(f"runs.*.{stage}.{metric}", where={"order_noise": noise},
               label=f"{_STAGE[stage]} {_NAMES[metric]} (noise {noise:g})")


def _claim(text: str, noise: float, margin: float, why: str, primary: bool = False,
           underpowered: str | None = None) -> V.ClaimSpec:
  """TTM against SimpleMatch on the group score at one order noise, with its controls:
  positive, the oracle (the same rounds on the true pairings) beats SimpleMatch by the margin
  (there is room above one-shot pseudo-labels); negative, on encoders pre-trained with no
  order signal (order noise 0.5, the same seeds) TTM does not beat SimpleMatch. Guards: the
  pre-trained GroupMatch above chance 0.5 + 0.05 (the pseudo-labels carry signal) and
  SimpleMatch's group score below 1 - 0.05 (room to improve on it)."""
  return V.ClaimSpec(
      claim=text, metric="group score on the adapted test groups", margin=margin,
      compare=V.Comparison(_arm("after", "group", noise), _arm("simple", "group", noise)),
      primary=primary, underpowered=underpowered, why=why,
      positive=V.Control("oracle: the same rounds on the true pairings, over SimpleMatch",
                         V.Comparison(_arm("oracle", "group", noise),
                                      _arm("simple", "group", noise)), margin),
      negative=V.Control("no order signal: TTM over SimpleMatch on encoders pre-trained at "
                         "order noise 0.5", V.Comparison(_arm("after", "group", 0.5),
                                                         _arm("simple", "group", 0.5)),
                         margin, "negative"),
      guards=(V.Guard("pre-trained GroupMatch", _arm("before", "group_match", noise),
                      floor=CHANCE["group_match"], ceiling=1.0, distance=0.05),
              V.Guard("SimpleMatch group score", _arm("simple", "group", noise), ceiling=1.0,
                      distance=0.05)))


# The claims, committed before the full run (issue 42). After any fine-tuning on these
# groups each one is decided all-or-nothing (text = image = group = GroupMatch), so the group
# score after TTM is the share of groups it ends up pairing right. The pilot
# (docs/results/ttm/pilot/) compared TTM with the pre-trained encoder, and its negative
# control failed: fine-tuning on coin flips alone lifts the group score from 0.15 to 0.49. A
# second design (TTM over coin-flip fine-tuning) was found, in review before its run, true
# by construction: any pairing better than a coin beats a coin. What TTM claims beyond
# "pseudo-labels help" is that its rounds of re-labelling with a decaying threshold beat
# labelling once: the paper's SimpleMatch baseline, the same fine-tuning on the pre-trained
# encoder's best matching of every group. Margin: 0.02 of the group score (two points; the
# paper's gains of TTM over SimpleMatch are a few points). Sizing from the quick run (3 seeds:
# paired sds 0.072 and 0.093 at order noise 0.4 and 0.45; units_needed for a half-width of
# δ/2): 201 and 331 seeds, about 2.5 and 4 hours on 2 cores, so both claims are declared
# underpowered before the full run.
CLAIMS = (
    _claim("Test-Time Matching's iterative self-training beats one-shot pseudo-labelling "
           "(SimpleMatch) without labels (order noise 0.4)", 0.4, 0.02, primary=True,
           underpowered="needs n ≈ 201 seeds: the quick run's paired sd is 0.072",
           why="the paper's central claim beyond 'pseudo-labels help': re-labelling each "
               "round as the model improves, keeping only groups above a decaying margin, "
               "ends with more test groups right than labelling them once; both are "
               "evaluated on the test groups they adapt to, as in the paper"),
    _claim("... and with a weaker order signal (order noise 0.45)", 0.45, 0.02,
           underpowered="needs n ≈ 331 seeds: the quick run's paired sd is 0.093",
           why="the same where the captions' order is right only 55% of the time, so the "
               "first pseudo-labels are noisier"),
)


def claims(result: dict) -> list[V.Decision]:
  """The claims of :data:`CLAIMS` decided under the protocol on a ``results.json`` dict."""
  return V.decide(CLAIMS, result)


def plot(runs: list[dict], rows: list[dict], noises, out: str) -> list[str]:
  fig, axes = plt.subplots(1, len(noises), figsize=(5 * len(noises), 3.6), squeeze=False)
  for ax, noise in zip(axes[0], noises, strict=True):
    rs = [r for r in runs if r["order_noise"] == noise]
    for m, style in (("group", "-"), ("group_match", "--")):
      curves = np.array([[r["before"][m]] + [h[m] for h in r["rounds"]] for r in rs])
      x = np.arange(curves.shape[1])
      ax.plot(x, curves.mean(0), style, marker="o", label=m)
      ax.fill_between(x, curves.min(0), curves.max(0), alpha=0.2)
    ax.axhline(ttm.group_score_chance(2), color="grey", lw=0.8, ls=":")
    ax.set(title=f"order noise {noise}", xlabel="TTM round (0 = pre-trained)", ylim=(0, 1.02))
    ax.legend(fontsize=8)
  save_figure(fig, out, "rounds.png")

  fig, ax = plt.subplots(figsize=(6, 3.6))
  width = 0.12
  labels = [f"{r['stage']}\nnoise {r['order_noise']}" for r in rows]
  for i, m in enumerate(METRICS):
    ax.bar(np.arange(len(rows)) + (i - 1.5) * width, [r[m][0] for r in rows], width,
           yerr=[r[m][1] for r in rows], label=m)
  ax.set_xticks(np.arange(len(rows)), labels, fontsize=7)
  ax.set(ylim=(0, 1.05), ylabel="fraction of test groups")
  ax.legend(fontsize=7)
  save_figure(fig, out, "scores.png")
  return ["rounds.png", "scores.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/ttm",
                       quick_help="3 seeds, 5 rounds: minutes on a CPU")


def main(argv=None) -> dict:
  def run(cfg, args):
    if cfg["first_seed"] < 0 or cfg["first_seed"] + cfg["seeds"] > 1000:
      raise ValueError(f"--first-seed + --seeds must be in [0, 1000] (seed s draws its groups with "
                       f"key 1000 + s), got {cfg['first_seed']} + {cfg['seeds']}")
    data = load_split(seed=0)
    per_seed = seed_runs(args.out, cfg, lambda i: [run_one(cfg["first_seed"] + i, n, cfg, data)
                                                   for n in cfg["order_noise"]], "ttm")
    runs = sorted((r for rs in per_seed for r in rs),
                  key=lambda r: (cfg["order_noise"].index(r["order_noise"]), r["seed"]))
    return {"runs": runs, "summary": summarize(runs, cfg["order_noise"])}

  return run_experiment(
      argv, cli(), "ttm", run,
      lambda r, out: plot(r["runs"], r["summary"], r["config"]["order_noise"], out),
      lambda r: format_table(r["summary"]),
      lambda r: (f"{r['config']['groups']} test groups of 2 x 2, mean ± std over "
                 f"{r['config']['seeds']} seeds; TTM and the controls are evaluated on the "
                 "groups they fine-tune on (test-time adaptation, as in the paper)."),
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/ttm.md




def _per_seed(result: dict, noise: float, stage: str, metric: str) -> np.ndarray:
  runs = sorted((r for r in result["runs"] if r["order_noise"] == noise), key=lambda r: r["seed"])
  return np.asarray([r[stage][metric] for r in runs], np.float64)


def page() -> dict[str, str]:
  """``{region: text}`` for docs/methods/ttm.md, from the committed quick and full records
  (``docs/results/ttm/``)."""
  quick, full = P.load("ttm", "quick"), P.load("ttm", "full")
  fmt = lambda v: P.f(v, 3)  # noqa: E731
  rows = [[f"{noise:g}", _STAGE[stage]]
          + [P.pm(_per_seed(quick, noise, stage, m), fmt)
             for m in ("text", "image", "group", "group_match")]
          for noise in quick["config"]["order_noise"] for stage in _STAGE]
  frows = [[f"{noise:g}", _STAGE[stage]]
           + [P.pm(_per_seed(full, noise, stage, m), fmt) for m in ("group", "group_match")]
           for noise in full["config"]["order_noise"]
           for stage in ("before", "after", "simple", "oracle", "random")]
  signal = [n for n in full["config"]["order_noise"] if n < 0.5]  # 0.5: the no-signal control
  lo, hi = signal[0], signal[-1]
  up = lambda noise: (_per_seed(full, noise, "after", "group_match")  # noqa: E731
                      - _per_seed(full, noise, "before", "group_match"))
  d_lo, d_hi = up(lo), up(hi)
  worst = int(np.argmin(d_hi))
  n = len(d_lo)
  noises = sorted((n for n in quick["config"]["order_noise"] if n < 0.5), reverse=True)
  pilot = P.load("ttm", "pilot")
  lift = _per_seed(pilot, 0.4, "random", "group") - _per_seed(pilot, 0.4, "before", "group")
  iv = t_interval(lift)
  return {
      "pilot": (f"{P.f(_per_seed(pilot, 0.4, 'before', 'group').mean(), 3)} → "
                f"{P.f(_per_seed(pilot, 0.4, 'random', 'group').mean(), 3)}, paired "
                f"D = {P.signed(iv.mean)} [{P.signed(iv.lo)}, {P.signed(iv.hi)}] over "
                f"{iv.n} seeds"),
      "pilot_seeds": f"{min(r['seed'] for r in pilot['runs'])}-"
                     f"{max(r['seed'] for r in pilot['runs'])}",
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_groups": P.thousands(quick["config"]["groups"]),
      "quick_rounds": f"{quick['config']['rounds']} rounds x {quick['config']['epochs']} epochs",
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "quick_table": P.table(["order noise", "stage", "text", "image", "group score",
                              "GroupMatch"], rows),
      "full_seeds": str(full["config"]["seeds"]),
      "full_groups": P.thousands(full["config"]["groups"]),
      "full_rounds": f"{full['config']['rounds']} rounds x {full['config']['epochs']} epochs",
      "full_wall": P.seconds(full["wall_time_s"]),
      "full_table": P.table(["order noise", "stage", "group score", "GroupMatch"], frows),
      "reveal": P.span([_per_seed(quick, nz, "before", "group_match").mean() for nz in noises]),
      "turns": ", ".join(f"{P.f(_per_seed(quick, nz, 'before', 'group').mean())} → "
                         f"{P.f(_per_seed(quick, nz, 'after', 'group').mean())}" for nz in noises),
      "lo_gm": f"{fmt(_per_seed(full, lo, 'before', 'group_match').mean())} → "
               f"{fmt(_per_seed(full, lo, 'after', 'group_match').mean())}",
      "lo_up": (f"up in all {n} seeds" if np.all(d_lo > 0)
                else f"up in {int(np.sum(d_lo > 0))} of {n} seeds")
               + f", {P.span(d_lo, lambda v: P.signed(v, 2), sep=' to ')}",
      "hi_counts": f"up in {int(np.sum(d_hi > 0))} seeds and down in {int(np.sum(d_hi < 0))}",
      "hi_gm": f"{fmt(_per_seed(full, hi, 'before', 'group_match').mean())} → "
               f"{fmt(_per_seed(full, hi, 'after', 'group_match').mean())}",
      "hi_worst": f"{P.f(_per_seed(full, hi, 'before', 'group_match')[worst])} → "
                  f"{P.f(_per_seed(full, hi, 'after', 'group_match')[worst])}",
  }


if __name__ == "__main__":
  main()
