"""Adam and Muon under floating-point quantization: the paper's claims at small scale.

    python -m experiments.quant_optim [--quick] [--out DIR] [--dataset digits|mnist|cifar10]

Parts (Tang, Li, Zou, arXiv:2510.21314, ICLR 2026):
  1. mantissa sweep M = 1..23 on a chained Rosenbrock over a 4x4 matrix, Adam
     and Muon, all of G, W, M, V quantized (E = 8 throughout, so only the
     mantissa matters, as in the theory);
  2. component ablation {G, W, M, V} x {nearest, stochastic} on a noisy
     least-squares regression (minibatch 64);
  3. beta2 sweep with only V quantized on a noiseless least-squares problem;
  4. the smallest M within 10% of the fp32 loss as the horizon T grows, with
     a fit of M against log2 T;
  5. an MLP classifier on real data (scikit-learn digits by default) vs M,
     plus the compact moment storages (bfloat16 / float8 / int8) against fp32.

Every grid of configurations (mantissas, components, seeds) is one vmapped,
jitted function: bit widths are traced values, so the sweep compiles once. The
seeds (always the grid's last axis) are placed with
``jaxlab.training.shard_seeds``, so on a host with several devices XLA
splits them over the devices (choose ``--seeds`` as a multiple of the device
count; otherwise they are replicated); on one device nothing changes.
Muon's learning rate is set so its first fp32 update has the same RMS on the
matrix parameters as Adam's (else weight-storage stagnation, which depends on
the update size, confounds the comparison).

Writes ``results.json``, PNG figures and ``summary.md`` under ``--out`` and
prints the summary table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from experiments.cli import ExperimentCLI
from experiments.pages import f, g, load, seconds, span, table
from experiments.records import run_experiment
from experiments.reporting import Claim
from jaxlab.data.optim_problems import (
  DATASETS,
  load_classification,
  make_least_squares,
  rosenbrock,
)
from jaxlab.optim import quantize_params, quantized_adam, quantized_muon
from jaxlab.optim.problems import mlp_net, train
from jaxlab.quant import FloatFormat
from jaxlab.training import shard_seeds

OFF = 23  # E8M23 is the identity on float32 normals: "not quantized"
COMPONENTS = ("G", "W", "M", "V")
EXP_BITS = 8


def make_optimizer(
    name: str, lr: Any, bits: dict[str, Any], *, rounding: str, seed: Any,
    b2: Any = 0.999, adam_lr: Any = None, moment_storage: str | None = None,
) -> optax.GradientTransformation:
  """Adam or Muon with (possibly traced) mantissa widths per component."""
  fmts = {k: FloatFormat(EXP_BITS, bits[c]) for k, c in
          (("grads", "G"), ("weights", "W"), ("mu", "M"), ("nu", "V"))}
  if moment_storage is not None:
    fmts["mu"] = fmts["nu"] = None
  if name == "adam":
    return quantized_adam(lr, b2=b2, rounding=rounding, seed=seed,
                          moment_storage=moment_storage, **fmts)
  if name == "muon":
    return quantized_muon(lr, adam_b2=b2, rounding=rounding, seed=seed,
                          adam_learning_rate=adam_lr, moment_storage=moment_storage, **fmts)
  raise ValueError(f"optimizer must be 'adam' or 'muon', got {name!r}")


def _matrix_update_rms(opt, params, grads) -> float:
  updates, _ = opt.update(grads, opt.init(params), params)
  mats = [u for u in jax.tree.leaves(updates) if u.ndim == 2]
  return float(jnp.sqrt(jnp.mean(jnp.concatenate([jnp.ravel(u) ** 2 for u in mats]))))


def muon_lr_matching_adam(adam_lr: float, params, grads) -> float:
  """Muon lr whose first update on matrix params has Adam's RMS (fp32)."""
  r_adam = _matrix_update_rms(quantized_adam(adam_lr), params, grads)
  r_muon = _matrix_update_rms(quantized_muon(adam_lr), params, grads)
  return adam_lr * r_adam / r_muon


def bits_of(m: Any, components: str = "GWMV") -> dict[str, Any]:
  return {c: (m if c in components else OFF) for c in COMPONENTS}


def sweep(fn: Callable, *axes: jax.Array) -> np.ndarray:
  """``fn`` evaluated on the outer product of ``axes`` (first axis outermost).

  One ``vmap`` over the flattened product (nested vmaps, one per axis, trace every
  operation once per level), reshaped to ``(len(axes[0]), ..., len(axes[-1]), ...)``.
  The last axis is the seeds; the flattened grid is placed over all devices
  (:func:`shard_seeds`), which splits it evenly when the seed count divides by them.
  """
  sizes = [len(a) for a in axes]
  idx = np.indices(sizes).reshape(len(axes), -1)  # row-major: the last axis fastest
  grid = [np.asarray(a)[i] for a, i in zip(axes, idx, strict=True)]  # host gathers, not eager
  out = jax.jit(jax.vmap(fn))(*shard_seeds(grid))
  return np.asarray(out).reshape(*sizes, *out.shape[1:])


# ---------------------------------------------------------------- part 1 / 4
def rosenbrock_run(name, lr, m, seed, *, steps, rounding="nearest", n=4):
  """Final Rosenbrock loss for one (mantissa, seed); cosine-decayed lr."""
  bits = bits_of(m)
  sched = optax.cosine_decay_schedule(lr, steps)
  opt = make_optimizer(name, sched, bits, rounding=rounding, seed=seed)
  key = jax.random.key(seed)
  x0 = quantize_params(0.5 * jax.random.normal(key, (n, n)), FloatFormat(EXP_BITS, bits["W"]))
  _, evals = train(opt, lambda p, k: rosenbrock(p), x0, key, steps)
  return evals[-1]


