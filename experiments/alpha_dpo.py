"""alpha-DPO vs Diffusion-DPO under flipped preference labels, on small DDPMs.

    python -m experiments.alpha_dpo [--quick] [--out DIR] [--seeds S]

For each task and seed (``jaxlab.models.ddpm``, ``jaxlab.preference.alpha_dpo``):

1. pretrain a DDPM (MLP noise predictor) on the data;
2. sample ``2 N`` points from it, pair them, and label each pair by a known reward
   (the higher-reward sample is preferred); then flip the labels of 0 / 20 / 40 % of
   the pairs (nested: the pairs flipped at 20 % are among those flipped at 40 %);
3. fine-tune a copy with the pretrained model frozen as reference, with
   Diffusion-DPO, alpha-DPO at a fixed ``alpha = 0.5`` and alpha-DPO with the dynamic
   alpha (``alpha_0 = 0.9999``, no warm-up: the official launch script's
   ``--reweight_step -1``); same beta, steps, batch and Adam settings for all three,
   repeated at each beta of the scale (quick: 10 and 1000; full: 10, 100, 1000 on the
   mixture). Beta matters: small beta lets the policy move far from the reference and
   keeps logits moderate; large beta makes ``|z|`` large (as the official beta = 5000
   does for SD latents), where alpha-DPO's bounded loss changes the picture;
4. sample from the fine-tuned model at evenly spaced checkpoints and report the mean
   reward, and two drift proxies: the fraction of samples off the data manifold and
   the KL divergence between the mode (class) histograms of the fine-tuned and the
   reference model's samples.

Tasks (``jaxlab.data.reward_tasks``):
  * ``mixture`` (all scales): 8 Gaussians (std 0.12) on a circle of radius 2. Reward
    ``r(x) = sum_k w_k exp(-|x - mu_k|^2 / (2 * 0.5^2))`` with ``w_k = (1 + cos
    theta_k) / 2``: 1 at the mode at angle 0, 0 at the opposite one, graded between; the
    pretrained model's mean reward is about 0.48. Off manifold: farther than 4 std
    from every mode. Modes: the nearest centre.
  * ``digits`` (full run only): scikit-learn's 8x8 digits scaled to ``[-1, 1]`` (64
    features). Reward: ``E[k] / 9`` under a fixed nearest-class-mean probe
    ``softmax_k(-|x - mean_k|^2 / tau)`` (``tau`` = a quarter of the mean within-class
    squared distance; 90% accurate on the real digits), so it favours the larger digits;
    a graded reward (class means 0.03 for 0s to 0.87 for 9s), so most pairs have a
    meaningful order. Off manifold: the nearest real digit is farther than the 99th
    percentile of real-digit nearest-neighbour distances. Modes: the probe's class.

The paper's claim checked: alpha-DPO loses less reward than Diffusion-DPO as the flip
rate grows (:func:`claims`). Every (method, beta, seed, flip) run of a task is one
``jax.vmap`` lane of one compiled program; its inputs (and the seeds of the pretraining
program) are placed with ``shard_seeds``, so a multi-device host splits the lanes over
its devices. Writes ``results.json``, ``summary.md``, ``reward_vs_flip.png``,
``reward_vs_step.png``, ``samples_mixture.png`` (and ``samples_digits.png``) under
``--out``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import run_experiment
from experiments.reporting import Claim, save_figure
from jaxlab.core.stats import spread
from jaxlab.data.reward_tasks import (
  TASKS,
  Task,
  label_pairs,
  mixture_task,
  sample_stats,
)
from jaxlab.models import ddpm
from jaxlab.nn import Net
from jaxlab.preference import alpha_dpo
from jaxlab.preference.alpha_dpo import LossParams
from jaxlab.training import shard_seeds

METHODS = {  # name -> FinetuneConfig fields that differ between methods
    "Diffusion-DPO": dict(loss="dpo"),
    "alpha-DPO (alpha=0.5)": dict(loss="alpha", alpha=0.5),
    "alpha-DPO (dynamic)": dict(loss="alpha_dynamic", alpha=0.9999, warmup_steps=0),
}

_MIX = dict(num_steps=50, hidden=(128, 128, 128), pretrain_steps=3000, pretrain_batch=256,
            pretrain_lr=2e-3, data_size=20_000, pairs=2000, betas=(10.0, 1000.0), lr=2e-4,
            finetune_steps=800, batch=64, snapshots=4, eval_samples=1000)
_DIG = dict(num_steps=50, hidden=(256, 256, 256), pretrain_steps=6000, pretrain_batch=128,
            pretrain_lr=1e-3, data_size=None, pairs=2000, betas=(10.0, 1000.0), lr=2e-4,
            finetune_steps=800, batch=64, snapshots=4, eval_samples=500)
CONFIGS = {
    "smoke": dict(seeds=4, flips=(0.0, 0.4), tasks={  # 4: the 4-device sharding test
        "mixture": {**_MIX, "num_steps": 10, "hidden": (16, 16), "pretrain_steps": 100,
                    "data_size": 1024, "pairs": 128, "betas": (10.0,), "finetune_steps": 20,
                    "batch": 16, "snapshots": 2, "eval_samples": 128, "lr": 1e-3}},
        # run only when named: --smoke --tasks digits checks the digits path in a minute
        extra_tasks={"digits": {**_DIG, "num_steps": 10, "hidden": (32, 32),
                                "pretrain_steps": 100, "pairs": 128, "betas": (10.0,),
                                "finetune_steps": 20, "batch": 16, "snapshots": 2,
                                "eval_samples": 64, "lr": 1e-3}}),
    "quick": dict(seeds=3, flips=(0.0, 0.2, 0.4), tasks={
        "mixture": {**_MIX, "pretrain_steps": 1000, "finetune_steps": 400, "eval_samples": 500}}),
    "full": dict(seeds=5, flips=(0.0, 0.2, 0.4), tasks={
        "mixture": {**_MIX, "betas": (10.0, 100.0, 1000.0), "finetune_steps": 1600,
                    "snapshots": 8},
        "digits": _DIG}),
}


def _new_params(seed: jax.Array, dim: int, hidden: tuple[int, ...]):
  return Net.create(ddpm.EpsMLP(dim, hidden, rngs=nnx.Rngs(jax.random.key(seed)))).params


def method_losses(betas: tuple[float, ...]) -> LossParams:
  """:data:`METHODS` x ``betas`` as one stacked :class:`LossParams` (method-major)."""
  each = [alpha_dpo.loss_params(beta=b, **fields) for fields in METHODS.values() for b in betas]
  return jax.tree.map(lambda *a: jnp.stack(a), *each)


def run_task(task: Task, tc: dict, seeds: int, flips: tuple[float, ...], bar) -> dict:
  """Pretrain, pair, fine-tune with every method and beta, evaluate.

  Two compiled programs: ``prepare`` (pretraining, sampling, labelling; vmapped over
  seeds) and ``tune_and_eval`` (vmapped over all (method, beta, seed, flip) runs: the
  loss choice is data, see :class:`~jaxlab.preference.alpha_dpo.LossParams`).
  """
  schedule = ddpm.make_schedule(tc["num_steps"], "cosine")
  # the graph from an abstract module; each seed's parameters are initialized in `prepare`
  net = Net.create(nnx.eval_shape(lambda: ddpm.EpsMLP(task.dim, tc["hidden"],
                                                      rngs=nnx.Rngs(0)))).replace(params=None)
  keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s), 6))(jnp.arange(seeds))
  k_data, k_fit, k_pairs, k_flip, k_tune, k_eval = (keys[:, i] for i in range(6))
  if task.dataset is None:
    data = jax.vmap(task.sample_data, (0, None))(k_data, tc["data_size"])
  else:
    data = jnp.broadcast_to(task.dataset, (seeds, *task.dataset.shape))
  # samples kept for the figures: a 2-D scatter, or one row of 12 images (64-d each)
  keep = min(400 if task.dim <= 2 else 12, tc["eval_samples"])
  n_pairs, m = tc["pairs"], tc["eval_samples"]

  # 1-2. pretrain each seed's DDPM, sample pairs and reference samples, label the pairs
  @jax.jit
  @jax.vmap
  def prepare(seed, k_fit, k_pairs, k_flip, data):
    params = _new_params(seed, task.dim, tc["hidden"])
    ref, losses = ddpm.fit(k_fit, net.replace(params=params), schedule, data,
                           steps=tc["pretrain_steps"], batch_size=tc["pretrain_batch"],
                           learning_rate=tc["pretrain_lr"])
    x = ddpm.sample(k_pairs, ref, schedule, (2 * n_pairs + m, task.dim))
    x_w, x_l = label_pairs(task, x[:2 * n_pairs], k_flip, flips)
    return ref.params, losses, x[2 * n_pairs:], sample_stats(task, x[2 * n_pairs:]), x_w, x_l

  ref_params, pre_losses, ref_x, ref_stats, x_w, x_l = prepare(
      *shard_seeds((jnp.arange(seeds), k_fit, k_pairs, k_flip, data)))
  bar.update()

  # 3-4. fine-tune every (method, beta, seed, flip) at once; evaluate the snapshots
  cfg = alpha_dpo.FinetuneConfig(steps=tc["finetune_steps"], batch_size=tc["batch"],
                                 learning_rate=tc["lr"])

  def tune_and_eval(loss, k_tune, k_eval, ref_params, x_w, x_l, ref_hist):
    _, metrics, snaps = alpha_dpo.finetune(k_tune, net.replace(params=ref_params), schedule,
                                           x_w, x_l, loss, cfg, snapshots=tc["snapshots"])

    def evaluate(params, key):
      y = ddpm.sample(key, net, schedule, (m, task.dim), params=params)
      return sample_stats(task, y, ref_hist), y[:keep]

    stats, ys = jax.vmap(evaluate)(snaps, jax.random.split(k_eval, tc["snapshots"]))
    return metrics, stats, ys[-1]

  betas = tuple(tc["betas"])
  shape = (len(METHODS) * len(betas), seeds, len(flips))
  li, si, fi = (jnp.asarray(a.ravel()) for a in np.indices(shape))
  # one flat vmap over runs: simpler (faster-compiling) HLO than nested vmaps
  flat = jax.jit(jax.vmap(tune_and_eval))(*shard_seeds((
      jax.tree.map(lambda a: a[li], method_losses(betas)), k_tune[si], k_eval[si],
      jax.tree.map(lambda a: a[si], ref_params), x_w[si, fi], x_l[si, fi],
      ref_stats["hist"][si])))
  devices = len(jax.tree.leaves(flat)[0].sharding.device_set)  # the lanes ran on
  metrics, stats, ys = jax.tree.map(
      lambda a: np.asarray(a).reshape(len(METHODS), len(betas), *shape[1:], *a.shape[1:]),
      flat)
  bar.update()

  rows, samples = [], []
  tail = max(tc["finetune_steps"] // 10, 1)
  for i, method in enumerate(METHODS):
    for b, beta in enumerate(betas):
      for j, f in enumerate(flips):
        samples.append({"method": method, "beta": beta, "flip": f,
                        "samples_seed0": np.round(ys[i, b, 0, j], 3).tolist()})
        for s in range(seeds):
          at = (i, b, s, j)
          rows.append({
              "task": task.name, "method": method, "beta": beta, "flip": f, "seed": s,
              "reward": float(stats["reward"][at][-1]),
              "off_manifold": float(stats["off_manifold"][at][-1]),
              "mode_kl": float(stats["mode_kl"][at][-1]),
              "reward_curve": stats["reward"][at].tolist(),
              "implicit_acc": float(np.mean(metrics["pref/implicit_acc"][at][-tail:])),
              "p_mean": float(np.mean(metrics["pref/p_mean"][at][-tail:])),
              "alpha_final": float(metrics["pref/alpha"][at][-1]),
              "loss_final": float(np.mean(metrics["pref/loss"][at][-tail:]))})
  flat_w, flat_l = (a[:, 0].reshape(-1, task.dim) for a in (x_w, x_l))
  return {"rows": rows, "samples": samples, "betas": list(betas), "devices": devices,
          "reference": {"reward": np.asarray(ref_stats["reward"]).tolist(),
                        "off_manifold": np.asarray(ref_stats["off_manifold"]).tolist(),
                        "samples_seed0": np.round(np.asarray(ref_x[0, :keep]), 3).tolist()},
          "pretrain_loss_final": np.asarray(pre_losses[:, -100:].mean(1)).tolist(),
          "pair_reward_gap": float(jnp.mean(task.reward(flat_w) - task.reward(flat_l)))}


def _mean_std(values) -> tuple[float, float]:
  s = spread(values)  # the house convention: sample std (ddof=1); 0 for one seed here
  return s.mean, s.std if s.n > 1 else 0.0


def _select(rows: list[dict], **match) -> list[dict]:
  return sorted((r for r in rows if all(r[k] == v for k, v in match.items())),
                key=lambda r: r["seed"])


def summarize(task_name: str, res: dict, flips: tuple[float, ...]) -> tuple[list[dict], str]:
  """Per (method, beta, flip) means and std over seeds, the drop with flips, and a table."""
  refs = np.asarray(res["reference"]["reward"])
  ref_mean, ref_std = _mean_std(refs)
  lines = [f"## {task_name}: reward of generated samples (mean ± std over seeds)", "",
           f"Pretrained reference: reward {ref_mean:.3f} ± {ref_std:.3f}, off-manifold "
           f"{np.mean(res['reference']['off_manifold']):.3f}; reward gap within labelled "
           f"pairs {res['pair_reward_gap']:.3f}.", "",
           "| beta | method | flip | reward | off-manifold | mode KL to ref | implicit acc | "
           "final alpha |", "|---|---|---|---|---|---|---|---|"]
  table, drops = [], []
  for beta in res["betas"]:
    for method in METHODS:
      for f in flips:
        rs = _select(res["rows"], method=method, beta=beta, flip=f)
        row = {"task": task_name, "method": method, "beta": beta, "flip": f}
        for k in ("reward", "off_manifold", "mode_kl", "implicit_acc", "alpha_final"):
          row[k], row[k + "_std"] = _mean_std([r[k] for r in rs])
        table.append(row)
        alpha = "-" if METHODS[method]["loss"] == "dpo" else f"{row['alpha_final']:.3f}"
        lines.append(f"| {beta:g} | {method} | {f:.0%} | {row['reward']:.3f} ± "
                     f"{row['reward_std']:.3f} | {row['off_manifold']:.3f} | "
                     f"{row['mode_kl']:.3f} | {row['implicit_acc']:.2f} | {alpha} |")
    for method in METHODS:
      g0, g1 = (np.array([r["reward"] for r in _select(res["rows"], method=method, beta=beta,
                                                        flip=f)]) - refs
                for f in (flips[0], flips[-1]))
      drop = _mean_std(g0 - g1)
      kept = f"{np.mean(g1) / np.mean(g0):.0%}" if np.mean(g0) > 1e-9 else "n/a"
      drops.append(f"| {beta:g} | {method} | {g0.mean():+.3f} | {g1.mean():+.3f} | "
                   f"{drop[0]:.3f} ± {drop[1]:.3f} | {kept} |")
  lines += ["", f"### {task_name}: reward gain over the reference, {flips[0]:.0%} vs "
            f"{flips[-1]:.0%} flipped (drop: per seed, mean ± std)", "",
            "| beta | method | gain, clean | gain, noisy | drop | gain kept |",
            "|---|---|---|---|---|---|", *drops, "",
            f"### {task_name}: the claim, per beta (alpha-DPO loses less reward than "
            "Diffusion-DPO as flips grow)", ""]
  for v in claim_verdicts(res, flips):
    lines.append(
        f"- beta {v['beta']:g}, {v['method']}: drop {v['drop_alpha']:.3f} vs "
        f"{v['drop_dpo']:.3f} for Diffusion-DPO (paired difference {v['diff_mean']:+.3f} ± "
        f"{v['diff_std']:.3f}; lost less in {v['seeds_less']}/{v['seeds']} seeds); reward at "
        f"{flips[-1]:.0%} flipped {v['noisy_alpha']:.3f} vs {v['noisy_dpo']:.3f}: "
        f"**{v['verdict']}**")
  return table, "\n".join(lines)


def claim_verdicts(res: dict, flips: tuple[float, ...]) -> list[dict]:
  """Per beta and alpha-DPO variant: its reward drop from clean to the highest flip rate
  against Diffusion-DPO's, paired by seed (same pretrained model and pairs).

  ``verdict``: "holds" if alpha-DPO lost less in every seed, "does not hold" if it lost
  more in every seed, else "inconclusive".
  """
  def rewards(method, beta, f):
    return np.array([r["reward"] for r in _select(res["rows"], method=method, beta=beta,
                                                  flip=f)])

  dpo = next(m for m, v in METHODS.items() if v["loss"] == "dpo")
  out = []
  for beta in res["betas"]:
    drop_dpo = rewards(dpo, beta, flips[0]) - rewards(dpo, beta, flips[-1])
    for method in METHODS:
      if method == dpo:
        continue
      noisy = rewards(method, beta, flips[-1])
      diff = rewards(method, beta, flips[0]) - noisy - drop_dpo
      less = int(np.sum(diff < 0))
      out.append({"beta": beta, "method": method, "drop_alpha": float(np.mean(diff + drop_dpo)),
                  "drop_dpo": float(np.mean(drop_dpo)), "diff_mean": _mean_std(diff)[0],
                  "diff_std": _mean_std(diff)[1], "seeds_less": less, "seeds": len(diff),
                  "noisy_alpha": float(noisy.mean()),
                  "noisy_dpo": float(rewards(dpo, beta, flips[-1]).mean()),
                  "verdict": "holds" if less == len(diff) else "does not hold" if less == 0
                  else "inconclusive"})
  return out


def claims(result: dict) -> list[Claim]:
  """The paper's claim per task and alpha-DPO variant, from :func:`claim_verdicts`.

  Claim: alpha-DPO loses less reward than Diffusion-DPO as the flip rate grows. At each
  beta, each seed's reward drop from the lowest to the highest flip rate is paired with
  Diffusion-DPO's in the same seed (same pretrained model and pairs). Criterion: ``held``
  is True if alpha-DPO lost less in every seed at every beta, False if at some beta it
  lost more in every seed, else None (the seeds disagree and no beta contradicts it).
  """
  flips = tuple(result["config"]["flips"])
  rows = []
  for name, res in result["tasks"].items():
    verdicts = res.get("claim") or claim_verdicts(res, flips)
    for method in dict.fromkeys(v["method"] for v in verdicts):
      vs = [v for v in verdicts if v["method"] == method]
      kinds = {v["verdict"] for v in vs}
      held = True if kinds == {"holds"} else False if "does not hold" in kinds else None
      measured = "; ".join(
          f"beta {v['beta']:g}: {v['drop_alpha']:.3f} vs {v['drop_dpo']:.3f} (paired "
          f"{v['diff_mean']:+.3f} ± {v['diff_std']:.3f}, lost less in {v['seeds_less']}/"
          f"{v['seeds']} seeds)" for v in vs)
      rows.append(Claim(
          f"{method} loses less reward than Diffusion-DPO as flipped labels grow from "
          f"{flips[0]:.0%} to {flips[-1]:.0%} ({name})",
          f"reward drop, {method} vs Diffusion-DPO: {measured}", held))
  return rows


def plot(results: dict, flips: tuple[float, ...], out: str) -> list[str]:
  panels = [(name, beta) for name, res in results.items() for beta in res["betas"]]
  fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.6), squeeze=False)
  for ax, (name, beta) in zip(axes[0], panels, strict=True):
    res = results[name]
    for method in METHODS:
      stats = [_mean_std([r["reward"] for r in _select(res["rows"], method=method, beta=beta,
                                                        flip=f)]) for f in flips]
      ax.errorbar(np.asarray(flips) * 100, [s[0] for s in stats], [s[1] for s in stats],
                  marker="o", capsize=3, label=method)
    ax.axhline(np.mean(res["reference"]["reward"]), color="k", ls="--", lw=1,
               label="pretrained")
    ax.set(xlabel="flipped labels (%)", ylabel="mean reward of samples",
           title=f"{name}, beta={beta:g}")
    ax.legend(fontsize=7)
  save_figure(fig, out, "reward_vs_flip.png")

  fig, axes = plt.subplots(len(panels), len(flips),
                           figsize=(3.6 * len(flips), 3.0 * len(panels)), squeeze=False)
  for i, (name, beta) in enumerate(panels):
    res = results[name]
    for j, f in enumerate(flips):
      ax = axes[i, j]
      for method in METHODS:
        c = np.array([r["reward_curve"] for r in _select(res["rows"], method=method, beta=beta,
                                                         flip=f)])
        xs = np.arange(c.shape[1] + 1) / c.shape[1]
        ax.plot(xs, np.r_[np.mean(res["reference"]["reward"]), c.mean(0)], "o-", ms=3,
                label=method)
      ax.set_title(f"{name}, beta={beta:g}, {f:.0%} flipped", fontsize=9)
      ax.set(xlabel="fraction of fine-tuning steps", ylabel="mean reward")
      ax.legend(fontsize=6)
  save_figure(fig, out, "reward_vs_step.png", dpi=110)
  figures = ["reward_vs_flip.png", "reward_vs_step.png"]

  if "mixture" in results:
    figures.append(_plot_mixture_samples(results["mixture"], flips, out))
  if "digits" in results:
    figures.append(_plot_digit_samples(results["digits"], flips, out))
  return figures


def _plot_mixture_samples(res: dict, flips: tuple[float, ...], out: str) -> str:
  task = mixture_task()
  g = np.linspace(-3, 3, 121)
  gx, gy = np.meshgrid(g, g)
  rz = np.asarray(task.reward(jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1),
                                          jnp.float32))).reshape(gx.shape)
  lines = [(beta, f) for beta in res["betas"] for f in flips]
  cols = 1 + len(METHODS)
  fig, axes = plt.subplots(len(lines), cols, figsize=(2.4 * cols, 2.4 * len(lines)),
                           squeeze=False)
  for r, (beta, f) in enumerate(lines):
    panels = [("pretrained", res["reference"]["samples_seed0"])] + [
        (s["method"], s["samples_seed0"]) for s in res["samples"]
        if s["beta"] == beta and s["flip"] == f]
    for k, (title, pts) in enumerate(panels):
      ax = axes[r, k]
      pts = np.asarray(pts)
      ax.contourf(gx, gy, rz, levels=12, cmap="Greens", alpha=0.5)
      ax.scatter(pts[:, 0], pts[:, 1], s=2, c="k")
      ax.set(xlim=(-3, 3), ylim=(-3, 3), xticks=[], yticks=[])
      ax.set_title(f"{title}\nbeta={beta:g}, {f:.0%} flipped" if k else title, fontsize=7)
  save_figure(fig, out, "samples_mixture.png", dpi=100)
  return "samples_mixture.png"


def _plot_digit_samples(res: dict, flips: tuple[float, ...], out: str, per_row: int = 12) -> str:
  lines = [("pretrained", res["reference"]["samples_seed0"])] + [
      (f"{s['method']}, beta={s['beta']:g}, {s['flip']:.0%}", s["samples_seed0"])
      for s in res["samples"] if s["flip"] in (flips[0], flips[-1])]
  fig, axes = plt.subplots(len(lines), 1, figsize=(per_row * 0.6, 0.8 * len(lines)),
                           squeeze=False)
  for ax, (title, pts) in zip(axes[:, 0], lines, strict=True):
    imgs = np.asarray(pts)[:per_row].reshape(-1, 8, 8)
    ax.imshow(np.concatenate(list(imgs), 1), cmap="gray_r", vmin=-1, vmax=1)
    ax.set_axis_off()
    ax.set_title(title, fontsize=7, loc="left")
  save_figure(fig, out, "samples_digits.png", dpi=100)
  return "samples_digits.png"


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``; ``--tasks`` selects task names, so the
  per-task settings dict is ``--task_settings`` (a dict literal merged into the scale's)."""
  cli = ExperimentCLI(__doc__, CONFIGS, out="results/alpha_dpo",
                      quick_help="2-D mixture only, 3 seeds, 2 betas: 2-4 min on 2 cores",
                      flags={"tasks": "task_settings"},
                      helps={"seeds": "seeds (each pretrains its own)",
                             "flips": "fractions of preference labels flipped",
                             "tasks": "task name -> its settings",
                             "extra_tasks": "tasks run only when named with --tasks"})
  cli.parser.add_argument("--tasks", nargs="+", default=None, choices=list(TASKS),
                          help="a subset of the scale's tasks (default: all of them)")
  return cli


