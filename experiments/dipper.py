"""DIPPER vs FLAT, HIER and DIPPER without V on PointMaze and PointPush, and a lambda sweep.

    python -m experiments.dipper [--quick] [--out DIR] [--seeds S] [--checkpoint-dir DIR]
    python -m experiments.dipper --report-only --out DIR   # summary and figures again
    python -m experiments.dipper --diagnose-eval [--quick ...] --out DIR   # see diagnose_eval

All arms see the same number of environment steps per task. Logged after
every iteration (deterministic evaluation): success rate, subgoal distance
(end of window vs proposed subgoal; non-stationarity, lower is better), the
low level's Q of proposed subgoals (feasibility, higher is better), the
fraction of subgoals inside walls (maze) and the mean subgoal step length
(trivial subgoals are short). The lambda sweep runs DIPPER on the maze with
several value weights: small lambda should allow infeasible subgoals, large
lambda trivial ones. Writes ``results.json``, ``summary.md``,
``success.png`` and ``lambda_sweep.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from tqdm.auto import tqdm

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import machine, run_experiment, save_json, write_results
from experiments.reporting import Claim, pm, sample_std
from jaxlab import envs
from jaxlab.rl import hrl
from jaxlab.rl.agents.dipper import DipperConfig, DipperHigh
from jaxlab.rl.agents.gcsac import SACConfig, tanh_gaussian_sample
from jaxlab.training import shard_seeds

# arm -> (the hierarchy, hrl.HRLConfig.agent; DIPPER's value weight lambda, None: the scale's)
ARMS = {"flat": ("flat", None), "hier": ("hier", None), "dipper_no_v": ("dipper", 0.0),
        "dipper": ("dipper", None)}
TASKS = {"maze": (envs.PointMaze, 15), "push": (envs.PointPush, 7)}  # env, subgoal period c

CONFIGS = {
    # smoke: one hidden layer, the smallest network that runs every code path (compiling
    # the training is most of a smoke run's time; a second layer adds about a fifth)
    "smoke": dict(seeds=2, iterations=2, iters_per_chunk=1, num_envs=4, low_updates=4,
                  high_updates=2, hidden=(16,), batch=32, pairs=8, m=2, eval_envs=4,
                  buffer=16, lams=(0.0, 10.0), lam=1.0, tasks=tuple(TASKS)),
    # quick: the main arms on push only (where the paper's claims are; the maze's main arms
    # are in the full run) and the lambda sweep on the maze: six compiled runs
    "quick": dict(seeds=2, iterations=24, iters_per_chunk=12, num_envs=8, low_updates=20,
                  high_updates=5, hidden=(64, 64), batch=64, pairs=32, m=3, eval_envs=16,
                  buffer=64, lams=(0.01, 100.0), lam=1.0, tasks=("push",)),
    "full": dict(seeds=5, iterations=200, iters_per_chunk=25, num_envs=16, low_updates=100,
                 high_updates=20, hidden=(128, 128), batch=256, pairs=64, m=5, eval_envs=32,
                 buffer=512, lams=(0.0, 1.0, 10.0, 100.0), lam=1.0, tasks=tuple(TASKS)),
}


def hrl_config(arm: str, task: str, cfg: dict, lam: float | None = None) -> hrl.HRLConfig:
  """The HRL configuration of one arm on one task at a scale."""
  if arm not in ARMS:
    raise ValueError(f"arm must be one of {tuple(ARMS)}, got {arm!r}")
  c = TASKS[task][1]
  agent, arm_lam = ARMS[arm]
  sac = SACConfig(hidden_dims=cfg["hidden"], batch_size=cfg["batch"])
  lam = (cfg["lam"] if arm_lam is None else arm_lam) if lam is None else lam
  dip = DipperConfig(hidden_dims=cfg["hidden"], batch_size=cfg["pairs"], m=cfg["m"], lam=lam)
  return hrl.HRLConfig(
      agent=agent, subgoal_period=c, num_windows=15,
      num_envs=cfg["num_envs"], iterations=cfg["iterations"],
      iters_per_chunk=cfg["iters_per_chunk"], low_updates=cfg["low_updates"],
      high_updates=cfg["high_updates"], buffer_episodes=cfg["buffer"],
      eval_envs=cfg["eval_envs"], low=sac, high=sac, dipper=dip)


def run(task: str, arm: str, config: hrl.HRLConfig, seeds: int, ckpt: str | None) -> dict:
  env = TASKS[task][0]()
  train = hrl.make_train(env, env.default_params, config)
  start = time.time()
  keys = shard_seeds(jax.random.split(jax.random.key(0), seeds))  # seeds over devices
  _, history = train(keys, checkpoint_dir=ckpt)
  last = max(1, len(history["env_steps"]) // 5)  # final metrics: mean of the last 20%
  final = {k: {"mean": float(np.mean(v[-last:])), "std": sample_std(np.mean(v[-last:], 0)),
               "per_seed": np.mean(v[-last:], 0).tolist()} for k, v in history.items()}
  return {"task": task, "arm": arm, "lam": config.dipper.lam,
          "config": dataclasses.asdict(config), "history": {k: v.tolist() for k, v in
                                                            history.items()},
          "final": final, "wall_time_s": time.time() - start}


KEYS = (("eval/success", "success"), ("train/success", "train success"),
        ("eval/subgoal_distance", "subgoal dist"),
        ("eval/lower_q", "lower Q"), ("eval/subgoal_in_wall", "in wall"),
        ("eval/subgoal_step", "step length"))


NOTE = ("Final 20% of iterations, mean ± std over seeds. Deterministic evaluation (mean "
        "actions), except train success: the stochastic training episodes of the same "
        "iterations.")


def format_table(runs: list[dict]) -> str:
  lines = ["| task | arm | lambda | " + " | ".join(n for _, n in KEYS) + " |",
           "|" + "---|" * (len(KEYS) + 3)]
  for r in runs:
    flat = r["arm"] == "flat"
    cells = [pm(r["final"][k]["per_seed"], ".3g", ".2g")
             if k in r["final"] and not (flat and not k.endswith("/success")) else ""
             for k, _ in KEYS]
    lam = "" if r["arm"] in ("flat", "hier") else f"{r['lam']:g}"
    lines.append(f"| {r['task']} | {r['arm']} | {lam} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot(runs: list[dict], out: str) -> list[str]:
  paths = []
  main_runs = [r for r in runs if not r.get("sweep")]
  tasks = sorted({r["task"] for r in main_runs})
  if tasks:
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
      for r in main_runs:
        if r["task"] == task:
          x = np.asarray(r["history"]["env_steps"])[:, 0]
          y = np.asarray(r["history"]["eval/success"])
          ax.plot(x, y.mean(1), label=r["arm"])
          ax.fill_between(x, y.min(1), y.max(1), alpha=0.15)
      ax.set(title=task, xlabel="environment steps", ylabel="success rate")
      ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out, "success.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
  sweep = sorted([r for r in runs if r.get("sweep")], key=lambda r: r["lam"])
  if sweep:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    lams = [max(r["lam"], 1e-3) for r in sweep]
    for ax, (key, name) in zip(axes, (("eval/subgoal_in_wall", "subgoals in walls"),
                                      ("eval/subgoal_step", "subgoal step length"),
                                      ("eval/success", "success")), strict=True):
      ax.errorbar(lams, [r["final"][key]["mean"] for r in sweep],
                  [r["final"][key]["std"] for r in sweep], marker="o")
      ax.set(xscale="log", xlabel="lambda", title=name)
    fig.tight_layout()
    paths.append(os.path.join(out, "lambda_sweep.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
  return paths


def _per_seed(result: dict, task: str, arm: str, key: str) -> np.ndarray | None:
  """One main (not sweep) run's final values of ``key``, one per seed, or None if absent."""
  for r in result.get("runs", []):
    if (r.get("task"), r.get("arm"), bool(r.get("sweep"))) == (task, arm, False):
      if key in r.get("final", {}):
        return np.asarray(r["final"][key]["per_seed"], float)
  return None


