"""ReCouPLe vs Bradley-Terry reward learning under a spurious feature that reverses at test.

    python -m experiments.recouple [--quick] [--out DIR] [--seeds S]

Synthetic multi-task preference data (``jaxlab.data.reason_pairs``; the design is
ours; the paper uses ManiSkill / Meta-World with T5 text embeddings):

* Each step of a segment has ``F = 8`` features: four causal ones ``c_0..c_3``,
  one spurious ``s`` and three nuisances. Causal and nuisance features are a
  per-segment mean (``N(0, 0.5^2)``) plus per-step ``N(0, 1)`` noise.
* Task ``k`` rewards a step by ``r_k = sum_j a_kj c_j``. The four training tasks
  weight two neighbouring causal features each (``(1, .5)`` on ``(c_0, c_1)``,
  ``(c_1, c_2)``, ``(c_2, c_3)``, ``(c_3, c_0)``); the new task weights
  ``(c_0, c_2)`` by ``(1, .5)``, a pair no training task combines, so it shares
  both its reasons with the training tasks but not its reward.
* Reasons are fixed vectors in a 16-d space shared by all tasks: "because of
  ``c_j``" is the unit vector ``e_j`` (four orthonormal vectors, drawn once with
  a fixed seed). A task's vector, the stand-in for its text embedding, is
  ``w_k = sum_j a_kj e_j + 0.5 t_k`` with a task-identity direction ``t_k``
  orthogonal to every reason: what the task cares about, in the reasons' terms,
  plus something task-specific. As in the official code, task vectors are fixed
  inputs, not learned heads, which is what lets a new task be scored zero-shot.
* Training labels follow Bradley-Terry on the true return (about 13-15% of
  labels disagree with the sign of the return difference). The reason given
  with a pair is the task-relevant causal feature that most favours the chosen
  segment (a softmax sample over the label-signed return contributions at
  temperature 0.1 of the gap's spread; the official data script samples reasons
  from a softmax of label-signed feature differences).
* The spurious feature tracks the *observed* preference in the confounded
  training tasks: its per-segment mean is ``+m`` on the chosen segment and
  ``-m`` on the other (plus ``N(0, 1)`` per step), so it predicts the training
  labels better than the causal features do (it follows even the noisy ones).
  Regime ``partial``: tasks 0 and 2 are confounded, 1 and 3 are clean, so every
  causal feature, hence every reason, also occurs in a clean task (the paper's
  premise that reasons recur across tasks). Regime ``all``: every training task
  is confounded, so nothing in the data separates ``s`` from the causes except
  the reasons themselves.

Splits (test labels: the sign of the true return difference, no noise):
``id`` / ``ood`` / ``decorrelated`` (the confounded training tasks with the
spurious feature as in training / reversed, ``+m`` on the worse segment /
independent; the three share their segments), ``clean`` (the unconfounded
training tasks), ``new_zero_shot`` (the new task through its fixed task vector,
no new labels, spurious independent) and ``new_few_shot`` (the same test after
fine-tuning on a few labelled new-task pairs with reasons, spurious
independent). Methods: Bradley-Terry, ReCouPLe, and ReCouPLe without the ratio
penalty (the official ``noratio`` ablation). Each trains its own encoder from
the same initialization per seed; seeds vary data, initialization and
minibatches. After training, ReCouPLe's loss terms are also evaluated on the
training pairs for every method (diagnostics). Each method runs all seeds of a
setting as one vmapped program whose inputs are placed with ``shard_seeds`` (a
multi-device host splits the seeds over its devices). :func:`claims` gives the
report rows. Writes ``results.json``, ``summary.md``, ``accuracy.png`` and
``losses.png``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from tqdm.auto import tqdm

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import run_experiment
from experiments.reporting import Claim, pm, sample_std, save_figure
from jaxlab.data.reason_pairs import (
  EMBED_DIM,
  N_FEATURES,
  NEW_WEIGHTS,
  REGIMES,
  TRAIN_WEIGHTS,
  Geometry,
  geometry,
  setting_data,
  true_return_gap,
)
from jaxlab.nn import Net
from jaxlab.preference import recouple as rc
from jaxlab.training import shard_seeds

METHODS = {"bt": dict(method="bt"), "recouple": dict(method="recouple"),
           "recouple_noratio": dict(method="recouple", ratio_weight=0.0)}
SPLITS = ("id", "ood", "decorrelated", "clean", "new_zero_shot", "new_few_shot")

CONFIGS = {
    "smoke": dict(seeds=2, methods=("bt", "recouple"), settings=(("partial", 0.5),),
                  segment_len=8, train_pairs=128, test_pairs=128, few_shot_pairs=32,
                  hidden=(32, 32), batch=32, steps=150, few_shot_steps=30, log_every=10),
    "quick": dict(seeds=3, methods=tuple(METHODS), settings=(("partial", 0.25), ("all", 0.25)),
                  segment_len=16, train_pairs=1000, test_pairs=500, few_shot_pairs=64,
                  hidden=(64, 64), batch=64, steps=600, few_shot_steps=100, log_every=50),
    # full: about 18 min of CPU on 2 cores (estimated from the quick run's step cost)
    "full": dict(seeds=5, methods=tuple(METHODS),
                 settings=(("partial", 0.25), ("partial", 0.5), ("all", 0.25), ("all", 0.5)),
                 segment_len=16, train_pairs=2000, test_pairs=1000, few_shot_pairs=64,
                 hidden=(64, 64), batch=128, steps=2000, few_shot_steps=200, log_every=50),
}


def method_configs(cfg: dict) -> dict[str, tuple[rc.RecoupleConfig, rc.RecoupleConfig]]:
  """(pre-training, few-shot fine-tuning) configuration of each method at a scale."""
  out = {}
  for name in cfg["methods"]:
    kw = METHODS[name]
    base = dict(hidden_dims=tuple(cfg["hidden"]), embed_dim=EMBED_DIM,
                log_every=cfg["log_every"], **kw)
    out[name] = (rc.RecoupleConfig(batch_size=cfg["batch"], steps=cfg["steps"], **base),
                 rc.RecoupleConfig(batch_size=min(cfg["batch"], cfg["few_shot_pairs"]),
                                   steps=cfg["few_shot_steps"], **base))
  return out


def make_pipeline(config: rc.RecoupleConfig, few_shot: rc.RecoupleConfig, encoder: Net):
  """One seed of one method: pre-train, evaluate, fine-tune on the new task, evaluate.

  A single function of the initial parameters, so each method compiles once (vmapped
  over seeds); ``encoder`` gives the graph.
  """
  fit, fit_few = rc.make_fit(config, encoder), rc.make_fit(few_shot, encoder)
  n_tasks = len(TRAIN_WEIGHTS)

  def accuracy(net, d: rc.PreferenceData, num_tasks: int) -> jax.Array:  # per task block
    return rc.preference_accuracy(net, d.segments_a, d.segments_b, d.tasks, d.labels,
                                  num_tasks=num_tasks)

  def pipeline(params, key, data):
    k_fit, k_few = jax.random.split(key)
    net, losses = fit(encoder.replace(params=params), k_fit, data["train"])
    train = data["train"]
    # ReCouPLe's terms on the training pairs for every method (for Bradley-Terry: how
    # much of its preference signal lies along the given reasons)
    _, terms = rc.recouple_loss(rc.embed(net, train.segments_a), rc.embed(net, train.segments_b),
                                train.reasons, train.tasks, train.labels)
    acc = {s: accuracy(net, data[s], n_tasks) for s in ("id", "ood", "decorrelated")}
    acc["new_zero_shot"] = accuracy(net, data["new"], 1)[0]
    tuned, few_losses = fit_few(net, k_few, data["few_shot"])
    acc["new_few_shot"] = accuracy(tuned, data["new"], 1)[0]
    return acc, terms, losses, few_losses

  return pipeline


def stats(values: np.ndarray) -> dict:
  values = np.asarray(values, np.float64)
  return {"mean": float(values.mean()), "std": sample_std(values),
          "per_seed": values.tolist()}


def run_setting(index: int, regime: str, shift: float, cfg: dict, geo: Geometry, pipelines,
                params0, bar) -> dict:
  """Runs every method on one (regime, shift) setting, all seeds at once (vmapped)."""
  seeds = range(cfg["seeds"])
  per_seed = [setting_data(s, index, geo, regime, shift, cfg) for s in seeds]
  data = jax.tree.map(lambda *xs: np.stack(xs), *per_seed)
  keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 1000 + index))(
      jnp.arange(cfg["seeds"]))
  mask = np.asarray(REGIMES[regime]) > 0
  inputs = shard_seeds((params0, keys, data))  # the seed axis over all devices
  methods = {}
  for name, pipeline in pipelines.items():
    start = time.perf_counter()
    acc, terms, losses, few_losses = jax.tree.map(np.asarray, pipeline(*inputs))
    row = {s: stats(acc[s][:, mask].mean(1)) for s in ("id", "ood", "decorrelated")}
    row["clean"] = stats(acc["id"][:, ~mask].mean(1)) if (~mask).any() else None
    row["new_zero_shot"] = stats(acc["new_zero_shot"])
    row["new_few_shot"] = stats(acc["new_few_shot"])
    row["train_terms"] = {k.split("/")[1]: stats(v) for k, v in terms.items()}
    row.update(per_task_id=acc["id"].tolist(), per_task_ood=acc["ood"].tolist(),
               train_loss=losses.tolist(), few_shot_loss=few_losses.tolist(),
               time_s=time.perf_counter() - start)
    methods[name] = row
    bar.update()
  train = data["train"]
  noise = np.mean((true_return_gap(train, TRAIN_WEIGHTS) > 0) != (train.labels > 0.5))
  return {"regime": regime, "shift": shift, "confounded_tasks": np.flatnonzero(mask).tolist(),
          "label_noise": float(noise), "methods": methods}


def fmt(s: dict | None) -> str:
  return "n/a" if s is None else pm(s["per_seed"])


def format_tables(settings: list[dict]) -> str:
  lines = []
  for st in settings:
    lines += [f"## {st['regime']} regime, spurious shift m = {st['shift']} (confounded training "
              f"tasks {st['confounded_tasks']}, training label noise {st['label_noise']:.3f})",
              "", "| method | " + " | ".join(SPLITS) + " |", "|---" * (len(SPLITS) + 1) + "|"]
    for name, row in st["methods"].items():
      lines.append(f"| {name} | " + " | ".join(fmt(row[s]) for s in SPLITS) + " |")
    bt = st["methods"]["bt"]
    for name, row in st["methods"].items():
      if name == "bt":
        continue
      cells = []
      for s in SPLITS:
        if row[s] is None:
          cells.append("n/a")
          continue
        d = np.asarray(row[s]["per_seed"]) - np.asarray(bt[s]["per_seed"])
        cells.append(pm(d, sign=True))
      lines.append(f"| {name} − bt (paired) | " + " | ".join(cells) + " |")
    lines += ["", "ReCouPLe's terms on the training pairs after training (every method; the ratio "
              "penalty is the two segments' hinges added; aligned accuracy: R_par alone):", "",
              "| method | BT term | diff term | ratio penalty | accuracy | aligned accuracy |",
              "|---|---|---|---|---|---|"]
    for name, row in st["methods"].items():
      t = row["train_terms"]
      lines.append(f"| {name} | " + " | ".join(fmt(t[k]) for k in (
          "bt", "diff", "ratio", "accuracy", "aligned_accuracy")) + " |")
    lines.append("")
  return "\n".join(lines)


MATERIAL_GAIN = 0.1  # accuracy over Bradley-Terry a seed must gain for the claim to count


def claims(result: dict) -> list[Claim]:
  """The paper's two claims per regime, as report rows from a ``results.json`` dict.

  Per regime of the run (``partial`` first, then ``all``): (1) ReCouPLe's reward is more
  accurate than Bradley-Terry's when the spurious feature reverses at test (``ood``);
  (2) the reasons transfer: ReCouPLe scores the held-out task zero-shot better. Criterion:
  the paired per-seed accuracy gain over Bradley-Terry is at least 0.1 in every seed of
  every spurious shift of that regime (None without both methods).
  """
  where = {"partial": "the shortcut is in some training tasks and every reason recurs in "
                      "a clean one",
           "all": "the shortcut is in every training task"}
  what = {"ood": ("When {where}, ReCouPLe's reward is more accurate than Bradley-Terry's once "
                  "the spurious feature reverses at test"),
          "new_zero_shot": ("When {where}, reasons shared across tasks transfer: ReCouPLe "
                            "ranks a held-out task's pairs zero-shot better than Bradley-Terry")}
  seeds = result["config"]["seeds"]
  rows = []
  for regime in dict.fromkeys(st["regime"] for st in result["settings"]):
    group = [st for st in result["settings"] if st["regime"] == regime]
    for split, text in what.items():
      claim = text.format(where=where.get(regime, f"the regime is {regime}"))
      if not all({"bt", "recouple"} <= st["methods"].keys() for st in group):
        rows.append(Claim(claim, "no ReCouPLe / Bradley-Terry pair at this scale", None))
        continue
      cells, worst = [], np.inf
      for st in group:
        ours, bt = st["methods"]["recouple"][split], st["methods"]["bt"][split]
        gain = np.asarray(ours["per_seed"]) - np.asarray(bt["per_seed"])
        worst = min(worst, gain.min())
        cells.append(f"m = {st['shift']:g}: ReCouPLe {fmt(ours)} vs BT {fmt(bt)}, paired "
                     f"gain {pm(gain, sign=True)} (worst seed "
                     f"{gain.min():+.3f})")
      rows.append(Claim(claim, "; ".join(cells) + f" ({seeds} seeds)",
                        bool(worst >= MATERIAL_GAIN)))
  return rows


def plot(settings: list[dict], cfg: dict, out: str) -> None:
  names = list(settings[0]["methods"])
  fig, axes = plt.subplots(1, len(settings), figsize=(6.4 * len(settings), 4), squeeze=False)
  width = 0.8 / len(names)
  for ax, st in zip(axes[0], settings, strict=True):
    x = np.arange(len(SPLITS))
    for i, name in enumerate(names):
      row = st["methods"][name]
      mean = [np.nan if row[s] is None else row[s]["mean"] for s in SPLITS]
      std = [0.0 if row[s] is None else row[s]["std"] for s in SPLITS]
      ax.bar(x + (i - (len(names) - 1) / 2) * width, mean, width, yerr=std, capsize=2,
             label=name)
    ax.axhline(0.5, color="k", lw=0.8, ls=":")
    ax.set_xticks(x, SPLITS, rotation=20, fontsize=8)
    ax.set(ylim=(0, 1.02), ylabel="preference accuracy",
           title=f"{st['regime']} regime, m = {st['shift']} ({cfg['seeds']} seeds)")
    ax.legend(fontsize=7, loc="lower left")
  save_figure(fig, out, "accuracy.png")

  fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.5), squeeze=False)
  for ax, st in zip(axes[0], settings, strict=True):
    for name in names:
      loss = np.asarray(st["methods"][name]["train_loss"])  # (seeds, blocks)
      steps = (np.arange(loss.shape[1]) + 1) * cfg["log_every"]
      ax.plot(steps, loss.mean(0), label=name)
    ax.set(xlabel="step", ylabel="training loss (each method's own)", yscale="log",
           title=f"{st['regime']}, m = {st['shift']}")
    ax.legend(fontsize=7)
  save_figure(fig, out, "losses.png")


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/recouple",
                       quick_help="two settings, 3 seeds, ~3 min",
                       helps={"seeds": "seeds per setting and method"})


def main(argv=None) -> dict:
  def run(cfg, args):
    geo = geometry()
    configs = method_configs(cfg)
    first = configs["bt"][0]
    encoder = rc.init_encoder(jax.random.key(0), N_FEATURES, first)
    # same initial encoder per seed for every method and setting
    params0 = jax.tree.map(lambda *p: jnp.stack(p), *[  # eager: cheaper than compiling a vmap
        rc.init_encoder(jax.random.key(s), N_FEATURES, first).params
        for s in range(cfg["seeds"])])
    pipelines = {name: jax.jit(jax.vmap(make_pipeline(c, c_few, encoder)))
                 for name, (c, c_few) in configs.items()}
    settings = []
    with tqdm(total=len(cfg["settings"]) * len(configs), desc="recouple", unit="run") as bar:
      for i, (regime, shift) in enumerate(cfg["settings"]):
        settings.append(run_setting(i, regime, shift, cfg, geo, pipelines, params0, bar))
    return {"settings": settings,
            "geometry": {"reasons": geo.reasons.tolist(),
                         "train_tasks": geo.train_tasks.tolist(),
                         "new_tasks": geo.new_tasks.tolist(),
                         "train_weights": TRAIN_WEIGHTS.tolist(),
                         "new_weights": NEW_WEIGHTS.tolist()},
            "method_configs": {k: [str(c) for c in v] for k, v in configs.items()}}

  def figures(result, out):
    plot(result["settings"], result["config"], out)
    return ["accuracy.png", "losses.png"]

  return run_experiment(
      argv, cli(), "recouple", run, figures, lambda r: format_tables(r["settings"]),
      lambda r: ("Preference accuracy against the sign of the true return gap (mean ± std over "
                 "seeds). id / ood / decorrelated: confounded training tasks with the spurious "
                 "feature as in training / reversed / independent; clean: unconfounded training "
                 "tasks; new_*: the held-out task (spurious independent) before and after "
                 f"{r['config']['few_shot_steps']} fine-tuning steps on "
                 f"{r['config']['few_shot_pairs']} of its pairs. Paired rows: per-seed "
                 "difference to Bradley-Terry."))


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/recouple.md


_METHOD_NAME = {"bt": "Bradley-Terry", "recouple": "ReCouPLe",
                "recouple_noratio": "ReCouPLe, no ratio penalty"}


def _acc(row: dict, split: str) -> np.ndarray | None:
  return None if row.get(split) is None else np.asarray(row[split]["per_seed"], np.float64)


def page() -> dict[str, str]:
  """``{region: text}`` for docs/methods/recouple.md, from the committed quick and full records
  (``docs/results/recouple/``)."""
  quick, full = P.load("recouple", "quick"), P.load("recouple", "full")
  rows = []
  for st in quick["settings"]:
    for m, row in st["methods"].items():
      rows.append([st["regime"], _METHOD_NAME[m]]
                  + [("n/a" if _acc(row, s) is None
                      else P.pm(_acc(row, s), lambda v: P.f(v, 3))) for s in SPLITS])
  q = {st["regime"]: st["methods"] for st in quick["settings"]}
  gain = lambda ms, s: _acc(ms["recouple"], s) - _acc(ms["bt"], s)  # noqa: E731
  paired = lambda ms, s: P.pm(gain(ms, s), P.signed, lambda v: P.f(v, 3))  # noqa: E731
  mean = lambda ms, m, s: P.f(_acc(ms[m], s).mean())  # noqa: E731
  frows = []
  fs = {(st["regime"], st["shift"]): st["methods"] for st in full["settings"]}
  for (regime, shift), ms in fs.items():
    frows.append([regime, f"{shift:g}"]
                 + [f"{P.f(_acc(ms['bt'], s).mean(), 3)} / "
                    f"{P.f(_acc(ms['recouple'], s).mean(), 3)} ({paired(ms, s)})"
                    for s in ("ood", "decorrelated", "new_zero_shot")]
                 + [paired(ms, "new_few_shot")])
  shifts = sorted({sh for _, sh in fs})
  strong = shifts[-1]
  # the verdicts: the full run at the quick run's (weaker) shift
  p, a = fs[("partial", shifts[0])], fs[("all", shifts[0])]
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_shift": f"{quick['config']['settings'][0][1]:g}",
      "quick_steps": str(quick["config"]["steps"]),
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "quick_table": P.table(["regime", "method", "id", "ood", "decorrelated", "clean",
                              "new task, zero-shot", "new task, 64 labels"], rows),
      "paired": f"partial `ood` {paired(q['partial'], 'ood')}, zero-shot "
                f"{paired(q['partial'], 'new_zero_shot')}; all `ood` {paired(q['all'], 'ood')}, "
                f"zero-shot {paired(q['all'], 'new_zero_shot')}",
      "verdict_shift": f"{shifts[0]:g}",
      "few_shot_bt": mean(p, "bt", "new_few_shot"),
      "noratio_ood": P.span([_acc(ms["recouple_noratio"], "ood").mean()
                             - _acc(ms["recouple"], "ood").mean() for ms in fs.values()],
                            P.signed, sep=" to "),
      "full_seeds": str(full["config"]["seeds"]),
      "full_steps": P.thousands(full["config"]["steps"]),
      "full_shifts": " and ".join(f"{s:g}" for s in shifts),
      "full_wall": P.seconds(full["wall_time_s"]),
      "full_table": P.table(["regime", "m", "ood: BT / ReCouPLe (gain)",
                             "decorrelated: BT / ReCouPLe (gain)",
                             "new task zero-shot: BT / ReCouPLe (gain)",
                             "new task, 64 labels (gain)"], frows),
      "strong_shift": f"{strong:g}",
      "strong_bt": P.f(_acc(fs[("partial", strong)]["bt"], "ood").mean()),
      "strong_rc": P.f(_acc(fs[("partial", strong)]["recouple"], "ood").mean()),
      "strong_all": P.span([_acc(fs[("all", strong)][m], "ood").mean()
                            for m in ("bt", "recouple")]),
      "ood": f"{mean(p, 'recouple', 'ood')} against {mean(p, 'bt', 'ood')}",
      "decorrelated": f"{mean(p, 'recouple', 'decorrelated')} against "
                      f"{mean(p, 'bt', 'decorrelated')}",
      "zero_shot": f"{mean(p, 'recouple', 'new_zero_shot')} against "
                   f"{mean(p, 'bt', 'new_zero_shot')}",
      "rc_ood": mean(p, "recouple", "ood"),
      "clean": mean(p, "recouple", "clean"),
      "all_gain": P.signed(gain(a, "ood").mean(), 2),
      "hinge": f"{P.f(p['recouple_noratio']['train_terms']['ratio']['mean'])} to "
               f"{P.f(p['recouple']['train_terms']['ratio']['mean'])}",
  }


if __name__ == "__main__":
  main()