def select_tasks(cfg: dict, tasks: list[str] | None, scale: str) -> dict:
  """``cfg`` with the tasks ``--tasks`` names (default: the scale's own) and without
  ``extra_tasks``; raises ``ValueError`` for a task the scale does not have."""
  cfg = dict(cfg)
  extra = cfg.pop("extra_tasks", {})
  if tasks:
    available = {**cfg["tasks"], **extra}
    missing = [t for t in tasks if t not in available]
    if missing:
      raise ValueError(f"--tasks {missing} not available at the {scale} scale (it has "
                       f"{list(available)}; digits runs at full scale and with --smoke)")
    cfg["tasks"] = {t: available[t] for t in tasks}
  return cfg


def main(argv=None) -> dict:
  def run(cfg, args):
    cfg = select_tasks(cfg, args.tasks, "smoke" if args.smoke else
                       "quick" if args.quick else "full")
    flips = tuple(cfg["flips"])
    results, tables = {}, []
    with tqdm(total=2 * len(cfg["tasks"]), desc="alpha_dpo", unit="stage") as bar:
      for name, tc in cfg["tasks"].items():
        t0 = time.time()
        results[name] = run_task(TASKS[name](), tc, cfg["seeds"], flips, bar)
        results[name]["time_s"] = time.time() - t0
        results[name]["claim"] = claim_verdicts(results[name], flips)
        tables += summarize(name, results[name], flips)[0]
    # "config" replaces the parsed configuration in the result: the selected tasks only
    return {"config": cfg, "methods": METHODS, "table": tables, "tasks": results}

  def text(result):
    flips = tuple(result["config"]["flips"])
    return "\n\n".join(summarize(name, res, flips)[1] for name, res in result["tasks"].items())

  return run_experiment(
      argv, cli(), "alpha_dpo", run,
      lambda r, out: plot(r["tasks"], tuple(r["config"]["flips"]), out), text,
      lambda r: ("Same beta, Adam step, steps and batch for every method; fixed alpha 0.5; "
                 "dynamic alpha_0 = 0.9999 without warm-up (official defaults). Drift proxies: "
                 "off-manifold fraction and KL(mode histogram of samples || reference's). "
                 "Settings: "
                 + "; ".join(f"{n}: lr {tc['lr']}, {tc['finetune_steps']} steps x "
                             f"{tc['batch']} pairs of {tc['pairs']}, T = {tc['num_steps']}, "
                             f"MLP {tc['hidden']}" for n, tc in r["config"]["tasks"].items())))


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/alpha_dpo.md


