"""FastFlow: bandit-chosen step skipping vs coarse Euler vs fixed caching on a digits flow.

    python -m experiments.fastflow [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. a rectified flow on scikit-learn's digits in ``[-1, 1]``: the shared velocity MLP
   ``64 + time embedding (16) -> hidden -> 64`` (``jaxlab.generative.nets``) trained with
   ``jaxlab.nn.flows.flow_matching_loss`` by
   ``jaxlab.training.fit`` (Adam, cosine decay);
2. the shared yardstick (``jaxlab.models.sample_quality``, trained from the same seed):
   Frechet distance (FD) of samples to its held-out real digits;
3. the reference: the 50-step Euler sample of ``eval_batches x batch`` fixed noises;
4. uniform coarse Euler with ``n`` steps (NFE ``n``) and fixed velocity caching (``2n``
   steps, the velocity reused every other step: NFE ``n``; the spec's baseline is
   ``2n = 50``) from the same noises;
5. FastFlow on the 50-step grid for every ``(c, gamma, lambda)`` of the sweep: fresh
   bandits learn online over ``warmup`` calls of ``batch`` fresh noises, then the
   ``eval_batches`` calls on the fixed noises are measured (the bandits keep learning;
   NFE is their mean). ``reward_lambda = decision_lambda / 5`` (the reference code's
   0.005 / 0.001). ``c = 2`` is the code's; with rewards on this flow's scale
   (velocity MSEs about 1e-3) its exploration bonus dominates, so a small ``c`` is
   swept too.

Metrics over NFE: the mean L2 distance to the 50-step sample from the same noise and
the FD. Baselines are interpolated (linearly in NFE) at FastFlow's NFE for the matched
comparisons (their NFE grids cover the compared points; fixed caching's grid goes past
the spec's 25 by running ``2n > 50`` steps). Note that on a uniform grid fixed caching
every other step is exactly
coarse Euler with half the steps (two steps of ``1/N`` with one velocity are one step
of ``2/N``); it is kept as its own sampler (the spec's baseline) and the tables show
the two agree.

Sized for one CPU core. A GPU run could raise ``--hidden``, ``--train-steps``,
``--warmup`` and ``--batch`` (the spec sets no sizes beyond the 3 x 256 MLP).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_digit_grid, save_figure, table_and_claims
from jaxlab.data.digits import load_digits
from jaxlab.generative import fastflow as ff
from jaxlab.generative.nets import velocity_field, velocity_mlp
from jaxlab.models.sample_quality import Yardstick, YardstickConfig
from jaxlab.nn import Net, flows
from jaxlab.training.fit import fit, minibatch_sampler

REF_STEPS = 50
EMB = 16  # time-embedding width (jaxlab.generative.nets)
SPEEDUP_NFE = 27.5   # "about 2x fewer evaluations": NFE at most 27.5 of 50 (>= 1.8x)
FD_TOL = 0.10        # "small deviation" in FD: within 10% of the 50-step sample's FD

CONFIGS = {
    "smoke": dict(seeds=1, hidden=(32,), train_steps=30, yardstick_steps=50, lr=1e-3,
                  batch=16, warmup=3, eval_batches=2, lambdas=(0.0, 0.1), gammas=(1.0,),
                  cs=(2.0,), euler_nfe=(10, 25, 50), caching_nfe=(10, 25)),
    "quick": dict(seeds=1, hidden=(256, 256, 256), train_steps=2000, yardstick_steps=1500,
                  lr=1e-3, batch=128, warmup=80, eval_batches=4,
                  lambdas=(0.0, 1e-3, 3e-3, 1e-2, 0.1), gammas=(0.005, 1.0), cs=(2.0, 0.01),
                  euler_nfe=(10, 15, 20, 25, 30, 40, 50), caching_nfe=(10, 15, 20, 25, 30)),
    "full": dict(seeds=3, hidden=(256, 256, 256), train_steps=4000, yardstick_steps=1500,
                 lr=1e-3, batch=128, warmup=300, eval_batches=4,
                 lambdas=(0.0, 1e-4, 1e-3, 3e-3, 1e-2, 0.1), gammas=(0.005, 1.0),
                 cs=(2.0, 0.01),
                 euler_nfe=(8, 10, 12, 15, 18, 20, 22, 25, 28, 30, 35, 40, 45, 50),
                 caching_nfe=(8, 10, 12, 15, 18, 20, 22, 25, 28, 30, 35)),
}


def make_net(cfg: dict, seed: int) -> Net:
  return velocity_mlp(64, tuple(cfg["hidden"]), emb_dim=EMB, seed=seed)


def velocity(net: Net, params):
  """The field ``v(obs, x, t)`` (``obs`` is ``(B, 0)``: an unconditional flow)."""
  return velocity_field(net, params, emb_dim=EMB)


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, shared by every seed."""
  net = make_net(cfg, 0)
  data = jnp.asarray(load_digits("signed").x)
  steps = cfg["train_steps"]
  b = cfg["batch"]
  no_obs = jnp.zeros((b, 0))

  @jax.jit
  def train(params, key):
    def loss(p, batch, k):
      return flows.flow_matching_loss(velocity(net, p), jnp.zeros((batch.shape[0], 0)),
                                      batch, k)
    opt = optax.adam(optax.cosine_decay_schedule(cfg["lr"], steps, 0.1))
    res = fit(loss, opt, params, key, num_steps=steps, sample=minibatch_sampler(data, b))
    return res.state.params, res.losses

  @functools.partial(jax.jit, static_argnums=2)
  def euler(params, noise, num_steps):
    field = velocity(net, params)
    return jax.vmap(lambda z: flows.euler_sample(field, no_obs, z, num_steps))(noise)

  @functools.partial(jax.jit, static_argnums=2)
  def caching(params, noise, num_steps):
    field = velocity(net, params)
    return jax.lax.map(lambda z: ff.caching_sample(field, no_obs, z, num_steps=num_steps),
                       noise)

  @functools.partial(jax.jit, static_argnums=5)
  def fastflow(params, key, eval_noise, gamma, lam, c):
    """Online: ``warmup`` calls on fresh noise, then the eval calls (scans, no vmap)."""
    field = velocity(net, params)

    def call(bandit, noise):
      x, info = ff.fastflow_sample(field, no_obs, noise, bandit, num_steps=REF_STEPS,
                                   gamma=gamma, decision_lambda=lam, reward_lambda=lam / 5,
                                   c=c)
      return info.bandit, (x, info.nfe, info.evaluated)

    warm = jax.random.normal(key, (cfg["warmup"], b, 64))
    bandit, (_, warm_nfe, _) = jax.lax.scan(call, ff.init_bandit(REF_STEPS), warm)
    bandit, (x, nfe, evaluated) = jax.lax.scan(call, bandit, eval_noise)
    return x, nfe, warm_nfe, jnp.mean(evaluated, axis=0), bandit.counts

  return {"net": net, "train": train, "euler": euler, "caching": caching,
          "fastflow": fastflow}


