"""Training re-evaluation curves: measured vs predicted TREC, and the curriculum test.

    python -m experiments.trec [--quick] [--out DIR] [--seeds S]

A tiny causal transformer (``jaxlab.models``) learns Markov-document text
(``jaxlab.data.markov_text``: each step's batch comes from its own random
document chain mixed with one shared chain) with ``optax.adamw``.

1. **TREC vs prediction.** Schedules constant / cosine / WSD (5% warmup; WSD
   decays linearly over the last 20%) times weight decays chosen so that
   AdamW's timescale ``tau = 1 / (eta lambda)`` is ``tau_fracs`` of the run.
   For each configuration the TREC (loss of the final weights on every
   training batch, mean over seeds) is compared with

   * ``ema``: the pure AdamW-EMA prediction ``-c_t / max c`` (``jaxlab.dynamics.trec``);
   * ``calibrated``: the same with an extra interference forgetting rate
     ``phi`` fitted on one configuration (constant schedule, largest tau) and
     used unchanged for all others.

   Pearson and Spearman correlations on the raw curve, Pearson on curves
   smoothed over ``T / 25`` steps, and the argmin step (smoothed measured curve)
   as a fraction of training.
2. **Curriculum.** WSD with ``tau = curriculum_tau_frac * T``; a contiguous
   slice of high-quality-domain steps (``slice_fracs`` of training; the same
   high-quality batches and documents in every placement) placed at
   the window maximizing ``sum c_t`` (``predicted_ema``), the same with the
   calibrated ``phi`` (``predicted_calibrated``), at the end, and (full scale)
   at the start. Reported: held-out loss on the high-quality domain, mean ± std
   over seeds, and the paired gain ``end - placement`` per seed (positive: the
   placement beats the end).

Every (schedule, decay) or (slice, placement) run of a seed is one ``jax.vmap`` lane
of one compiled program; the lanes' inputs are placed with ``shard_seeds``, so a
multi-device host splits them over its devices (seeds run one after another).
:func:`claims` gives the report rows. Writes ``results.json``, ``summary.md``,
``trec_curves.png``, ``curriculum.png``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import run_experiment
from experiments.reporting import Claim, pm, sample_std
from jaxlab.data import markov_text as mt
from jaxlab.dynamics import trec
from jaxlab.models import transformer as tfm
from jaxlab.training import shard_seeds

MODEL = dict(vocab=64, d_model=32, heads=2, layers=2, seq_len=32)
CONFIGS = {
    # smoke: 6 TREC configs = 2 slices x 3 placements, so both phases share one compile
    "smoke": dict(MODEL, vocab=16, d_model=16, layers=1, seq_len=16, steps=60, batch=4,
                  tau_fracs=(0.2, 2.0), trec_seeds=1, slice_fracs=(0.05, 0.1),
                  arms=("predicted_ema", "predicted_calibrated", "end"), seeds=2, eval_seqs=64),
    "quick": dict(MODEL, steps=300, batch=16, tau_fracs=(0.1, 0.5, 2.0), trec_seeds=1,
                  slice_fracs=(0.03, 0.1), arms=("predicted_ema", "predicted_calibrated", "end"),
                  seeds=3, eval_seqs=256),
    "full": dict(MODEL, steps=2000, batch=16, tau_fracs=(0.1, 0.5, 2.0), trec_seeds=2,
                 slice_fracs=(0.03, 0.1),
                 arms=("start", "predicted_ema", "predicted_calibrated", "end"), seeds=5,
                 eval_seqs=1024),
}
COMMON = dict(
    peak_lr=1e-2,  # Adam peak learning rate
    warmup_fraction=0.05,  # linear warmup, all schedules
    decay_fraction=0.2,  # WSD's final linear decay
    curriculum_tau_frac=0.5,  # curriculum runs: tau = 0.5 T
    # candidate forgetting rates phi, as phi * peak_lr * T (timescales per run)
    forgetting_grid=(0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0),
    smooth_frac=0.04,  # moving-average window for smoothed correlations / argmin (T / 25)
    trec_chunk=20,  # batches re-evaluated at once (divides every scale's steps)
)
SCHEDULES = trec.SCHEDULES


def setup(cfg: dict) -> tuple[mt.MarkovTextSpec, tfm.TransformerConfig]:
  spec = mt.MarkovTextSpec(vocab_size=cfg["vocab"], branching=3,
                           global_branching=min(8, cfg["vocab"]), global_prob=0.5)
  model = tfm.TransformerConfig(cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["layers"],
                                cfg["seq_len"], positions="learned")  # as the recorded runs
  return spec, model


def schedule(kind: str, cfg: dict) -> jax.Array:
  """The scale's per-step learning rates of one schedule (cached: each is compiled once)."""
  return _schedule(kind, cfg["steps"], cfg["peak_lr"], cfg["warmup_fraction"],
                   cfg["decay_fraction"])