_DPO, _FIXED, _DYN = METHODS  # the methods' names, in METHODS' order
_METHOD = {_DPO: "Diffusion-DPO", _FIXED: "alpha-DPO (alpha = 0.5)", _DYN: "alpha-DPO (dynamic)"}


def _per_seed(task: dict, key: str, method: str, beta: float, flip: float) -> np.ndarray:
  rows = sorted((r for r in task["rows"] if r["method"] == method and r["beta"] == beta
                 and r["flip"] == flip), key=lambda r: r["seed"])
  return np.asarray([r[key] for r in rows], np.float64)


def _drop(task: dict, method: str, beta: float, flips: list[float]) -> np.ndarray:
  """Per-seed reward drop from the lowest to the highest flip rate."""
  return (_per_seed(task, "reward", method, beta, flips[0])
          - _per_seed(task, "reward", method, beta, flips[-1]))


def page() -> dict[str, str]:
  """``{region: text}`` for docs/methods/alpha_dpo.md, from the committed quick and full records
  (``docs/results/alpha_dpo/``)."""
  quick, full = P.load("alpha_dpo", "quick"), P.load("alpha_dpo", "full")
  flips = quick["config"]["flips"]
  mix = quick["tasks"]["mixture"]
  rows = []
  for beta in mix["betas"]:
    for m in (_DPO, _FIXED, _DYN):
      rows.append([f"{beta:g}", _METHOD[m]]
                  + [P.pm(_per_seed(mix, "reward", m, beta, fl), lambda v: P.f(v, 3))
                     for fl in flips]
                  + [" / ".join(P.f(_per_seed(mix, "off_manifold", m, beta, fl).mean(), 3)
                                for fl in flips)])
  lo, hi = mix["betas"][0], mix["betas"][-1]
  d = {(m, b): _drop(mix, m, b, flips) for m in (_DPO, _FIXED, _DYN) for b in mix["betas"]}
  more = [int(np.sum(d[(m, lo)] > d[(_DPO, lo)])) for m in (_FIXED, _DYN)]
  n = len(d[(_DPO, lo)])
  off = lambda m, b: [_per_seed(mix, "off_manifold", m, b, fl).mean() for fl in flips]  # noqa: E731
  fflips = full["config"]["flips"]
  frows, held, cells = [], [], 0
  for name, task in full["tasks"].items():
    for beta in task["betas"]:
      cell = [name, f"{beta:g}"]
      base = _drop(task, _DPO, beta, fflips)
      for m in (_FIXED, _DYN):
        dm = _drop(task, m, beta, fflips)
        less = int(np.sum(dm < base))
        text = f"{P.f(dm.mean(), 3)} vs {P.f(base.mean(), 3)} ({less}/{len(dm)})"
        if less == len(dm):
          text = text.replace(f"({less}/{len(dm)})", f"(**{less}/{len(dm)}**)")
          held.append((name, beta, m, task))
        cell.append(text)
        cells += 1
      frows.append(cell)
  held_text = []
  for name, beta, m, task in held:
    a = _per_seed(task, "reward", m, beta, fflips[-1]).mean()
    b = _per_seed(task, "reward", _DPO, beta, fflips[-1]).mean()
    what = "fixed alpha 0.5" if m == _FIXED else "the dynamic alpha"
    held_text.append(f"{what} at beta {beta:g} on the {name}, where it also ends "
                     f"{'lower' if a < b else 'higher'} in reward: {P.f(a, 3)} vs {P.f(b, 3)} at "
                     f"{100 * fflips[-1]:.0f}% flipped")
  dyn_held = sum(m == _DYN for _, _, m, _ in held)
  digits = full["tasks"]["digits"]
  digit_sd = [P.std(_drop(digits, m, b, fflips) - _drop(digits, _DPO, b, fflips))
              for m in (_FIXED, _DYN) for b in digits["betas"]]
  words = {0: "none", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six",
           7: "seven", 8: "eight", 9: "nine", 10: "ten"}
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_steps": str(quick["config"]["tasks"]["mixture"]["finetune_steps"]),
      "quick_batch": str(quick["config"]["tasks"]["mixture"]["batch"]),
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "pretrained": P.pm(mix["reference"]["reward"], lambda v: P.f(v, 3)),
      "quick_table": P.table(["beta", "method", "0% flipped", "20%", "40%",
                              "off-manifold (0/20/40%)"], rows),
      "lo_drop_dpo": P.f(d[(_DPO, lo)].mean()),
      "lo_drop_alpha": P.span([d[(m, lo)].mean() for m in (_FIXED, _DYN)]),
      "lo_seeds": "in every seed" if min(more) == n else f"in {min(more)}-{max(more)} of {n} seeds",
      "hi_drops": f"{P.f(d[(_DYN, hi)].mean())} vs {P.f(d[(_DPO, hi)].mean())}",
      "hi_off": P.span([100 * v for m in (_FIXED, _DYN) for v in off(m, hi)],
                       lambda v: f"{v:.0f}")
                + f"% off-manifold against {100 * np.mean(off(_DPO, hi)):.0f}%",
      "full_wall": P.seconds(full["wall_time_s"]),
      "full_seeds": str(full["config"]["seeds"]),
      "full_mix_steps": P.thousands(full["config"]["tasks"]["mixture"]["finetune_steps"]),
      "full_digit_steps": P.thousands(full["config"]["tasks"]["digits"]["finetune_steps"]),
      "full_table": P.table(["task", "beta", "alpha = 0.5", "dynamic alpha"], frows),
      "held": f"{words.get(len(held), len(held))} of {words.get(cells, cells)} cells"
              + (f" ({'; '.join(held_text)})" if held_text else ""),
      "dynamic": ("never loses less in every seed" if dyn_held == 0
                  else f"loses less in every seed in {dyn_held} cells"),
      "digit_spread": f"±{P.span(digit_sd, lambda v: P.g(v, 1))}",
      "digit_off": f"{100 * np.mean(digits['reference']['off_manifold']):.0f}%",
  }


if __name__ == "__main__":
  main()