def _l2(x, ref) -> float:
  return float(np.mean(np.linalg.norm(np.asarray(x - ref).reshape(-1, 64), axis=-1)))


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  k_init, k_train, k_noise, k_ff = jax.random.split(jax.random.key(seed), 4)
  params0 = make_net(cfg, int(jax.random.randint(k_init, (), 0, 2**31 - 1))).params
  params, losses = prog["train"](params0, k_train)
  ys = Yardstick.create(seed, YardstickConfig(steps=cfg["yardstick_steps"]))
  noise = jax.random.normal(k_noise, (cfg["eval_batches"], cfg["batch"], 64))
  ref = prog["euler"](params, noise, REF_STEPS)
  flat = lambda x: np.asarray(x).reshape(-1, 64)  # noqa: E731
  fd = lambda x: ys.frechet_distance(flat(x))  # noqa: E731
  out = {"seed": seed, "final_loss": float(np.mean(np.asarray(losses)[-100:])),
         "yardstick_test_accuracy": ys.test_accuracy, "fd_ref": fd(ref),
         "fd_real_halves": ys.frechet_distance(ys.reference[::2], ys.reference[1::2]),
         "euler": [], "caching": [], "fastflow": []}
  grids = {}
  for n in cfg["euler_nfe"]:
    x = prog["euler"](params, noise, n)
    out["euler"].append({"nfe": n, "l2": _l2(x, ref), "fd": fd(x)})
    grids[("euler", n)] = x
  for n in cfg["caching_nfe"]:
    x, nfe = prog["caching"](params, noise, 2 * n)
    out["caching"].append({"nfe": float(np.mean(nfe)), "l2": _l2(x, ref), "fd": fd(x)})
    grids[("caching", n)] = x
  for c in cfg["cs"]:
    for gamma in cfg["gammas"]:
      for lam in cfg["lambdas"]:
        x, nfe, warm_nfe, evaluated, counts = prog["fastflow"](
            params, k_ff, noise, jnp.float32(gamma), jnp.float32(lam), float(c))
        out["fastflow"].append({
            "c": c, "gamma": gamma, "lambda": lam, "nfe": float(np.mean(nfe)),
            "l2": _l2(x, ref), "fd": fd(x),
            "warm_nfe_first_last": [float(warm_nfe[0]), float(warm_nfe[-1])],
            "evaluated_share": np.round(np.asarray(evaluated), 3).tolist()})
        grids[("fastflow", c, gamma, lam)] = x
  # the sample grid's rows: 50-step, and each method nearest NFE 25 (stored for seed 0)
  if seed == 0:
    best = _best_fastflow(out["fastflow"])
    out["grid"] = {
        "50-step Euler": flat(ref)[:8].round(3).tolist(),
        "coarse Euler NFE 25": flat(grids.get(("euler", 25), ref))[:8].round(3).tolist(),
        "caching NFE 25": flat(grids.get(("caching", 25), ref))[:8].round(3).tolist(),
        **({f"FastFlow NFE {best['nfe']:.1f}": flat(grids[
            ("fastflow", best["c"], best["gamma"], best["lambda"])])[:8].round(3).tolist()}
           if best else {})}
  return out