def rosenbrock_sweep(cfg, lrs, name, rounding, steps, done):
  """Final losses ``(23, seeds)`` of ``rosenbrock_run`` over M = 1..23 and the seeds.

  ``done`` maps ``(name, rounding, steps)`` to sweeps already run: the mantissa sweep's
  nearest-rounding runs are the horizon sweep's at ``T = rosen_steps`` (the same program on
  the same inputs), computed once.
  """
  if (name, rounding, steps) not in done:
    fn = lambda m, s: rosenbrock_run(name, lrs[name], m, s, steps=steps, rounding=rounding)
    done[name, rounding, steps] = sweep(fn, jnp.arange(1, 24), jnp.arange(cfg["seeds"]))
  return done[name, rounding, steps]


def part_mantissa(cfg, lrs, pbar, done):
  out = {}
  for name in ("adam", "muon"):
    for rounding in ("nearest", "stochastic"):
      loss = rosenbrock_sweep(cfg, lrs, name, rounding, cfg["rosen_steps"], done)
      out[f"{name}/{rounding}"] = loss.tolist()
      pbar.update(1)
  return {"mantissas": list(range(1, 24)), "final_loss": out, "steps": cfg["rosen_steps"]}


def smallest_m_within(loss: np.ndarray, ref: float, tol: float = 0.10) -> int | None:
  """Smallest M such that this M and every larger one is within tol of ref."""
  ok = loss <= (1 + tol) * ref
  for i in range(len(ok)):
    if ok[i:].all():
      return i + 1
  return None


def part_horizon(cfg, lrs, pbar, done):
  out = {}
  for name in ("adam", "muon"):
    rows = []
    for steps in cfg["horizons"]:
      loss = np.median(rosenbrock_sweep(cfg, lrs, name, "nearest", steps, done), axis=1)
      rows.append({"T": steps, "loss": loss.tolist(),
                   "m_star": smallest_m_within(loss, loss[-1])})
      pbar.update(1)
    t = np.array([r["T"] for r in rows], float)
    m_star = np.array([np.nan if r["m_star"] is None else r["m_star"] for r in rows])
    ok = np.isfinite(m_star)
    slope, intercept = np.polyfit(np.log2(t[ok]), m_star[ok], 1) if ok.sum() >= 2 else (np.nan,) * 2
    pred = slope * np.log2(t[ok]) + intercept
    ss_res = float(np.sum((m_star[ok] - pred) ** 2))
    ss_tot = float(np.sum((m_star[ok] - m_star[ok].mean()) ** 2))
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    out[name] = {"rows": rows, "slope_per_doubling": float(slope),
                 "intercept": float(intercept), "r2": r2}
  return out


# ---------------------------------------------------------------- part 2 / 3
def least_squares_run(name, lr, m, component, seed, *, problem, steps, rounding,
                      b2=0.999, batch=None):
  bits = {c: jnp.where(component == i, m, OFF) for i, c in enumerate(COMPONENTS)}
  opt = make_optimizer(name, lr, bits, rounding=rounding, seed=seed, b2=b2)
  n = problem.a.shape[0]
  if batch is None:
    loss_fn = lambda w, k: problem.loss(w)
  else:
    loss_fn = lambda w, k: problem.loss(w, jax.random.randint(k, (batch,), 0, n))
  w0 = jnp.zeros((problem.a.shape[1], problem.b.shape[1]))
  _, evals = train(opt, loss_fn, w0, jax.random.key(seed), steps,
                   eval_fn=problem.loss)
  return evals[-1]


def part_ablation(cfg, lrs, pbar):
  problem = make_least_squares(jax.random.key(42), num_rows=1024, dim_in=32, dim_out=16,
                               noise=0.5)
  ms = jnp.array(cfg["ablation_mantissas"])
  comps = jnp.arange(4)
  seeds = jnp.arange(cfg["seeds"])
  out = {}
  for name in ("adam", "muon"):
    for rounding in ("nearest", "stochastic"):
      fn = lambda m, c, s, name=name, rounding=rounding: least_squares_run(
          name, lrs[name + "_ls"], m, c, s, problem=problem, steps=cfg["ls_steps"],
          rounding=rounding, batch=64)
      # fp32 rides in the same compiled sweep as one more mantissa, M = OFF, where every
      # component is the identity (whichever component "quantizes")
      loss = sweep(fn, jnp.append(ms, OFF), comps, seeds)  # (M + 1, 4, seeds)
      out[f"{name}/{rounding}"] = loss[:-1].tolist()
      if rounding == "nearest":
        out[f"{name}/fp32"] = loss[-1, 0].tolist()
      pbar.update(1)
  return {"mantissas": ms.tolist(), "components": list(COMPONENTS), "final_loss": out,
          "steps": cfg["ls_steps"]}