def _spread(x: np.ndarray) -> str:
  return pm(x, ".3g", ".2g")


def _beats(result: dict, task: str, key: str, arm: str, others: tuple[str, ...],
           lower: bool = False) -> tuple[str, bool | None]:
  """Whether ``arm`` is above (below if ``lower``) each of ``others`` in every seed.

  Seeds are paired by index. Returns the measured text and the verdict (None if a
  run is missing).
  """
  label = f"{task} {key.removeprefix('eval/')}"
  ours = _per_seed(result, task, arm, key)
  theirs = {o: _per_seed(result, task, o, key) for o in others}
  if ours is None or len(ours) == 0 or any(t is None or len(t) != len(ours)
                                           for t in theirs.values()):
    return f"{label}: {', '.join((arm, *others))} not all in this run", None
  parts, held = [f"{arm} {_spread(ours)}"], True
  for o, t in theirs.items():
    wins = int(np.sum(ours < t if lower else ours > t))
    held &= wins == len(ours)
    parts.append(f"{o} {_spread(t)} ({arm} {'lower' if lower else 'higher'} in "
                 f"{wins}/{len(ours)})")
  return f"{label}: " + " vs ".join(parts), held


def claims(result: dict) -> list[Claim]:
  """The paper's claims as ``run_all`` report rows, from a ``results.json`` dict.

  Final metrics are each seed's mean over the last 20% of iterations; seeds are
  paired by index (every arm trains from the same seed keys). Criteria:

  * reachable subgoals (on push, where the paper reports DIPPER's advantage): held
    iff DIPPER's subgoal distance is below HIER's and its low-level Q of the
    proposed subgoals above HIER's, in every seed.
  * success on push: held iff DIPPER's success rate is above both HIER's and
    FLAT's in every seed.
  * the value term: held iff DIPPER's success rate is above DIPPER without V's in
    every seed, on every task in the run.
  * lambda sweep: held iff from the smallest to the largest swept lambda the mean
    fraction of subgoals inside walls falls (infeasible subgoals at small lambda)
    and the mean subgoal step length falls (trivial subgoals at large lambda).

  ``held`` is None where a run the row needs is not in ``result``.
  """
  dist = _beats(result, "push", "eval/subgoal_distance", "dipper", ("hier",), lower=True)
  q = _beats(result, "push", "eval/lower_q", "dipper", ("hier",))
  reach = ((f"{dist[0]}; {q[0]}", dist[1] and q[1]) if None not in (dist[1], q[1])
           else ("push: dipper or hier not in this run", None))
  tasks = sorted({r["task"] for r in result.get("runs", []) if not r.get("sweep")})
  value = [_beats(result, t, "eval/success", "dipper", ("dipper_no_v",)) for t in tasks]
  held_v = (None if not value or any(h is None for _, h in value)
            else all(h for _, h in value))
  value_row = ("; ".join(m for m, _ in value) or "no task in this run", held_v)
  sweep = sorted((r for r in result.get("runs", []) if r.get("sweep")), key=lambda r: r["lam"])
  if len(sweep) < 2:
    sweep_row = ("fewer than two lambdas swept in this run", None)
  else:
    lo, hi = sweep[0], sweep[-1]
    parts, held_s = [], True
    for key, name in (("eval/subgoal_in_wall", "in walls"), ("eval/subgoal_step", "step length")):
      a, b = (np.asarray(r["final"][key]["per_seed"], float) for r in (lo, hi))
      held_s &= bool(b.mean() < a.mean())
      parts.append(f"{name} {_spread(a)} -> {_spread(b)}")
    sweep_row = (f"maze, lambda {lo['lam']:g} -> {hi['lam']:g}: " + ", ".join(parts)
                 + f" ({len(lo['final']['eval/success']['per_seed'])} seeds)", held_s)
  return [
      Claim("DIPPER's subgoals are more reachable than HIER's: closer to where the low "
            "level ends up (less non-stationary) and of higher low-level Q", *reach),
      Claim("DIPPER succeeds more often than HIER and FLAT on push (the paper: about 30% on "
            "pick-and-place and push)",
            *_beats(result, "push", "eval/success", "dipper", ("hier", "flat"))),
      Claim("The low level's value term (primitive regularization) improves on DIPPER "
            "without it", *value_row),
      Claim("Small lambda gives infeasible subgoals, large lambda trivial ones", *sweep_row),
  ]