@functools.lru_cache
def _schedule(kind: str, steps: int, peak_lr: float, warmup: float, decay: float) -> jax.Array:
  return trec.lr_schedule(kind, steps, peak_lr, warmup_fraction=warmup, decay_fraction=decay)


def weight_decay(tau_frac: float, cfg: dict) -> float:
  """lambda with AdamW timescale 1 / (peak_lr lambda) = tau_frac * T."""
  return 1.0 / (tau_frac * cfg["steps"] * cfg["peak_lr"])


def _slice_steps(cfg: dict, frac: float | None = None) -> int:
  """Steps in a high-quality slice of ``frac`` of training (default: the widest)."""
  frac = max(cfg["slice_fracs"]) if frac is None else frac
  return max(int(round(frac * cfg["steps"])), 1)


def _lm(key: jax.Array, cfg: dict):
  """Corpus chains, initial network and the LM loss of one seed."""
  spec, model = setup(cfg)
  k_chain, k_init = jax.random.split(key)
  chains = mt.make_chains(k_chain, spec)
  net = tfm.create(model, k_init)
  loss_fn = lambda params, tokens: tfm.next_token_loss(net.replace(params=params), tokens)
  return spec, chains, net, loss_fn


@functools.partial(jax.jit, static_argnames="cfg_items")
def runs(key: jax.Array, lrs: jax.Array, wds: jax.Array, starts: jax.Array, lengths: jax.Array,
         cfg_items: tuple) -> dict[str, jax.Array]:
  """``A`` training runs of one seed, vmapped: each its own schedule, decay and HQ slice.

  All runs share the initialization, the corpus, the document stream and the
  high-quality text; only the slice's position differs. Both phases use this
  one program (one compile where their ``A`` agree).

  Args:
    key: the seed's key.
    lrs: ``(A, T)`` per-step learning rates.
    wds: ``(A,)`` weight decays.
    starts, lengths: ``(A,)`` high-quality slices (length 0: none).
    cfg_items: the scale's configuration as sorted items (static).

  Returns:
    ``trec`` and ``train_loss`` ``(A, T)``; held-out losses ``hq`` (high-quality
    domain) and ``general`` (unseen documents), ``(A,)``.
  """
  cfg = dict(cfg_items)
  k_lm, k_data, k_slice, k_hq, k_gen = jax.random.split(key, 5)
  spec, chains, net, loss_fn = _lm(k_lm, cfg)
  length = cfg["seq_len"] + 1
  docs = mt.step_batches(k_data, chains, spec, cfg["steps"], cfg["batch"], length)
  n_eval = cfg["eval_seqs"]
  hq_eval = mt.hq_sequences(k_hq, chains, spec, n_eval, length)
  general_eval = mt.step_batches(k_gen, chains, spec, n_eval, 1, length)[:, 0]  # unseen docs
  evals = jnp.concatenate([hq_eval, general_eval])

  def one(lr, wd, start, n):
    batches = mt.with_hq_slice(k_slice, chains, spec, docs, start, n, _slice_steps(cfg))
    params, losses = trec.train_adamw(loss_fn, net.params, batches, lr, wd)
    curve = trec.training_reevaluation_curve(params, batches, loss_fn, chunk=cfg["trec_chunk"])
    # both held-out sets in one forward pass: per-sequence losses, then the two means
    per_seq = jax.vmap(lambda seq: loss_fn(params, seq))(evals)
    return {"trec": curve, "train_loss": losses, "hq": per_seq[:n_eval].mean(),
            "general": per_seq[n_eval:].mean()}

  return jax.vmap(one)(lrs, wds, starts, lengths)


def _rounded(x: np.ndarray) -> list[float]:
  """A curve for results.json: float64 first, so 5 decimals print as 5 decimals."""
  return np.round(np.asarray(x, np.float64), 5).tolist()