def _best_fastflow(points: list[dict]) -> dict | None:
  """The FastFlow point with NFE <= SPEEDUP_NFE and the smallest L2 (None if there is none)."""
  fast = [p for p in points if p["nfe"] <= SPEEDUP_NFE]
  return min(fast, key=lambda p: p["l2"]) if fast else None


def _interp(points: list[dict], nfe: float, key: str) -> float:
  xs = np.array([p["nfe"] for p in points])
  order = np.argsort(xs)
  return float(np.interp(nfe, xs[order], np.array([p[key] for p in points])[order]))


def _settings(result: dict) -> list[tuple]:
  return [(p["c"], p["gamma"], p["lambda"]) for p in result["runs"][0]["fastflow"]]


def _point(run: dict, setting: tuple) -> dict:
  return next(p for p in run["fastflow"] if (p["c"], p["gamma"], p["lambda"]) == setting)


def _chosen(result: dict) -> tuple | None:
  """The setting (c, gamma, lambda) whose mean NFE over seeds is <= SPEEDUP_NFE and whose mean
  L2 is smallest: FastFlow's "2x fewer evaluations" operating point."""
  best, best_l2 = None, np.inf
  for s in _settings(result):
    pts = [_point(r, s) for r in result["runs"]]
    nfe, l2 = np.mean([p["nfe"] for p in pts]), np.mean([p["l2"] for p in pts])
    if nfe <= SPEEDUP_NFE and l2 < best_l2:
      best, best_l2 = s, l2
  return best