def part_beta2(cfg, lrs, pbar):
  problem = make_least_squares(jax.random.key(7), num_rows=1024, dim_in=32, dim_out=16, noise=0.0)
  b2s = jnp.array([0.9, 0.99, 0.999, 0.9999])
  ms = jnp.array([3, 5, 7, 10, 13, 16, 23])
  seeds = jnp.arange(cfg["seeds"])
  out = {}
  for rounding in ("nearest", "stochastic"):
    fn = lambda b2, m, s, rounding=rounding: least_squares_run(
        "adam", lrs["adam_ls"], m, jnp.int32(3), s, problem=problem, steps=cfg["ls_steps"],
        rounding=rounding, b2=b2)
    out[rounding] = sweep(fn, b2s, ms, seeds).tolist()  # (b2, M, seeds)
    pbar.update(1)
  return {"beta2": b2s.tolist(), "mantissas": ms.tolist(), "final_loss": out,
          "steps": cfg["ls_steps"]}


# ---------------------------------------------------------------- part 5
def part_mlp(cfg, pbar):
  data = load_classification(cfg["dataset"], max_examples=cfg.get("max_examples"))
  x_tr, y_tr = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
  x_te, y_te = jnp.asarray(data.x_test), jnp.asarray(data.y_test)
  # a 4-layer MLP, as the paper (hidden 128 x 3); the smoke scale uses one small layer
  sizes = (x_tr.shape[1], *cfg["mlp_hidden"], data.num_classes)
  net = mlp_net(sizes, 0)
  params0 = net.params
  adam_lr = cfg["mlp_lr"]
  g0 = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
      net(x_tr[:256], params=p), y_tr[:256]).mean())(params0)
  lrs = {"adam": adam_lr, "muon": muon_lr_matching_adam(adam_lr, params0, g0)}

  def xent(p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(net(x, params=p), y).mean()

  def run(name, m, seed, rounding, storage=None):
    bits = bits_of(m) if storage is None else bits_of(OFF)
    opt = make_optimizer(name, lrs[name], bits, rounding=rounding, seed=seed,
                         adam_lr=adam_lr, moment_storage=storage)
    params = _reinit(params0, seed, bits["W"])
    batch_loss = lambda p, k: xent(p, *_batch(k, x_tr, y_tr, 128))
    p, evals = train(opt, batch_loss, params, jax.random.key(seed), cfg["mlp_steps"],
                     eval_fn=lambda p: xent(p, x_tr, y_tr))
    acc = jnp.mean(jnp.argmax(net(x_te, params=p), -1) == y_te)
    return jnp.stack([evals[-1], acc])

  ms = jnp.array(cfg["mlp_mantissas"])
  seeds = jnp.arange(cfg["seeds"])
  out = {}
  for name in ("adam", "muon"):
    for rounding in ("nearest", "stochastic"):
      fn = lambda m, s, name=name, rounding=rounding: run(name, m, s, rounding)
      out[f"{name}/{rounding}"] = sweep(fn, ms, seeds).tolist()  # (M, seeds, 2)
      pbar.update(1)
  storage = {}  # keyed "None" (fp32 moments, the reference), then each compact storage
  for st in (None, *cfg["mlp_storages"]):
    fn = lambda s, st=st: run("adam", OFF, s, "nearest", storage=st)
    storage[str(st)] = sweep(fn, seeds).tolist()  # (seeds, 2)
  pbar.update(1)
  return {"dataset": cfg["dataset"], "sizes": list(sizes), "lr": lrs, "mantissas": ms.tolist(),
          "steps": cfg["mlp_steps"], "loss_acc": out, "storage_adam": storage}


def _batch(key, x, y, size):
  idx = jax.random.randint(key, (size,), 0, x.shape[0])
  return x[idx], y[idx]


def _reinit(params, seed, w_bits):
  """Fresh scaled-normal weights per seed (vmappable), quantized to W's format."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  new = [jnp.zeros_like(p) if p.ndim == 1 else
         jax.random.normal(k, p.shape) / jnp.sqrt(p.shape[0]) for p, k in zip(leaves, keys,
                                                                              strict=True)]
  return quantize_params(jax.tree.unflatten(treedef, new), FloatFormat(EXP_BITS, w_bits))


# ---------------------------------------------------------------- summary
def summarize(res: dict) -> tuple[list[list[str]], dict]:
  rows, verdicts = [], {}
  # Part 1: smallest M within 10% of fp32 on Rosenbrock.
  p1 = res["mantissa_sweep"]
  for key, loss in p1["final_loss"].items():
    med = np.median(np.array(loss), axis=1)
    m_star = smallest_m_within(med, med[-1])
    rows.append([f"Rosenbrock {key}", f"M*={m_star}", f"loss M=1: {med[0]:.3g}, M=3: {med[2]:.3g}, "
                 f"M=7: {med[6]:.3g}, fp32: {med[-1]:.3g}"])
    verdicts[f"rosenbrock_mstar/{key}"] = m_star
  # Part 2: sensitivity ordering at the smallest mantissa, nearest rounding.
  p2 = res["ablation"]
  for name in ("adam", "muon"):
    arr = np.median(np.array(p2["final_loss"][f"{name}/nearest"]), axis=-1)  # (M, 4)
    fp32 = float(np.median(p2["final_loss"][f"{name}/fp32"]))
    # Muon quantizes V only in its Adam part (non-matrix parameters); every parameter of the
    # least-squares problem is a matrix, so Muon's V column measures nothing: left out
    comps = [c for c in COMPONENTS if not (name == "muon" and c == "V")]
    keep = [COMPONENTS.index(c) for c in comps]
    for i, m in enumerate(p2["mantissas"]):
      ratio = arr[i, keep] / fp32
      order = "".join(np.array(comps)[np.argsort(-ratio)])
      rows.append([f"Ablation {name} M={m} (nearest)", f"order {' > '.join(order)}",
                   ", ".join(f"{c}: {r:.2f}x" for c, r in zip(comps, ratio, strict=True))
                   + ("; V: n/a (no non-matrix parameter)" if name == "muon" else "")])
      verdicts[f"ablation_order/{name}/M{m}"] = order
    st = np.median(np.array(p2["final_loss"][f"{name}/stochastic"]), axis=-1)
    rows.append([f"Ablation {name} M={p2['mantissas'][0]} (stochastic)", "",
                 ", ".join(f"{c}: {r:.2f}x" for c, r in zip(comps, st[0, keep] / fp32,
                                                              strict=True))
                 + ("; V: n/a (no non-matrix parameter)" if name == "muon" else "")])
  # Part 3: beta2 effect with only V quantized.
  p3 = res["beta2"]
  near = np.median(np.array(p3["final_loss"]["nearest"]), axis=-1)  # (b2, M)
  sto = np.median(np.array(p3["final_loss"]["stochastic"]), axis=-1)
  i7 = p3["mantissas"].index(7)
  for j, b2 in enumerate(p3["beta2"]):
    rows.append([f"V only, beta2={b2:g}", f"M=7 near {near[j, i7]:.2g}",
                 f"fp32 {near[j, -1]:.2g}, M=7 stochastic {sto[j, i7]:.2g}"])
  # Part 4: M* vs log T.
  for name, r in res["horizon"].items():
    ms_ = [row["m_star"] for row in r["rows"]]
    rows.append([f"M* vs T ({name})", f"slope {r['slope_per_doubling']:.2f}/doubling, "
                 f"R2 {r['r2']:.2f}", f"T={[row['T'] for row in r['rows']]} M*={ms_}"])
    verdicts[f"horizon_slope/{name}"] = r["slope_per_doubling"]
  # Part 5: MLP.
  p5 = res["mlp"]
  for key, arr in p5["loss_acc"].items():
    a = np.array(arr)  # (M, seeds, 2)
    acc = a[..., 1].mean(-1)
    loss = np.median(a[..., 0], -1)
    m_star = smallest_m_within(loss, loss[-1])
    rows.append([f"MLP {p5['dataset']} {key}", f"M*={m_star}",
                 "acc " + ", ".join(f"M{m}:{x:.3f}" for m, x in zip(p5["mantissas"], acc,
                                                                   strict=True))])
    verdicts[f"mlp_mstar/{key}"] = m_star
  base = np.array(p5["storage_adam"]["None"])
  for st, arr in p5["storage_adam"].items():
    a = np.array(arr)
    ratio = float(np.mean(a[:, 0]) / np.mean(base[:, 0]))
    rows.append([f"MLP Adam storage={st}", f"loss {ratio:.3f}x fp32",
                 f"acc {a[:, 1].mean():.3f} +- {a[:, 1].std():.3f}"])
    verdicts[f"storage_loss_ratio/{st}"] = ratio
  return rows, verdicts


def _g(x: float) -> str:
  return f"{x:#.3g}".rstrip(".")


def _spread(x) -> str:
  """``median (min-max)`` of per-seed values, 3 significant digits."""
  x = np.asarray(x, float)
  return f"{_g(np.median(x))} ({_g(x.min())}-{_g(x.max())})"


def claims(result: dict) -> list[Claim]:
  """The paper's claims, our numbers and whether they held, from a ``results.json`` dict.

  "fp32" is M = 23 (the identity on float32); "M*" is the smallest M from which
  every larger M ends within 10% of the fp32 loss (median over seeds). Criteria:

  * log T: held if Adam's M* on Rosenbrock, over at least 3 horizons T, never
    saturates at 23 and fits a line in log2 T with slope > 0 and R^2 >= 0.5;
    None with fewer horizons or a saturated M*.
  * W and V: one component quantized at the smallest ablation M (Adam, nearest,
    noisy least squares): held if W and V have the two largest median loss
    ratios to fp32 (paired by seed) and both are >= 1.1.
  * beta2: V alone quantized at M = 7 (nearest, noiseless least squares): held
    if in every seed the loss ratio to fp32 at the largest beta2 is > 1.1 and
    above the ratio at the smallest beta2.
  * Muon: Rosenbrock with G, W, M, V all at M = 7 (nearest): held if Muon's final
    loss is below Adam's in every seed (the same start per seed).

  Works on any scale (``--smoke`` values are meaningless); a row whose inputs are
  missing gets ``held = None``.
  """
  rows = []
  seeds = result.get("config", {}).get("seeds", "?")

  # 1. M need only grow like log T.
  hz = result.get("horizon", {})
  if "adam" in hz:
    ts = [r["T"] for r in hz["adam"]["rows"]]
    stars = {k: [r["m_star"] for r in v["rows"]] for k, v in hz.items()}
    slope, r2 = hz["adam"]["slope_per_doubling"], hz["adam"]["r2"]
    finite = [m for m in stars["adam"] if m is not None]
    ok = len(finite) >= 3 and len(finite) == len(ts) and max(finite) < OFF
    fit_ok = slope is not None and r2 is not None and math.isfinite(slope) and math.isfinite(r2)
    held = bool(slope > 0 and r2 >= 0.5) if ok and fit_ok else None
    fit = (f"{slope:.2f} bits per doubling of T, R^2 {r2:.2f}" if fit_ok else "no fit")
    muon = (f"; Muon M* = {stars['muon']} (saturated at {OFF}: not measurable)"
            if "muon" in stars and OFF in stars["muon"] else
            f"; Muon M* = {stars['muon']}" if "muon" in stars else "")
    rows.append(Claim(
        "Adam and Muon stay close to full precision if the mantissa M grows only like log T "
        "(tested on Adam)",
        f"Adam, Rosenbrock: M* = {stars['adam']} at T = {ts} (median over {seeds} seeds): "
        f"{fit}{muon}", held))

  # 2. Adam is most sensitive to W and V (reported order V > W > M > G).
  ab = result.get("ablation", {})
  if "adam/nearest" in ab.get("final_loss", {}):
    loss = np.asarray(ab["final_loss"]["adam/nearest"], float)[0]  # (4, seeds), smallest M
    fp32 = np.asarray(ab["final_loss"]["adam/fp32"], float)  # (seeds,)
    with np.errstate(divide="ignore", invalid="ignore"):
      ratio = loss / fp32  # paired by seed
    med = np.median(ratio, -1)
    order = "".join(np.array(COMPONENTS)[np.argsort(-med)])
    held = bool(set(order[:2]) == {"W", "V"} and med[1] >= 1.1 and med[3] >= 1.1)
    rows.append(Claim(
        "Adam is most sensitive to quantizing the weights W and the second moment V "
        "(reported order V > W > M > G)",
        f"one component at M = {ab['mantissas'][0]}, nearest, final loss / fp32, median "
        f"(range) over {seeds} seeds: "
        + ", ".join(f"{c} {_spread(r)}" for c, r in zip(COMPONENTS, ratio, strict=True))
        + f"; order {' > '.join(order)}", held))

  # 3. beta2 -> 1 makes V quantization hurt.
  b2 = result.get("beta2", {})
  if "nearest" in b2.get("final_loss", {}) and 7 in b2.get("mantissas", []):
    near = np.asarray(b2["final_loss"]["nearest"], float)  # (beta2, M, seeds)
    i7 = b2["mantissas"].index(7)
    with np.errstate(divide="ignore", invalid="ignore"):
      ratio = near[:, i7] / near[:, -1]  # (beta2, seeds), M = 7 vs fp32 in the same seed
    held = bool(np.all((ratio[-1] > 1.1) & (ratio[-1] > ratio[0])))
    rows.append(Claim(
        "Adam's second moment V is sensitive to quantization because beta2 -> 1 makes its "
        "increments tiny: the damage grows as beta2 -> 1",
        "V alone at M = 7, nearest, final loss / fp32, median (range) over "
        f"{seeds} seeds: " + ", ".join(f"beta2 {b:g}: {_spread(r)}"
                                       for b, r in zip(b2["beta2"], ratio, strict=True)),
        held))

  # 4. Muon tolerates coarser quantization than Adam.
  ms = result.get("mantissa_sweep", {})
  fl = ms.get("final_loss", {})
  if {"adam/nearest", "muon/nearest"} <= set(fl) and 7 in ms.get("mantissas", []):
    i7 = ms["mantissas"].index(7)
    adam, muon = (np.asarray(fl[f"{k}/nearest"], float) for k in ("adam", "muon"))
    held = bool(np.all(muon[i7] < adam[i7]))
    rows.append(Claim(
        "Muon tolerates coarser quantization than Adam",
        f"Rosenbrock, G, W, M, V at M = 7, nearest, final loss, median (range) over {seeds} "
        f"seeds: Muon {_spread(muon[i7])} vs Adam {_spread(adam[i7])}; fp32: Muon "
        f"{_g(np.median(muon[-1]))}, Adam {_g(np.median(adam[-1]))}; Muon lower in "
        f"{int(np.sum(muon[i7] < adam[i7]))}/{adam.shape[1]} seeds", held))
  return rows


def format_table(rows: list[list[str]]) -> str:
  lines = ["| result | headline | detail |", "|---|---|---|"]
  lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
  return "\n".join(lines)


def plot(res: dict, out: str) -> list[str]:
  import matplotlib.pyplot as plt

  paths = []
  p1 = res["mantissa_sweep"]
  fig, ax = plt.subplots(figsize=(6, 4))
  for key, loss in p1["final_loss"].items():
    ax.semilogy(p1["mantissas"], np.median(np.array(loss), 1), marker="o", ms=3, label=key)
  ax.set(xlabel="mantissa bits M (G, W, M, V quantized)", ylabel="final Rosenbrock loss",
         title=f"Mantissa sweep, T={p1['steps']}")
  ax.legend()
  paths.append(_save(fig, out, "mantissa_sweep.png"))

  p2 = res["ablation"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
  for ax, name in zip(axes, ("adam", "muon"), strict=True):
    fp32 = float(np.median(p2["final_loss"][f"{name}/fp32"]))
    width = 0.8 / (2 * len(p2["mantissas"]))
    for r_i, rounding in enumerate(("nearest", "stochastic")):
      arr = np.median(np.array(p2["final_loss"][f"{name}/{rounding}"]), -1) / fp32
      for i, m in enumerate(p2["mantissas"]):
        off = (r_i * len(p2["mantissas"]) + i) * width
        ax.bar(np.arange(4) + off, arr[i], width, label=f"{rounding} M={m}")
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    # Muon's V quantizes nothing here (no non-matrix parameter): its bars are not shown
    labels = [c + ("\n(n/a)" if name == "muon" and c == "V" else "") for c in COMPONENTS]
    if name == "muon":
      for bar in ax.patches[COMPONENTS.index("V")::4]:
        bar.set_visible(False)
    ax.set_xticks(np.arange(4) + 0.4 - width / 2, labels)
    ax.set(title=f"{name}: one component quantized", ylabel="final loss / fp32")
  axes[1].legend(fontsize=7)
  paths.append(_save(fig, out, "component_ablation.png"))

  p3 = res["beta2"]
  fig, ax = plt.subplots(figsize=(6, 4))
  for rounding, ls in (("nearest", "-"), ("stochastic", "--")):
    arr = np.median(np.array(p3["final_loss"][rounding]), -1)
    for j, b2 in enumerate(p3["beta2"]):
      ax.semilogy(p3["mantissas"], np.maximum(arr[j], 1e-16), ls, marker="o", ms=3,
                  color=f"C{j}", label=f"b2={b2:g} {rounding}")
  ax.set(xlabel="mantissa bits of V", ylabel="final loss (noiseless LS)",
         title="Only V quantized")
  ax.legend(fontsize=7)
  paths.append(_save(fig, out, "beta2_sweep.png"))

  fig, ax = plt.subplots(figsize=(6, 4))
  for name, r in res["horizon"].items():
    t = np.array([row["T"] for row in r["rows"]], float)
    m = np.array([np.nan if row["m_star"] is None else row["m_star"] for row in r["rows"]])
    ax.plot(np.log2(t), m, "o", label=f"{name} (measured)")
    ax.plot(np.log2(t), r["slope_per_doubling"] * np.log2(t) + r["intercept"], "-",
            label=f"{name} fit: {r['slope_per_doubling']:.2f} per doubling")
  ax.set(xlabel="log2 T", ylabel="smallest M within 10% of fp32", title="Precision vs horizon")
  ax.legend()
  paths.append(_save(fig, out, "mantissa_vs_horizon.png"))

  p5 = res["mlp"]
  fig, ax = plt.subplots(figsize=(6, 4))
  for key, arr in p5["loss_acc"].items():
    ax.plot(p5["mantissas"], np.array(arr)[..., 1].mean(-1), marker="o", ms=3, label=key)
  ax.set(xlabel="mantissa bits M", ylabel="test accuracy",
         title=f"MLP on {p5['dataset']}, T={p5['steps']}")
  ax.legend()
  paths.append(_save(fig, out, "mlp_accuracy.png"))
  return paths


def _save(fig, out, name):
  path = os.path.join(out, name)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  import matplotlib.pyplot as plt

  plt.close(fig)
  return path


STORAGES = ("bfloat16", "float8_e4m3fn", "int8")  # moment_storage values against fp32 moments
CONFIGS = {
    # "smoke": the tests' setting (every code path, seconds of compute).
    # The smoke scale compiles one compact moment storage (each is its own program).
    "smoke": dict(seeds=1, rosen_steps=40, horizons=[20, 40], ablation_mantissas=[1, 7],
                  ls_steps=40, mlp_steps=20, mlp_mantissas=[2, 23], mlp_lr=1e-3,
                  mlp_storages=["int8"], mlp_hidden=[32]),
    "quick": dict(seeds=2, rosen_steps=500, horizons=[250, 1000],
                  ablation_mantissas=[1, 4], ls_steps=500, mlp_steps=200,
                  mlp_mantissas=[1, 2, 4, 7, 23], mlp_lr=1e-3, mlp_storages=list(STORAGES),
                  mlp_hidden=[128, 128, 128]),
    "full": dict(seeds=5, rosen_steps=4000, horizons=[250, 500, 1000, 2000, 4000, 8000, 16000],
                 ablation_mantissas=[1, 4, 7], ls_steps=2000, mlp_steps=2000,
                 mlp_mantissas=[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 23], mlp_lr=1e-3,
                 mlp_storages=list(STORAGES), mlp_hidden=[128, 128, 128]),
}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS`` plus the MLP's dataset."""
  data = dict(dataset="digits", max_examples=None)
  return ExperimentCLI(
      __doc__, {scale: dict(c, **data) for scale, c in CONFIGS.items()},
      out="results/quant_optim", quick_help="smoke scale (< 5 min on 2 cores)",
      types={"max_examples": int | None},
      choices={"dataset": DATASETS, "mlp_storages": STORAGES},
      helps={"dataset": "MLP data; mnist/cifar10 need TFDS data prepared locally",
             "max_examples": "cap per TFDS split", "seeds": "seeds per setting",
             "mlp_storages": "Adam moment storages compared with fp32 moments on the MLP",
             "mlp_hidden": "the MLP's hidden layer widths"})


def main(argv: list[str] | None = None) -> dict:
  def run(cfg, args):
    # Learning rates: Adam fixed, Muon matched in update RMS on each problem.
    x0 = 0.5 * jax.random.normal(jax.random.key(0), (4, 4))
    lrs = {"adam": 1e-2, "muon": muon_lr_matching_adam(1e-2, x0, jax.grad(rosenbrock)(x0))}
    ls = make_least_squares(jax.random.key(42), num_rows=1024, dim_in=32, dim_out=16, noise=0.5)
    w0 = jnp.zeros((32, 16))
    lrs["adam_ls"] = 1e-2
    lrs["muon_ls"] = muon_lr_matching_adam(1e-2, w0, jax.grad(ls.loss)(w0))

    res: dict[str, Any] = {"learning_rates": lrs}
    total = 4 + 2 * len(cfg["horizons"]) + 4 + 2 + 5
    with tqdm(total=total, desc="quant_optim", unit="sweep") as pbar:
      done = {}  # Rosenbrock sweeps by (optimizer, rounding, steps), shared by parts 1 and 4
      res["mantissa_sweep"] = part_mantissa(cfg, lrs, pbar, done)
      res["ablation"] = part_ablation(cfg, lrs, pbar)
      res["beta2"] = part_beta2(cfg, lrs, pbar)
      res["horizon"] = part_horizon(cfg, lrs, pbar, done)
      res["mlp"] = part_mlp(cfg, pbar)
    res["summary"] = summarize(res)[1]
    return res

  return run_experiment(argv, cli(), "quant_optim", run, plot,
                        lambda r: format_table(summarize(r)[0]), lambda r: "")


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/quant_optim.md


def _median_seeds(x) -> np.ndarray:
  return np.median(np.asarray(x, np.float64), axis=-1)


# issue 16's targets for the whole training step, as ratios to optax.adam (medians)
BENCH_TARGETS = (("quantized_adam (none)", "no quantization", 1.05),
                 ("G+M+V+W nearest", "G+M+V+W nearest", 1.5),
                 ("G+M+V+W stochastic", "G+M+V+W stochastic", 1.7),
                 ("storage int8", "int8 storage", 1.3),
                 ("storage float8_e4m3fn", "float8 storage", 1.5))


def page() -> dict[str, str]:
  """``{name: text}`` for the ``<!-- gen:quant_optim.<name> -->`` regions of
  ``docs/methods/quant_optim.md``, from the committed records."""
  r = load("quant_optim", "full")
  runs = [load("quant_optim", "bench")]
  ms = r["mantissa_sweep"]
  mant = ms["mantissas"]
  at = {m: mant.index(m) for m in (1, 3, 7)}
  loss = {k: _median_seeds(v) for k, v in ms["final_loss"].items()}
  summ = r["summary"]
  mstar = {k.split("/", 1)[1]: v for k, v in summ.items() if k.startswith("rosenbrock_mstar/")}
  mlp = r["mlp"]
  acc = {k: np.asarray(v, np.float64)[..., 1].mean(-1) for k, v in mlp["loss_acc"].items()}
  macc = {m: i for i, m in enumerate(mlp["mantissas"])}
  ab = r["ablation"]
  ratios = {}
  for name in ("adam", "muon"):
    fp32 = float(np.median(ab["final_loss"][f"{name}/fp32"]))
    ratios[name] = _median_seeds(ab["final_loss"][f"{name}/nearest"]) / fp32  # (M, GWMV)
    ratios[name + "/stochastic"] = _median_seeds(ab["final_loss"][f"{name}/stochastic"]) / fp32
  b2 = r["beta2"]
  near = _median_seeds(b2["final_loss"]["nearest"])
  i7 = b2["mantissas"].index(7)
  hz = r["horizon"]
  stars = {k: [row["m_star"] for row in v["rows"]] for k, v in hz.items()}
  ts = [row["T"] for row in hz["adam"]["rows"]]
  sat = next(i for i in range(len(ts)) if all(m >= 20 for m in stars["muon"][i:]))
  muon_fp32 = min(row["loss"][-1] for row in hz["muon"]["rows"][sat:])
  bench = runs[0]["rows"]
  storage = {k.split("/", 1)[1]: v for k, v in summ.items() if k.startswith("storage_loss_ratio/")}
  accs = {k: float(np.asarray(v)[:, 1].mean()) for k, v in mlp["storage_adam"].items()}
  acc_text = (f"test accuracy {f(accs['None'], 3)} for all"
              if len({f(a, 3) for a in accs.values()}) == 1 else
              "test accuracy " + ", ".join(f"{'fp32' if k == 'None' else k} {f(a, 3)}"
                                           for k, a in accs.items()))
  eight = ("bfloat16", "float8_e4m3fn", "int8")
  bytes_ = {st: bench[f"storage {st}"]["state_bytes_ratio"] for st in eight}
  storage_ok = (all(abs(storage[st] - 1) <= 0.05 for st in eight)
                and bytes_["int8"] <= 0.3 and bytes_["float8_e4m3fn"] <= 0.3)
  claim_rows = [
      ["Adam on Rosenbrock: diverges at M = 1, slow at M = 3, near fp32 at M = 7-10",
       f"all of G, W, M, V quantized, nearest: loss {g(loss['adam/nearest'][at[1]])} (M = 1, "
       f"no progress), {g(loss['adam/nearest'][at[3]])} (M = 3), "
       f"{g(loss['adam/nearest'][at[7]])} (M = 7) vs {g(loss['adam/nearest'][-1])} fp32; "
       f"M* = {mstar['adam/nearest']}. Stochastic rounding: "
       + " / ".join(g(loss["adam/stochastic"][at[m]]) for m in (1, 3, 7))
       + f", M* = {mstar['adam/stochastic']}",
       f"partly: the ordering holds, but nearest needs M = {mstar['adam/nearest']}, not 7-10"],
      ["Muon tolerates coarser quantization than Adam",
       f"at equal update RMS, Muon's loss at M = 7 is {g(loss['muon/nearest'][at[7]], 2)} vs "
       f"Adam's {g(loss['adam/nearest'][at[7]])} on the same Rosenbrock; digits MLP test "
       f"accuracy with nearest rounding: Muon {f(acc['muon/nearest'][macc[3]], 3)} at M = 3 "
       f"(fp32 {f(acc['muon/nearest'][-1], 3)}), Adam {f(acc['adam/nearest'][macc[3]], 3)} "
       f"at M = 3 and {f(acc['adam/nearest'][macc[4]], 3)} at M = 4 "
       f"(fp32 {f(acc['adam/nearest'][-1], 3)})",
       f"yes in absolute terms and in accuracy; relative to its own fp32 loss Muon's M* is "
       f"{mstar['muon/nearest']} (nearest) and {mstar['muon/stochastic']} (stochastic), "
       f"against Adam's {mstar['adam/nearest']} (its fp32 loss is far lower: "
       f"{g(loss['muon/nearest'][-1], 2)} on Rosenbrock)"],
      ["sensitivity V > W > M > G",
       "one component at a time, noisy least squares, nearest: W "
       + " / ".join((f"{x:.0f}" if x >= 10 else g(x)) + "x" for x in ratios["adam"][:, 1])
       + " fp32 loss at M = " + " / ".join(str(m) for m in ab["mantissas"])
       + "; G, M, V " + span(ratios["adam"][:, [0, 2, 3]].ravel())
       + "x at every M (Adam), G, M " + span(ratios["muon"][:, [0, 2]].ravel())
       + "x (Muon; its V is not measured here: every parameter of these problems is a "
       "matrix, and only Muon's Adam part for non-matrix parameters has a V)"
       + "; stochastic rounding cuts W at M = "
       f"{ab['mantissas'][0]} to {g(ratios['adam/stochastic'][0, 1], 2)}x",
       "W most sensitive: yes; V second: not reproduced"],
      ["beta2 -> 1 makes V quantization hurt",
       "only V quantized, noiseless least squares, final loss at M = 7 nearest vs fp32: "
       + ", ".join(f"{g(near[j, i7], 2)} vs {g(near[j, -1], 2)} "
                   + (f"(beta2 {b:g})" if j == 0 else f"({b:g})")
                   for j, b in enumerate(b2["beta2"]) if b != 0.99),
       "no: quantized V ended lower than fp32 here (a stalled, too-large v shrinks Adam's "
       "steps near the optimum)"],
      ["M need only grow like log T",
       f"Adam, Rosenbrock, cosine schedule, T = {ts[0]} ... {ts[-1] // 1000}k: M* = "
       + ", ".join(str(m) for m in stars["adam"])
       + f"; fit {g(hz['adam']['slope_per_doubling'], 2)} bits per doubling of T "
       f"(R^2 {f(hz['adam']['r2'])}). Muon: M* saturates at "
       f"{span(stars['muon'][sat:], lambda x: str(int(x)))} from T = {ts[sat]} (its fp32 "
       f"loss reaches "
       f"{g(muon_fp32, 1)})",
       "Adam: growth with log T, yes (noisy); Muon: not measurable with this criterion"],
      ["(ours) 8-bit moment storage matches fp32",
       f"digits MLP, Adam, {mlp['steps']} steps, final training loss vs fp32: "
       + ", ".join(f"{st} {f(storage[st], 3)}x" for st in eight)
       + f"; {acc_text}; state bytes "
       + " / ".join(g(bytes_[st]) + "x" for st in eight) + " of `optax.adam`",
       ("yes" if storage_ok else "no") + " (target: within 5%, at most 0.3x memory)"],
  ]
  names = [("quantized_adam (none)", "`quantized_adam`, no quantization"),
           ("G+M+V+W nearest", "G+M+V+W simulated, nearest"),
           ("G+M+V+W stochastic", "G+M+V+W simulated, stochastic"),
           ("storage bfloat16", '`moment_storage="bfloat16"`'),
           ("storage float8_e4m3fn", '`moment_storage="float8_e4m3fn"`'),
           ("storage int8", '`moment_storage="int8"`')]

  def rng(key, col):
    """The recorded run's median ratio over interleaved rounds and the rounds' min-max."""
    row = runs[0]["rows"][key]
    if col == "state_bytes_ratio":
      return g(row[col]) + "x"
    lo, hi = row[f"{col}_range"]
    return f"{f(row[col])}x ({f(lo)}-{f(hi)})"

  bench_rows = [[label, rng(k, "opt_step_ratio"), rng(k, "train_step_ratio"),
                 rng(k, "state_bytes_ratio")] for k, label in names]
  return {
      "seeds": str(r["config"]["seeds"]),
      "wall": seconds(r["wall_time_s"]),
      "claims": table(["paper's claim", "our measurement", "held?"], claim_rows),
      "bench_params": f"{g(runs[0]['num_params'] / 1e6)}M",
      "bench_rounds": str(len(runs[0]["rows"]["optax.adam"]["opt_step_s_rounds"])),
      "bench": table(["configuration", "optimizer step", "whole training step", "state bytes"],
                     bench_rows),
      "bench_step_ms": g(bench["optax.adam"]["opt_step_s"] * 1e3, 2),
      "bench_targets": "; ".join(
          f"{label} {f(bench[k]['train_step_ratio'])}x against {t:g}x: "
          + ("met" if bench[k]["train_step_ratio"] <= t else "missed")
          for k, label, t in BENCH_TARGETS),
  }


if __name__ == "__main__":
  main()