# diagnose_eval's high-level choices: hrl.HIGH_MODES on the trained high level, and
# "untrained": samples of a freshly initialised high level (same architecture)
DIAG_HIGH = ("mean", "sample", "uniform", "untrained")


def diagnose_eval(cfg: dict, lams: tuple[float, ...], episodes: int = 64) -> dict:
  """Why deterministic maze success differs from training success (issue 16).

  Trains DIPPER on the maze at each ``lam`` (``cfg``'s scale and seeds), then runs the
  trained agents of every seed for ``episodes`` episodes with each high-level choice in
  :data:`DIAG_HIGH` x a deterministic or stochastic low level (the same rollout as
  training and evaluation, :func:`jaxlab.rl.hrl.make_train`'s ``train.rollout``).
  With the mean subgoals it also measures the high policy at the window starts: its
  std ``exp(log_std)`` and ``|mean|`` (pre-tanh), the spread across states of the
  mean subgoal ``(tanh(mean) + 1) / 2`` (std over windows, averaged over the two
  coordinates) and the distance from it to policy samples (goal units).
  Returns per-seed numbers, keyed by lambda.
  """
  out = {}
  for lam in lams:
    out[f"{lam:g}"] = _diagnose_one(cfg, lam, episodes)
    print(f"lambda {lam:g}:")
    for name, m in out[f"{lam:g}"]["grid"].items():
      print(f"  {name:26s} success {np.round(m['success'], 3).tolist()}  in wall "
            f"{np.round(m['subgoal_in_wall'], 2).tolist()}  step "
            f"{np.round(m['subgoal_step'], 2).tolist()}")
    print("  policy at window starts:", {k: np.round(v, 3).tolist()
                                         for k, v in out[f"{lam:g}"]["policy"].items()})
  return out