def _corr(measured: np.ndarray, predicted: np.ndarray, window: int) -> dict:
  sm, sp = trec.moving_average(measured, window), trec.moving_average(predicted, window)
  return {"pearson": float(stats.pearsonr(measured, predicted)[0]),
          "spearman": float(stats.spearmanr(measured, predicted)[0]),
          "pearson_smoothed": float(stats.pearsonr(sm, sp)[0])}


def analyze_trec(cfg: dict, confs: list[tuple[str, float]], curves: np.ndarray,
                 losses: np.ndarray) -> dict:
  """Correlations and argmins of the seed-mean TRECs; calibrates ``phi`` on one config."""
  steps = cfg["steps"]
  window = max(int(round(cfg["smooth_frac"] * steps)), 1)
  mean = curves.mean(axis=0)  # (C, T) over seeds
  calib = confs.index(("constant", max(cfg["tau_fracs"])))
  kind, tau_frac = confs[calib]
  cands = np.asarray(cfg["forgetting_grid"]) / (cfg["peak_lr"] * steps)
  wd_calib = weight_decay(tau_frac, cfg)
  # keep 1 - eta (lambda + phi) > 0 for every configuration phi is applied to
  cands = cands[(weight_decay(min(cfg["tau_fracs"]), cfg) + cands) * cfg["peak_lr"] < 1.0]
  phi = trec.fit_forgetting(mean[calib], schedule(kind, cfg), wd_calib, cands, window)
  rows = []
  for i, (kind, tau_frac) in enumerate(confs):
    lrs, wd = schedule(kind, cfg), weight_decay(tau_frac, cfg)
    pred = {"ema": np.asarray(trec.predict_trec(lrs, wd)),
            "ema_momentum": np.asarray(trec.predict_trec(lrs, wd, b1=0.9)),
            "calibrated": np.asarray(trec.predict_trec(lrs, wd, forgetting=phi))}
    smoothed = trec.moving_average(mean[i], window)
    rows.append({
        "schedule": kind, "tau_frac": tau_frac, "weight_decay": wd,
        "tau_steps": trec.ema_timescale(cfg["peak_lr"], wd),
        "calibration_config": i == calib,
        "corr": {k: _corr(mean[i], p, window) for k, p in pred.items()},
        "argmin_frac": {"measured": float(np.argmin(smoothed) / steps),
                        **{k: float(np.argmin(p) / steps) for k, p in pred.items()}},
        "trec_range": float(smoothed.max() - smoothed.min()),
        "final_train_loss": float(losses[:, i, -max(steps // 20, 1):].mean()),
        "measured": _rounded(mean[i]), "predicted": {k: _rounded(p) for k, p in pred.items()},
    })
  return {"forgetting": phi, "forgetting_timescales": phi * cfg["peak_lr"] * steps,
          "smooth_window": window, "configs": rows}


def placements(cfg: dict, lrs: jax.Array, wd: float, phi: float, n: int) -> dict[str, int]:
  steps = cfg["steps"]
  every = {"start": 0, "predicted_ema": trec.best_window(lrs, wd, n),
           "predicted_calibrated": trec.best_window(lrs, wd, n, forgetting=phi),
           "end": steps - n}
  return {arm: every[arm] for arm in cfg["arms"]}


def summarize_curriculum(cfg: dict, windows: dict, results: list[dict]) -> list[dict]:
  """Mean ± std of HQ loss per (slice, arm) and the paired gain over the end placement."""
  rows = []
  for frac, arms in windows.items():
    hq = {arm: np.array([r[frac][arm]["hq"] for r in results]) for arm in arms}
    general = {arm: np.array([r[frac][arm]["general"] for r in results]) for arm in arms}
    for arm, start in arms.items():
      gain = hq["end"] - hq[arm] if "end" in hq else np.full_like(hq[arm], np.nan)
      rows.append({"slice_frac": frac, "arm": arm, "start": start,
                   "start_frac": start / cfg["steps"],
                   "hq_loss": {"mean": float(hq[arm].mean()), "std": sample_std(hq[arm]),
                               "per_seed": hq[arm].tolist()},
                   "general_loss": {"mean": float(general[arm].mean()),
                                    "std": sample_std(general[arm])},
                   "gain_vs_end": {"mean": float(gain.mean()), "std": sample_std(gain),
                                   "min": float(gain.min()), "max": float(gain.max())}})
  return rows


def _gain(curriculum: list[dict], row: dict) -> np.ndarray:
  """Per-seed gain of ``row``'s placement over the end placement (end loss minus its loss)."""
  end = next(r for r in curriculum if r["slice_frac"] == row["slice_frac"] and r["arm"] == "end")
  return np.asarray(end["hq_loss"]["per_seed"]) - np.asarray(row["hq_loss"]["per_seed"])


def format_tables(analysis: dict, curriculum: list[dict]) -> str:
  lines = ["| schedule | tau/T | lambda | r ema (raw / smoothed) | rho ema | "
           "r calibrated (raw / smoothed) | argmin measured | argmin ema | argmin calibrated |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in analysis["configs"]:
    e, c, a = r["corr"]["ema"], r["corr"]["calibrated"], r["argmin_frac"]
    mark = " (fit here)" if r["calibration_config"] else ""
    lines.append(f"| {r['schedule']} | {r['tau_frac']:g} | {r['weight_decay']:.3g} | "
                 f"{e['pearson']:.2f} / {e['pearson_smoothed']:.2f} | {e['spearman']:.2f} | "
                 f"{c['pearson']:.2f} / {c['pearson_smoothed']:.2f}{mark} | "
                 f"{a['measured']:.2f} | {a['ema']:.2f} | {a['calibrated']:.2f} |")
  lines += ["", f"Calibrated forgetting phi = {analysis['forgetting']:.3g} "
            f"({analysis['forgetting_timescales']:g} timescales per run); smoothing window "
            f"{analysis['smooth_window']} steps.", "",
            "| slice | placement | start (frac) | HQ loss | gain vs end | general loss |",
            "|---|---|---|---|---|---|"]
  for r in curriculum:
    h = r["hq_loss"]
    lines.append(f"| {r['slice_frac']:g} | {r['arm']} | {r['start']} ({r['start_frac']:.2f}) | "
                 f"{pm(h['per_seed'])} | {pm(_gain(curriculum, r), sign=True)} | "
                 f"{r['general_loss']['mean']:.3f} |")
  return "\n".join(lines)


STRONG_DECAY = 0.1  # tau / T at or below which weight decay dominates forgetting (docs)
MIN_CORRELATION = 0.5  # smoothed Pearson r the EMA prediction must reach to count as the shape


def claims(result: dict) -> list[Claim]:
  """The paper's two claims as report rows, from a ``results.json`` dict of any scale.

  1. The TREC's shape is predicted in advance by AdamW's EMA coefficients: one row for
     strong weight decay (``tau <= 0.1 T``) and one for weaker decay. Criterion: the
     smoothed Pearson r between the measured (seed-mean) TREC and the EMA prediction is
     above 0.5 for every schedule in the group (None if the scale has no such ``tau``).
  2. High-quality data placed at the predicted TREC minimum beats placing it at the end:
     one row per slice length. Criterion: the held-out high-quality loss is lower at the
     EMA-predicted window than at the end in every seed (paired; ``gain_vs_end`` > 0 for
     its worst seed).
  """
  configs = result["trec"]["configs"]
  n_trec = result["config"]["trec_seeds"]
  rows = []
  for strong in (True, False):
    group = [r for r in configs if (r["tau_frac"] <= STRONG_DECAY) == strong]
    taus = sorted({r["tau_frac"] for r in group})
    what = (f"strong weight decay (tau <= {STRONG_DECAY:g} T)" if strong
            else f"weaker weight decay (tau > {STRONG_DECAY:g} T)")
    claim = (f"With {what}, the TREC's shape is predicted in advance by AdamW's EMA "
             "coefficients (constant, cosine and WSD schedules)")
    if not group:
      rows.append(Claim(claim, "no such tau at this scale", None))
      continue
    r_ema = [r["corr"]["ema"]["pearson_smoothed"] for r in group]
    r_cal = [r["corr"]["calibrated"]["pearson_smoothed"] for r in group]
    cells = ", ".join(f"{r['schedule']} {r['tau_frac']:g}T {v:.2f}"
                      for r, v in zip(group, r_ema, strict=True))
    measured = (f"smoothed r, measured vs EMA: {cells} (range {min(r_ema):.2f} to "
                f"{max(r_ema):.2f}; calibrated forgetting, our extension: {min(r_cal):.2f} to "
                f"{max(r_cal):.2f}); tau/T in {taus}; TREC mean over {n_trec} seed(s)")
    rows.append(Claim(claim, measured, all(v > MIN_CORRELATION for v in r_ema)))
  seeds = result["config"]["seeds"]
  for frac in dict.fromkeys(r["slice_frac"] for r in result["curriculum"]):
    arms = {r["arm"]: r for r in result["curriculum"] if r["slice_frac"] == frac}
    claim = (f"A high-quality slice of {frac:.0%} of training placed at the predicted TREC "
             "minimum gives a lower loss on that domain than the same slice at the end")
    if not {"predicted_ema", "end"} <= arms.keys():
      rows.append(Claim(claim, "no EMA-minimum or end placement at this scale", None))
      continue
    ema, end = arms["predicted_ema"], arms["end"]
    g, h, e = ema["gain_vs_end"], ema["hq_loss"], end["hq_loss"]
    measured = (f"HQ loss {pm(h['per_seed'])} at the EMA minimum "
                f"({ema['start_frac']:.2f} T) vs {pm(e['per_seed'])} at the end; "
                f"paired gain {pm(_gain(result['curriculum'], ema), sign=True)} (worst seed "
                f"{g['min']:+.3f})")
    if "predicted_calibrated" in arms:
      c = _gain(result["curriculum"], arms["predicted_calibrated"])
      measured += f"; calibrated window (our extension) {pm(c, sign=True)}"
    rows.append(Claim(claim, f"{measured} ({seeds} seeds)", bool(g["min"] > 0)))
  return rows


def plot_trec(cfg: dict, analysis: dict, out: str) -> str:
  rows = analysis["configs"]
  taus = sorted({r["tau_frac"] for r in rows})
  fig, axes = plt.subplots(len(SCHEDULES), len(taus), figsize=(4.2 * len(taus), 8.4),
                           squeeze=False, sharex=True)
  z = lambda x: (np.asarray(x) - np.mean(x)) / (np.std(x) + 1e-12)
  win = analysis["smooth_window"]
  for r in rows:
    ax = axes[SCHEDULES.index(r["schedule"])][taus.index(r["tau_frac"])]
    t = np.arange(len(r["measured"])) / cfg["steps"]
    ax.plot(t, z(r["measured"]), color="tab:blue", alpha=0.2, lw=0.6)
    ax.plot(t, z(trec.moving_average(r["measured"], win)), color="tab:blue", label="measured")
    ax.plot(t, z(r["predicted"]["ema"]), "k", label="AdamW EMA")
    ax.plot(t, z(r["predicted"]["calibrated"]), "r--", label="calibrated")
    ax.axvline(r["argmin_frac"]["measured"], color="tab:blue", ls=":")
    e, c = r["corr"]["ema"]["pearson_smoothed"], r["corr"]["calibrated"]["pearson_smoothed"]
    ax.set_title(f"{r['schedule']}, tau={r['tau_frac']:g}T: r={e:.2f} / {c:.2f}", fontsize=9)
  axes[0][0].legend(fontsize=7)
  for ax in axes[-1]:
    ax.set_xlabel("step / T")
  for ax in axes[:, 0]:
    ax.set_ylabel("TREC (standardized)")
  fig.tight_layout()
  path = os.path.join(out, "trec_curves.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


ARM_STYLE = {"start": ("tab:green", "start"), "predicted_ema": ("k", "EMA min"),
             "predicted_calibrated": ("r", "calibrated min"), "end": ("tab:blue", "end")}


def plot_curriculum(cfg: dict, lrs: jax.Array, wd: float, phi: float, curriculum: list[dict],
                    example_trecs: dict, out: str) -> str:
  fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 3.9))
  t = np.arange(cfg["steps"]) / cfg["steps"]
  for name, w, style in (("AdamW EMA c_t", trec.batch_weights(lrs, wd), "k"),
                         ("calibrated", trec.batch_weights(lrs, wd, forgetting=phi), "r--")):
    w = np.asarray(w)
    ax0.plot(t, w / w.max(), style, label=name)
  ax0.plot(t, np.asarray(lrs) / float(np.max(lrs)), color="0.6", lw=0.8, label="lr / peak")
  widest = max(cfg["slice_fracs"])
  for r in curriculum:
    if r["slice_frac"] == widest:
      ax0.axvspan(r["start_frac"], r["start_frac"] + r["slice_frac"], alpha=0.15,
                  color=ARM_STYLE[r["arm"]][0])
  ax0.set(xlabel="step / T", ylabel="normalized",
          title=f"WSD: batch weights; {widest:g} T HQ windows")
  ax0.legend(fontsize=7)
  fracs = sorted({r["slice_frac"] for r in curriculum})
  arms = list(cfg["arms"])
  for r in curriculum:
    x = fracs.index(r["slice_frac"]) * (len(arms) + 1) + arms.index(r["arm"])
    color = ARM_STYLE[r["arm"]][0]
    ax1.errorbar(x, r["hq_loss"]["mean"], r["hq_loss"]["std"], fmt="o", color=color, capsize=3)
    ax1.plot([x] * len(r["hq_loss"]["per_seed"]), r["hq_loss"]["per_seed"], ".", color=color,
             alpha=0.4)
  ticks = [fracs.index(f) * (len(arms) + 1) + i for f in fracs for i in range(len(arms))]
  ax1.set_xticks(ticks, [f"{ARM_STYLE[a][1]}\nslice {f:g}" for f in fracs for a in arms],
                 fontsize=6)
  ax1.set(ylabel="held-out HQ loss", title="HQ slice placement (mean ± std over seeds)")
  win = max(int(round(cfg["smooth_frac"] * cfg["steps"])), 1)
  for arm, curve in example_trecs[widest].items():
    color, label = ARM_STYLE[arm]
    ax2.plot(t, trec.moving_average(curve, win), color=color, label=label, lw=1)
  ax2.set(xlabel="step / T", ylabel="TREC (smoothed)",
          title=f"TREC of the curriculum runs (seed 0, slice {widest:g})")
  ax2.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(out, "curriculum.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def by_placement(values, windows: dict[float, dict[str, int]]) -> dict:
  """Per-run values, in the order of ``windows``, as ``{slice_frac: {arm: value}}``."""
  it = iter(values)
  return {frac: {arm: next(it) for arm in arms} for frac, arms in windows.items()}


def trec_phase(cfg: dict, items: tuple, confs: list[tuple[str, float]], bar: tqdm) -> dict:
  """Trains every (schedule, tau) per TREC seed and analyzes the seed-mean curves."""
  lrs = jnp.stack([schedule(k, cfg) for k, _ in confs])
  wds = jnp.array([weight_decay(tau, cfg) for _, tau in confs])
  no_slice = jnp.zeros(len(confs), jnp.int32)
  curves, losses = [], []
  for seed in range(cfg["trec_seeds"]):
    out = runs(jax.random.key(seed), *shard_seeds((lrs, wds, no_slice, no_slice)), items)
    curves.append(np.asarray(out["trec"]))
    losses.append(np.asarray(out["train_loss"]))
    bar.update()
  return analyze_trec(cfg, confs, np.stack(curves), np.stack(losses))


def curriculum_phase(cfg: dict, items: tuple, phi: float, bar: tqdm) -> tuple[dict, list, dict]:
  """HQ-slice placements per curriculum seed: ``(windows, per-seed results, seed-0 TRECs)``."""
  lrs, wd = schedule("wsd", cfg), weight_decay(cfg["curriculum_tau_frac"], cfg)
  windows = {frac: placements(cfg, lrs, wd, phi, _slice_steps(cfg, frac))
             for frac in cfg["slice_fracs"]}
  starts = jnp.array([s for arms in windows.values() for s in arms.values()])
  lengths = jnp.array([_slice_steps(cfg, f) for f, arms in windows.items() for _ in arms])
  arm_lrs = jnp.broadcast_to(lrs, (len(starts), cfg["steps"]))
  arm_wds = jnp.full((len(starts),), wd, jnp.float32)  # not weakly typed: same program
  lanes = shard_seeds((arm_lrs, arm_wds, starts, lengths))
  results, example_trecs = [], None
  for seed in range(cfg["seeds"]):
    out = jax.device_get(runs(jax.random.key(1000 + seed), *lanes, items))
    if seed == 0:  # TRECs of the first seed's curriculum runs, for the figure
      example_trecs = by_placement(out["trec"], windows)
    results.append(by_placement([{"hq": float(h), "general": float(g)}
                                 for h, g in zip(out["hq"], out["general"], strict=True)],
                                windows))
    bar.update()
  return windows, results, example_trecs


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS`` and of ``COMMON`` (shared by the scales)."""
  return ExperimentCLI(__doc__, {scale: {**COMMON, **c} for scale, c in CONFIGS.items()},
                       out="results/trec", quick_help="small scale, ~4 min on 2 cores",
                       helps={"seeds": "curriculum seeds"})


def main(argv=None) -> dict:
  examples = {}  # seed 0's TRECs of the curriculum arms: drawn, not recorded

  def run(cfg, args):
    items = tuple(sorted(cfg.items()))  # hashable: a static argument of the jitted runs
    start = time.time()
    confs = [(k, tau) for k in SCHEDULES for tau in cfg["tau_fracs"]]
    bar = tqdm(total=cfg["trec_seeds"] + cfg["seeds"], desc="trec", unit="seed")
    analysis = trec_phase(cfg, items, confs, bar)
    trec_time = time.time() - start
    bar.set_description("curriculum")
    windows, results, examples["trecs"] = curriculum_phase(cfg, items, analysis["forgetting"],
                                                           bar)
    bar.close()
    return {"trec": analysis, "curriculum": summarize_curriculum(cfg, windows, results),
            "curriculum_weight_decay": weight_decay(cfg["curriculum_tau_frac"], cfg),
            "trec_time_s": trec_time}

  def figures(result, out):
    cfg = result["config"]
    return [plot_trec(cfg, result["trec"], out),
            plot_curriculum(cfg, schedule("wsd", cfg), result["curriculum_weight_decay"],
                            result["trec"]["forgetting"], result["curriculum"],
                            examples["trecs"], out)]

  def note(result):
    cfg = result["config"]
    return (f"Tiny transformer ({cfg['layers']} layers, d={cfg['d_model']}, vocab "
            f"{cfg['vocab']}), {cfg['steps']} AdamW steps of {cfg['batch']} x {cfg['seq_len']} "
            f"tokens, peak lr {cfg['peak_lr']:g}. TREC: mean over {cfg['trec_seeds']} seed(s); "
            "r = Pearson, rho = Spearman vs the predicted curve; argmins as fractions of "
            f"training. Curriculum: WSD, tau = {cfg['curriculum_tau_frac']:g} T, "
            f"{cfg['seeds']} seeds; gain = HQ loss at the end minus at this placement (paired "
            "by seed, positive = better than the end).")

  # the parsed configuration already holds COMMON (cli() merges it into every scale)
  return run_experiment(argv, cli(), "trec", run, figures,
                        lambda r: format_tables(r["trec"], r["curriculum"]), note)


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/trec.md


_PLACEMENT = {"start": "start", "predicted_ema": "EMA minimum",
              "predicted_calibrated": "calibrated minimum", "end": "end"}


def _curriculum(result: dict) -> dict[tuple[float, str], dict]:
  """``(slice, arm) -> row`` with per-seed ``hq`` and ``gain`` (end minus this arm)."""
  rows = {(r["slice_frac"], r["arm"]): dict(r) for r in result["curriculum"]}
  for (frac, _), r in rows.items():
    end = np.asarray(rows[(frac, "end")]["hq_loss"]["per_seed"])
    r["hq"] = np.asarray(r["hq_loss"]["per_seed"])
    r["gain"] = end - r["hq"]
  return rows


def _trec_corr(result: dict, which: str, keep: Callable[[dict], bool]) -> list[float]:
  return [c["corr"][which]["pearson_smoothed"] for c in result["trec"]["configs"] if keep(c)]


def _argmin_gap(result: dict, keep: Callable[[dict], bool]) -> float:
  return max(abs(c["argmin_frac"]["calibrated"] - c["argmin_frac"]["measured"])
             for c in result["trec"]["configs"] if keep(c))


def page() -> dict[str, str]:
  """``{region: text}`` for docs/methods/trec.md, from the committed quick and full records
  (``docs/results/trec/``)."""
  quick, full = P.load("trec", "quick"), P.load("trec", "full")
  rows = []
  for c in quick["trec"]["configs"]:
    e, k, a = c["corr"]["ema"], c["corr"]["calibrated"], c["argmin_frac"]
    rows.append([c["schedule"], f"{c['tau_frac']:g}",
                 f"{P.f(e['pearson'])} / {P.f(e['pearson_smoothed'])}",
                 f"{P.f(k['pearson'])} / {P.f(k['pearson_smoothed'])}"
                 + (" (fit)" if c["calibration_config"] else ""),
                 " / ".join(P.f(a[x]) for x in ("measured", "ema", "calibrated"))])
  cur = _curriculum(quick)
  crows = []
  for frac in quick["config"]["slice_fracs"]:
    arms = [r for (fr, _), r in cur.items() if fr == frac]
    best = max(r["gain"].mean() for r in arms)
    for r in arms:
      gain = "0" if r["arm"] == "end" else P.pm(r["gain"], P.signed, lambda v: P.f(v, 3))
      if r["arm"] != "end" and r["gain"].mean() == best and best > 0:
        gain = f"**{gain}**"
      crows.append([f"{100 * frac:g}%", f"{_PLACEMENT[r['arm']]} ({P.f(r['start_frac'])} T)",
                    P.pm(r["hq"], lambda v: P.f(v, 3)), gain, P.f(r["general_loss"]["mean"], 3)])
  strong = lambda c: c["tau_frac"] <= 0.1  # noqa: E731
  short = quick["config"]["slice_fracs"][0]
  n = len(cur[(short, "end")]["hq"])
  k = int(np.sum(cur[(short, "predicted_ema")]["gain"] > 0))
  others = lambda rows_, frac: [r for (fr, arm), r in rows_.items()  # noqa: E731
                                if fr == frac and arm != "end"]
  fcur = _curriculum(full)
  fshort, flong = full["config"]["slice_fracs"]
  fema, fcal = fcur[(fshort, "predicted_ema")], fcur[(fshort, "predicted_calibrated")]
  loses = int(np.sum(fema["gain"] < 0))
  nf = len(fema["gain"])
  return {
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "window": str(quick["trec"]["smooth_window"]),
      "table": P.table(["schedule", "tau/T", "r, AdamW EMA",
                        "r, calibrated (`phi` fit on constant tau=2T)",
                        "argmin measured / EMA / calibrated"], rows),
      "seeds": str(quick["config"]["seeds"]),
      "curriculum": P.table(["slice", "placement (start)", "HQ loss", "gain vs end",
                             "general loss"], crows),
      "ema_seeds": f"all {n}" if k == n else f"{k} of {n}",  # seeds whose EMA gain is > 0
      "full_wall": P.seconds(full["wall_time_s"]),
      "full_steps": P.thousands(full["config"]["steps"]),
      "full_trec_seeds": str(full["config"]["trec_seeds"]),
      "full_seeds": str(full["config"]["seeds"]),
      "full_strong_r": P.span(_trec_corr(full, "ema", strong)),
      "full_weak_r": P.span(_trec_corr(full, "ema", lambda c: not strong(c)), sep=" to "),
      "full_phi": P.g(full["trec"]["forgetting"], 2),
      "full_cal_r": P.span(_trec_corr(full, "calibrated", lambda c: True)),
      "full_cal_gap": P.g(_argmin_gap(full, lambda c: True), 1),
      "full_ema_start": P.f(fema["start_frac"]),
      "full_ema_loss": P.pm(-fema["gain"], lambda v: P.f(v, 3)),
      "full_ema_seeds": "every seed" if loses == nf else f"{loses} of {nf} seeds",
      "full_cal_start": P.f(fcal["start_frac"]),
      "full_cal_gain": P.pm(fcal["gain"], P.signed, lambda v: P.f(v, 3)),
      "full_long_end_wins": P.span([-r["gain"].mean() for r in others(fcur, flong)]),
      "full_long_general": f"{P.f(fcur[(flong, 'end')]['general_loss']['mean'])} vs "
                           + P.span([r["general_loss"]["mean"] for r in others(fcur, flong)]),
      "quick_gains": P.span([r["gain"].mean() for r in others(cur, short)], P.signed, sep=" to "),
      "quick_setup": (f"{P.thousands(quick['config']['steps'])} AdamW steps of "
                      f"{quick['config']['batch']} x {quick['config']['seq_len']} tokens, "
                      f"{quick['config']['layers']}-layer transformer, d = "
                      f"{quick['config']['d_model']}, vocab {quick['config']['vocab']}"),
  }


if __name__ == "__main__":
  main()