def claims(result: dict) -> list[Claim]:
  """The paper's claims, from a ``results.json`` dict of any scale.

  The operating point: the swept FastFlow setting ``(c, gamma, lambda)`` whose mean NFE is
  at most ``SPEEDUP_NFE`` (27.5 of 50, >= 1.8x fewer) with the smallest mean L2 to the
  50-step sample. Per seed, baselines are interpolated at that seed's FastFlow NFE.

  1. About 2x fewer evaluations at a small deviation (FD): its FD is within ``FD_TOL``
     (10%) of the 50-step sample's FD on average over seeds.
  2. About 2x fewer evaluations at a small deviation (L2): its L2 to the 50-step sample is
     at most uniform coarse Euler's at the same NFE on average over seeds.
  3. Better than fixed caching at equal NFE: its L2 is below fixed caching's at the same
     NFE on average and in every seed.
  """
  runs = result["runs"]
  if not runs or not runs[0]["fastflow"]:
    return []
  s = _chosen(result)
  if s is None:
    nfes = [min(p["nfe"] for p in r["fastflow"]) for r in runs]
    return [Claim("FastFlow reaches about 2x fewer evaluations (NFE <= "
                  f"{SPEEDUP_NFE} of {REF_STEPS})", f"lowest NFE per seed {nfes}", False)]
  pts = [_point(r, s) for r in runs]
  nfe = np.array([p["nfe"] for p in pts])
  l2 = np.array([p["l2"] for p in pts])
  fd = np.array([p["fd"] for p in pts])
  fd_ref = np.array([r["fd_ref"] for r in runs])
  eul = np.array([_interp(r["euler"], p["nfe"], "l2") for r, p in zip(runs, pts, strict=True)])
  cache = np.array([_interp(r["caching"], p["nfe"], "l2")
                    for r, p in zip(runs, pts, strict=True)])
  name = f"FastFlow (c={s[0]}, gamma={s[1]}, lambda={s[2]}) at NFE {pm(nfe, '.1f')}"
  rel = fd / fd_ref - 1
  wins = int(np.sum(l2 < cache))
  return [
      Claim(f"About 2x fewer evaluations at a small deviation: FD within {FD_TOL:.0%} of the "
            f"{REF_STEPS}-step sample's at NFE <= {SPEEDUP_NFE}",
            f"{name}: FD {pm(fd, '.2f')} vs {REF_STEPS}-step {pm(fd_ref, '.2f')} "
            f"({pm(100 * rel, '.1f', sign=True)}%)", bool(rel.mean() <= FD_TOL)),
      Claim("... and an L2 distance to the 50-step sample no larger than uniform coarse Euler's "
            "at the same NFE",
            f"{name}: L2 {pm(l2)} vs coarse Euler {pm(eul)}", bool(l2.mean() <= eul.mean())),
      Claim("Better than fixed velocity caching at equal NFE (L2 to the 50-step sample)",
            f"{name}: L2 {pm(l2)} vs caching {pm(cache)}; lower in {wins}/{len(runs)} seeds",
            bool(l2.mean() < cache.mean() and wins == len(runs))),
  ]


TABLE_HEAD = ["sampler", "setting", "NFE", "L2 to 50-step", "FD"]


def table_rows(result: dict) -> list[list[str]]:
  runs = result["runs"]
  rows = [["Euler (reference)", f"{REF_STEPS} steps", str(REF_STEPS), "0",
           pm([r["fd_ref"] for r in runs], ".2f")]]
  for kind, label in (("euler", "coarse Euler"), ("caching", "fixed caching")):
    for i, p in enumerate(runs[0][kind]):
      pts = [r[kind][i] for r in runs]
      steps = int(round(p["nfe"])) * (2 if kind == "caching" else 1)
      rows.append([label, f"{steps} steps", pm([q["nfe"] for q in pts], ".1f"),
                   pm([q["l2"] for q in pts]), pm([q["fd"] for q in pts], ".2f")])
  for s in _settings(result):
    pts = [_point(r, s) for r in runs]
    rows.append(["FastFlow", f"c={s[0]}, gamma={s[1]}, lambda={s[2]}",
                 pm([q["nfe"] for q in pts], ".1f"), pm([q["l2"] for q in pts]),
                 pm([q["fd"] for q in pts], ".2f")])
  return rows