def _diagnose_one(cfg: dict, lam: float, episodes: int) -> dict:
  env = TASKS["maze"][0]()
  params = env.default_params
  config = hrl_config("dipper", "maze", cfg, lam)
  c, num_windows = config.subgoal_period, config.num_windows
  train = hrl.make_train(env, params, config)
  state, history = train(jax.random.split(jax.random.key(0), cfg["seeds"]))
  last = max(1, len(history["env_steps"]) // 5)
  example_obs = jnp.zeros(env.observation_space(params).shape)
  # created in one compiled program (op by op, each operation would compile on its own;
  # the parameters are the same bits either way)
  fresh = jax.jit(jax.vmap(
      lambda k: DipperHigh.create(k, example_obs, jnp.zeros(2), 2, config.dipper)))(
          jax.random.split(jax.random.key(1), cfg["seeds"]))
  ep_keys = jax.random.split(jax.random.key(2), episodes)
  # The grid's cells as run-time choices: the high level (trained, or the fresh one for
  # "untrained"), its mode (an index into hrl.HIGH_MODES) and the low level's determinism.
  cells = [(mode, low_det) for mode in DIAG_HIGH for low_det in (True, False)]
  choices = (np.array([mode == "untrained" for mode, _ in cells]),
             np.array([hrl.HIGH_MODES.index("sample" if mode == "untrained" else mode)
                       for mode, _ in cells], np.int32),
             np.array([low_det for _, low_det in cells]))

  # The whole grid is one compiled program holding one rollout, mapped over the cells (each
  # cell runs the same computation as with its choices fixed): per cell its metrics per
  # seed and episode, and its episodes (those of the mean subgoals feed policy_stats).
  @jax.jit
  @functools.partial(jax.vmap, in_axes=(0, 0, 0, None))  # over seeds
  def evaluate_grid(low, high, fresh, choices):
    def cell(choice):
      untrained, mode, low_det = choice
      run_high = jax.tree.map(lambda f, h: jnp.where(untrained, f, h), fresh, high)
      return jax.vmap(lambda k: train.rollout(k, low, run_high, mode, low_det))(ep_keys)
    return jax.lax.map(cell, choices)

  rollouts, metrics = evaluate_grid(state.low, state.high, fresh, choices)  # (seeds, cells, ...)
  grid = {f"high {mode}, low {'det' if low_det else 'stoch'}": {
      k: np.asarray(v[:, i]).mean(1).tolist() for k, v in metrics.items()}
      for i, (mode, low_det) in enumerate(cells)}
  mean_ep = jax.tree.map(lambda x: x[:, cells.index(("mean", True))], rollouts)

  def policy_stats(high, ep, key):
    obs = ep["obs"][:, ::c][:, :num_windows]  # (episodes, H, obs_dim) window starts
    goal = jnp.broadcast_to(ep["desired"][:, None], obs.shape[:2] + (2,))
    mean, log_std = high.policy(jnp.concatenate([obs, goal], -1))
    samples = tanh_gaussian_sample(mean, log_std, key)[0]
    sub = (jnp.tanh(mean) + 1) / 2
    return {"std": jnp.exp(log_std).mean(), "abs_mean": jnp.abs(mean).mean(),
            "mean_subgoal_spread": sub.reshape(-1, 2).std(0).mean(),
            "mean_to_sample": jnp.linalg.norm((samples + 1) / 2 - sub, axis=-1).mean()}

  stats = jax.jit(jax.vmap(policy_stats, (0, 0, None)))(state.high, mean_ep, jax.random.key(3))
  return {"grid": grid, "policy": {k: np.asarray(v).tolist() for k, v in stats.items()},
          "recorded": {k: np.mean(history[k][-last:], 0).tolist()
                       for k in ("eval/success", "train/success")}}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS`` and the run's selections."""
  cli = ExperimentCLI(__doc__, CONFIGS, out="results/dipper", resumable=True,
                      quick_help="smoke scale, < 15 min on 2 cores",
                      choices={"tasks": list(TASKS)},
                      helps={"lams": "the lambda sweep (maze, DIPPER)",
                             "lam": "DIPPER's lambda in the main arms",
                             "tasks": "tasks of the main arms (the sweep is on the maze)"})
  cli.parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
  cli.parser.add_argument("--no-sweep", action="store_true",
                          help="skip the lambda sweep (which runs on the maze)")
  cli.parser.add_argument("--diagnose-eval", action="store_true",
                          help="train DIPPER on the maze at lambda 0 and the scale's lam and "
                               "evaluate it with mean, sampled, uniform and untrained "
                               "subgoals (diagnose_eval); writes OUT/results.json")
  cli.parser.add_argument("--report-only", action="store_true",
                          help="rewrite summary.md and the figures from OUT/results.json")
  return cli


def main(argv=None) -> dict:
  args, scale, cfg = cli().parse(argv)
  # --diagnose-eval (a results.json without summary or figures) and --report-only (the summary
  # of a saved run) are not new runs of the arms: they stay outside run_experiment
  if args.diagnose_eval:
    start = time.time()
    lams = tuple(dict.fromkeys((0.0, float(cfg["lam"]))))
    result = {"scale": scale, "config": {k: list(v) if isinstance(v, tuple) else v
                                         for k, v in cfg.items()},
              "diagnosis": diagnose_eval(cfg, lams), "machine": machine()}
    result["wall_time_s"] = time.time() - start
    save_json(os.path.join(args.out, "results.json"), result, "dipper", argv)
    return result
  if args.report_only:
    with open(os.path.join(args.out, "results.json")) as f:
      result = json.load(f)
    result["figures"] = plot(result["runs"], args.out)
    write_results(args.out, "dipper", result, format_table(result["runs"]), NOTE, new_run=False)
    return result

  def run_arms(cfg, args):
    jobs = [(t, a, None) for t in cfg["tasks"] for a in args.arms]
    if not args.no_sweep:
      jobs += [("maze", "dipper", lam) for lam in cfg["lams"]]
    # done: (task, config) -> run; a swept lambda equal to a main arm's reuses that run.
    runs, done = [], {}
    for task, arm, lam in tqdm(jobs, desc="dipper", unit="run"):
      name = f"{task}_{arm}" + ("" if lam is None else f"_lam{lam:g}")
      ckpt = (os.path.join(os.path.abspath(args.checkpoint_dir), name) if args.checkpoint_dir
              else None)
      config = hrl_config(arm, task, cfg, lam)
      key = (task, repr(config))
      if key in done:
        r = dict(done[key], arm=arm, reused_from=done[key]["arm"])
      else:
        r = done[key] = run(task, arm, config, cfg["seeds"], ckpt)
      runs.append(dict(r, sweep=lam is not None))
    return {"runs": runs}

  return run_experiment(argv, cli(), "dipper", run_arms, lambda r, out: plot(r["runs"], out),
                        lambda r: format_table(r["runs"]), lambda r: NOTE)


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/dipper.md


_ARM = {"flat": "FLAT", "hier": "HIER", "dipper_no_v": "DIPPER without V"}


def _dipper_runs(result: dict) -> dict[tuple[str, str, float], dict]:
  """``(task, arm, lambda) -> run``; sweep runs under arm ``sweep``."""
  return {(r["task"], "sweep" if r.get("sweep") else r["arm"], r["lam"]): r
          for r in result["runs"]}


def _rate(v: float) -> str:
  """A success rate: two decimals, or two significant digits below 0.1."""
  return P.f(v) if v == 0 or abs(v) >= 0.1 else P.g(v, 2)


def page() -> dict[str, str]:
  """``{region: text}`` for docs/methods/dipper.md, from the committed full, quick, bench and
  diagnosis records (``docs/results/dipper/``)."""
  full, quick, bench = (P.load("dipper", scale) for scale in ("full", "quick", "bench"))
  runs = _dipper_runs(full)
  by_arm = {(t, a): r for (t, a, _), r in runs.items() if a != "sweep"}
  seeds = lambda r, k: np.asarray(r["final"][k]["per_seed"], np.float64)  # noqa: E731
  mean = lambda r, k: float(seeds(r, k).mean())  # noqa: E731
  rows = []
  for task in ("maze", "push"):
    group = [by_arm[(task, a)] for a in ("flat", "hier", "dipper_no_v")]
    group.append(by_arm[(task, "dipper")])
    if task == "maze":
      group += [r for (t, a, lam), r in sorted(runs.items(), key=lambda kv: kv[0][2])
                if a == "sweep" and t == task and lam > full["config"]["lam"]]
    best = max(mean(r, "eval/success") for r in group)
    for r in group:
      name = (_ARM.get(r["arm"]) if r["arm"] != "dipper" else f"DIPPER (lambda {r['lam']:g})")
      succ = P.pm(seeds(r, "eval/success"), _rate, lambda v: P.g(v, 1))
      cells = [task, name, f"**{succ}**" if mean(r, "eval/success") == best else succ,
               _rate(mean(r, "train/success"))]
      if r["arm"] == "flat":
        cells += [""] * 4
      else:
        cells += [P.pm(seeds(r, "eval/subgoal_distance"), lambda v: P.g(v, 2),
                       lambda v: P.g(v, 1)),
                  P.pm(seeds(r, "eval/lower_q"), P.g, lambda v: P.g(v, 2)),
                  P.f(mean(r, "eval/subgoal_in_wall")) if task == "maze" else "",
                  P.f(mean(r, "eval/subgoal_step"))]
      rows.append(cells)
  steps = {t: P.thousands(by_arm[(t, "flat")]["history"]["env_steps"][-1][0])
           for t in ("maze", "push")}
  pd, ph, pf = (by_arm[("push", a)] for a in ("dipper", "hier", "flat"))
  md, mn = by_arm[("maze", "dipper")], by_arm[("maze", "dipper_no_v")]
  sweep = {lam: r for (t, a, lam), r in runs.items() if a == "sweep"}
  n = len(seeds(pd, "eval/success"))
  wins = lambda a, b, k: int(np.sum(seeds(a, k) > seeds(b, k)))  # noqa: E731
  qruns = _dipper_runs(quick)
  qpush = {a: r for (t, a, _), r in qruns.items() if t == "push" and a != "sweep"}
  qsweep = sorted((r for (_, a, _), r in qruns.items() if a == "sweep"), key=lambda r: r["lam"])
  qc = quick["config"]
  sps, ratio = bench["steps_per_s"], bench["ratio_to_point_robot"]
  env = lambda k: f"{P.g(sps[k] / 1e6)} M"  # noqa: E731
  return {
      "seeds": str(full["config"]["seeds"]),
      "wall": P.seconds(full["wall_time_s"]),
      "maze_steps": steps["maze"],
      "push_steps": steps["push"],
      "table": P.table(["task", "arm", "success", "train success", "subgoal distance",
                        "lower Q", "subgoals in walls", "step length"], rows),
      "push_dipper": P.f(mean(pd, "eval/success")),
      "push_hier": P.f(mean(ph, "eval/success")),
      "push_flat": P.g(mean(pf, "eval/success"), 2),
      "push_vs_flat": f"{wins(pd, pf, 'eval/success')} of {n}",
      "push_vs_hier": f"{wins(pd, ph, 'eval/success')} of {n}",
      "maze_zero": ("0 in every seed" if not np.any(np.r_[seeds(md, "eval/success"),
                                                          seeds(mn, "eval/success")])
                    else f"{P.f(mean(md, 'eval/success'))} (lambda 1) and "
                         f"{P.f(mean(mn, 'eval/success'))} (lambda 0)"),
      "maze_flat": P.f(mean(by_arm[("maze", "flat")], "eval/success")),
      "maze_hier": P.f(mean(by_arm[("maze", "hier")], "eval/success")),
      "maze_train": P.span([100 * mean(r, "train/success") for r in (mn, md)],
                           lambda v: f"{v:.0f}") + "%",
      "maze_logp": P.f(mean(md, "high/logp")),
      "maze_step_cells": P.span([11 * mean(r, "eval/subgoal_step") for r in (mn, md)],
                                lambda v: P.g(v, 2)),
      "push_dist": f"{P.f(mean(pd, 'eval/subgoal_distance'))} vs "
                   f"{P.f(mean(ph, 'eval/subgoal_distance'))}",
      "push_q": f"{P.g(mean(pd, 'eval/lower_q'))} vs {P.g(mean(ph, 'eval/lower_q'))}",
      "maze_reach": f"{P.f(mean(md, 'eval/subgoal_distance'))}, {P.g(mean(md, 'eval/lower_q'))}",
      "value_maze": f"{P.g(mean(md, 'eval/success'), 1)} vs {P.g(mean(mn, 'eval/success'), 1)}",
      "value_push": f"{P.f(mean(pd, 'eval/success'), 3)} vs "
                    f"{P.f(mean(by_arm[('push', 'dipper_no_v')], 'eval/success'), 3)}, higher in "
                    f"{wins(pd, by_arm[('push', 'dipper_no_v')], 'eval/success')} of {n} seeds",
      "lam10": P.pm(seeds(sweep[10.0], "eval/success"), lambda v: P.f(v), lambda v: P.f(v)),
      "lam10_walls": P.f(mean(sweep[10.0], "eval/subgoal_in_wall")),
      "lam100_walls": f"{100 * mean(sweep[100.0], 'eval/subgoal_in_wall'):.0f}%",
      "lam100_step": P.f(mean(sweep[100.0], "eval/subgoal_step")),
      "quick_setup": (f"{qc['seeds']} seeds, {qc['iterations']} iterations x "
                      f"{qc['num_envs']} episodes, nets {' x '.join(map(str, qc['hidden']))}"),
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "quick_push": ", ".join(
          f"{_ARM.get(a, 'DIPPER')} {P.f(mean(r, 'eval/success'))} "
          f"(train {P.f(mean(r, 'train/success'))})" for a, r in qpush.items()),
      "quick_sweep": ", ".join(
          f"{name} {P.f(mean(qsweep[0], k))} -> {P.f(mean(qsweep[-1], k))}"
          for k, name in (("eval/subgoal_in_wall", "subgoals in walls"),
                          ("eval/subgoal_step", "step length")))
                     + f" (lambda {qsweep[0]['lam']:g} -> {qsweep[-1]['lam']:g})",
      "bench_setup": f"{P.thousands(bench['envs'])} environments x {P.thousands(bench['steps'])}",
      "bench_robot": env("PointRobot-misc"),
      "bench_maze": f"{env('PointMaze')} ({P.f(ratio['PointMaze'])}x)",
      "bench_push": f"{env('PointPush')} ({P.f(ratio['PointPush'])}x)",
      "bench_grid": f"{env('PointMaze (grid obs)')} ({P.f(ratio['PointMaze (grid obs)'])}x)",
      **_dipper_diagnosis(P.load("dipper", "diagnosis")),
  }


def _dipper_diagnosis(diag: dict) -> dict[str, str]:
  """Issue 16's evaluation diagnosis (``experiments.dipper --diagnose-eval``): each number
  is the mean over seeds, as a range over the diagnosed lambdas."""
  runs = list(diag["diagnosis"].values())
  cfg = diag["config"]
  over = lambda get, fmt=P.f: P.span([float(np.mean(get(r))) for r in runs], fmt)  # noqa: E731
  grid = lambda name, k="success": over(lambda r: r["grid"][name][k])  # noqa: E731
  pol = lambda k, scale=1.0, fmt=P.f: over(lambda r: np.multiply(r["policy"][k], scale), fmt)  # noqa: E731
  return {
      "diag_setup": (f"{cfg['seeds']} seeds, {cfg['iterations']} iterations x "
                     f"{cfg['num_envs']} episodes, nets {' x '.join(map(str, cfg['hidden']))}, "
                     f"lambda {' and '.join(diag['diagnosis'])}"),
      "diag_command": diag["provenance"]["command"],
      "diag_recorded": (f"{over(lambda r: r['recorded']['eval/success'])} (train "
                        f"{over(lambda r: r['recorded']['train/success'])})"),
      "diag_mean_det": grid("high mean, low det"),
      "diag_mean_stoch": grid("high mean, low stoch"),
      "diag_sample_det": grid("high sample, low det"),
      "diag_sample_stoch": grid("high sample, low stoch"),
      "diag_uniform_det": grid("high uniform, low det"),
      "diag_untrained_det": grid("high untrained, low det"),
      "diag_std": pol("std"),
      "diag_abs_mean": pol("abs_mean"),
      "diag_spread_cells": pol("mean_subgoal_spread", 11.0),
      "diag_sample_cells": pol("mean_to_sample", 11.0, lambda v: P.f(v, 1)),
  }


if __name__ == "__main__":
  main()