def plot(result: dict, out: str) -> list[str]:
  runs = result["runs"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for ax, key in zip(axes, ("l2", "fd"), strict=True):
    for kind, label, style in (("euler", "coarse Euler", "k-o"),
                               ("caching", "fixed caching", "C7--s")):
      xs = [p["nfe"] for p in runs[0][kind]]
      ys = np.mean([[p[key] for p in r[kind]] for r in runs], axis=0)
      ax.plot(xs, ys, style, label=label, ms=4)
    for j, (c, gamma) in enumerate(sorted({(s[0], s[1]) for s in _settings(result)})):
      sets = [s for s in _settings(result) if s[:2] == (c, gamma)]
      xs = [np.mean([_point(r, s)["nfe"] for r in runs]) for s in sets]
      ys = [np.mean([_point(r, s)[key] for r in runs]) for s in sets]
      ax.plot(xs, ys, f"C{j}^:", label=f"FastFlow c={c}, gamma={gamma} (lambda sweep)")
    if key == "fd":
      ax.axhline(np.mean([r["fd_ref"] for r in runs]), color="k", lw=0.8, ls=":",
                 label=f"{REF_STEPS}-step Euler")
    ax.set(xlabel="NFE (network evaluations)",
           ylabel="mean L2 to the 50-step sample" if key == "l2" else "Frechet distance")
    if key == "l2":
      ax.set_yscale("log")
  axes[1].legend(fontsize=7)
  fig.suptitle(f"FastFlow vs coarse Euler vs fixed caching, {len(runs)} seed(s) (means)")
  save_figure(fig, out, "fastflow_curves.png")
  save_digit_grid(runs[0].get("grid", {}), out, "fastflow_samples.png",
                  "same noise per column", height=1.15)
  return ["fastflow_curves.png", "fastflow_samples.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/fastflow",
                       quick_help="1 seed, a shorter sweep: the pipeline in about a minute",
                       helps={"hidden": "hidden widths of the velocity MLP",
                              "train_steps": "flow-matching Adam steps",
                              "yardstick_steps": "training steps of the yardstick classifier",
                              "batch": "training batch and samples per sampler call",
                              "warmup": "FastFlow calls on fresh noise before the measured ones",
                              "eval_batches": "measured calls (fixed noise, shared by all)",
                              "lambdas": "decision_lambda sweep (reward_lambda = lambda / 5)",
                              "gammas": "extrapolation coefficients",
                              "cs": "UCB1 exploration constants",
                              "euler_nfe": "coarse Euler step counts",
                              "caching_nfe": "fixed-caching NFEs (grid of 2 x NFE steps)"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def _note(result: dict) -> str:
  runs = result["runs"]
  return (f"{result['config']['seeds']} seed(s), mean ± std over seeds; "
          f"{result['config']['eval_batches'] * result['config']['batch']} samples per method; "
          f"flow-matching loss {pm([r['final_loss'] for r in runs])}; yardstick test accuracy "
          f"{pm([r['yardstick_test_accuracy'] for r in runs])}; FD between two halves of the "
          f"real held-out digits {pm([r['fd_real_halves'] for r in runs], '.2f')}.")


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    return {"runs": seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog),
                              "fastflow")}

  return run_experiment(argv, cli(), "fastflow", run, plot, _table, _note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/fastflow.md


def _report(record: dict) -> str:
  c = record["config"]
  runs = record["runs"]
  return ("\n" + f"Velocity MLP hidden {tuple(c['hidden'])}, {P.thousands(c['train_steps'])} "
          f"flow-matching steps; FastFlow bandits learn over {c['warmup']} calls of "
          f"{c['batch']} samples, then {c['eval_batches']} measured calls "
          f"({c['eval_batches'] * c['batch']} samples per method, the same noise for every "
          f"sampler); {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds. FD between two halves "
          f"of the real held-out digits: "
          f"{pm([r['fd_real_halves'] for r in runs], '.2f')}; yardstick test accuracy "
          f"{pm([r['yardstick_test_accuracy'] for r in runs])}.\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("fastflow", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("fastflow", _report)


if __name__ == "__main__":
  main()
