"""Flow Actor-Critic: the Q-explosion study on a sparse-reward multimodal task.

    python -m experiments.flow_actor_critic [--quick] [--out DIR] [--seeds S]
        [--ogbench-dataset PATH] [--checkpoint-dir DIR]

Four arms on ``jaxlab.envs.MultiGoalPoint`` (rewards in {-1, 0}, gamma 0.99:
true values lie in [-100, 0], so any Q > 0 is overestimation):

* ``no_penalty``: no critic penalty and no distillation (pure Q maximization
  by a one-step actor on a critic trained by TD alone);
* ``penalty_only``: FAC's density-weighted critic penalty, no distillation;
* ``fac``: the paper's agent (penalty + distillation to the frozen flow);
* ``fql``: Flow Q-Learning (distillation only, flow trained jointly).

Logged per evaluation chunk: mean / max Q(s, pi(s)) on dataset states, the
fraction of Q > 0, FAC's mean penalty weight, success rate and return. With
``--ogbench-dataset`` the same arms also train on an OGBench pointmaze
dataset file (``experiments.make_ogbench_data``; Q statistics only: the
mujoco environment is not evaluated inside the scan). Writes
``results.json``, ``summary.md``, ``q_values.png``, ``success.png``.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import matplotlib.pyplot as plt
import numpy as np
from tqdm.auto import tqdm

from experiments import pages  # pages.pm: the docs' spread (pm here is the summary table's)
from experiments.cli import ExperimentCLI
from experiments.pages import f, g, load, minmax, pct, seconds, table, thousands
from experiments.records import run_experiment
from experiments.reporting import Claim, pm, sample_std
from jaxlab import envs
from jaxlab.rl.agents import registry
from jaxlab.rl.train import TrainConfig, make_train
from jaxlab.training import shard_seeds

# arm -> (registered agent, config fields of the arm, whether its behavior flow pretrains for
# the scale's "pretrain" steps); every arm also takes the scale's widths and batch size
ARMS = {
    "no_penalty": ("unregularized", dict(distill=0.0), False),  # nothing uses the flow
    "penalty_only": ("fac", dict(distill=0.0), True),
    "fac": ("fac", {}, True),
    "fql": ("fql", {}, False),  # FQL trains its flow jointly
}

DISCOUNT = 0.99

CONFIGS = {
    "smoke": dict(hidden=(16, 16), episodes=40, pretrain=20, steps=40, eval_every=20, seeds=2,
                  eval_episodes=8, batch=32),
    "quick": dict(hidden=(64, 64), episodes=500, pretrain=500, steps=1500, eval_every=500,
                  seeds=2, eval_episodes=50, batch=128),
    "full": dict(hidden=(128, 128), episodes=2000, pretrain=5000, steps=20000,
                 eval_every=2000, seeds=5, eval_episodes=200, batch=256),
}


def arm_setup(arm: str, cfg: dict) -> tuple[type, object]:
  """Agent class and config of one arm at a scale."""
  if arm not in ARMS:
    raise ValueError(f"arm must be one of {tuple(ARMS)}, got {arm!r}")
  agent, fields, pretrain = ARMS[arm]
  if pretrain:
    fields = {**fields, "pretrain_steps": cfg["pretrain"]}
  # discount 0.99 in every arm (FQL's default; FACConfig's is the official 0.995): the
  # recorded runs used it, and one gamma keeps the arms comparable
  return registry.make(agent, hidden_dims=cfg["hidden"], batch_size=cfg["batch"],
                       discount=DISCOUNT, **fields)


def run_arm(arm: str, cfg: dict, dataset: dict, evaluate: bool, checkpoint_dir: str | None,
            seed: int = 0) -> dict:
  agent_cls, agent_cfg = arm_setup(arm, cfg)
  evaluate_fn = None
  if evaluate:
    evaluate_fn = lambda key, agent: envs.evaluate(key, agent.sample_actions, cfg["eval_episodes"])
  tc = TrainConfig(num_steps=cfg["steps"], eval_every=cfg["eval_every"],
                   eval_episodes=cfg["eval_episodes"])
  train = make_train(agent_cls, agent_cfg, dataset, tc, evaluate_fn)
  keys = shard_seeds(jax.random.split(jax.random.key(seed), cfg["seeds"]))  # seeds over devices
  start = time.time()
  _, history = train(keys, checkpoint_dir=checkpoint_dir)
  wall = time.time() - start
  hist = {k: v.tolist() for k, v in history.items()}
  final = {k: {"mean": float(np.mean(v[-1])), "std": sample_std(v[-1]),
               "per_seed": [float(x) for x in v[-1]]} for k, v in history.items()}
  return {"arm": arm, "config": dataclasses.asdict(agent_cfg), "history": hist, "final": final,
          "wall_time_s": wall}


SUMMARY_KEYS = (("critic/q_pi_mean", "Q(s,pi) mean"), ("critic/q_pi_max", "Q(s,pi) max"),
                ("critic/q_pi_pos_frac", "frac Q>0"), ("penalty/w_mean", "mean w"),
                ("eval/success", "success"), ("eval/return", "return"))


def format_table(runs: list[dict]) -> str:
  head = "| task | arm | " + " | ".join(name for _, name in SUMMARY_KEYS) + " |"
  lines = [head, "|" + "---|" * (len(SUMMARY_KEYS) + 2)]
  for r in runs:
    cells = []
    for key, _ in SUMMARY_KEYS:
      f = r["final"].get(key)
      cells.append(pm(f["per_seed"], ".3g", ".2g") if f else "")
    lines.append(f"| {r['task']} | {r['arm']} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot(runs: list[dict], out: str) -> list[str]:
  paths = []
  for key, name, fname in (("critic/q_pi_mean", "mean Q(s, pi(s))", "q_values.png"),
                           ("eval/success", "success rate", "success.png")):
    tasks = sorted({r["task"] for r in runs if key in r["history"]})
    if not tasks:
      continue
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
      for r in runs:
        if r["task"] != task or key not in r["history"]:
          continue
        steps = np.asarray(r["history"]["step"])[:, 0]
        vals = np.asarray(r["history"][key])
        ax.plot(steps, vals.mean(1), label=r["arm"])
        ax.fill_between(steps, vals.min(1), vals.max(1), alpha=0.2)
      if key == "critic/q_pi_mean":
        ax.axhline(0.0, color="k", lw=0.8, ls="--")
      ax.set(title=task, xlabel="actor-critic steps", ylabel=name)
      ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, fname)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)
  return paths


def _per_seed(result: dict, arm: str, key: str, task: str = "multigoal_point") -> np.ndarray | None:
  """One arm's final-chunk values of ``key``, one per seed, or None if not in ``result``."""
  for r in result.get("runs", []):
    if r.get("task") == task and r.get("arm") == arm and key in r.get("final", {}):
      return np.asarray(r["final"][key]["per_seed"], float)
  return None


def _spread(x: np.ndarray) -> str:
  return pm(x, ".3g", ".2g")


def _beats(a: np.ndarray | None, b: np.ndarray | None, name_a: str, name_b: str, what: str,
           lower: bool = False) -> tuple[str, bool | None]:
  """``a`` above ``b`` (below if ``lower``) in every seed, paired by index: text, verdict."""
  if a is None or b is None or len(a) != len(b) or len(a) == 0:
    return f"{what}: {name_a} or {name_b} not in this run", None
  wins = int(np.sum(a < b if lower else a > b))
  return (f"{what}: {name_a} {_spread(a)} vs {name_b} {_spread(b)} ({len(a)} seeds; "
          f"{name_a} {'lower' if lower else 'higher'} in {wins}/{len(a)})", wins == len(a))


def claims(result: dict) -> list[Claim]:
  """The paper's claims as ``run_all`` report rows, from a ``results.json`` dict.

  All rows use the multi-goal point task (the only one evaluated for success) and
  each arm's final chunk; seeds are paired by index (every arm trains from the same
  seed keys). Criteria:

  * Q explosion: held iff without a behavior constraint (``no_penalty``) the mean
    Q(s, pi) over dataset states ends above 0, the ceiling of the true values, in
    every seed.
  * overestimation suppressed: held iff FAC's fraction of Q(s, pi) > 0 is below
    ``no_penalty``'s in every seed.
  * success vs no constraint: held iff FAC's success rate is above ``no_penalty``'s
    in every seed.
  * success vs FQL: held iff FAC's success rate is above FQL's in every seed.

  ``held`` is None where an arm or metric the row needs is not in ``result``.
  """
  q_mean = _per_seed(result, "no_penalty", "critic/q_pi_mean")
  q_max = _per_seed(result, "no_penalty", "critic/q_pi_max")
  if q_mean is None or q_max is None or len(q_mean) == 0:
    explosion = ("no_penalty not in this run", None)
  else:
    pos = int(np.sum(q_mean > 0))
    explosion = (f"no_penalty Q(s,pi) mean {_spread(q_mean)}, max {_spread(q_max)} "
                 f"({len(q_mean)} seeds; mean > 0 in {pos}/{len(q_mean)})", pos == len(q_mean))
  frac = "critic/q_pi_pos_frac"
  npf, facf = _per_seed(result, "no_penalty", frac), _per_seed(result, "fac", frac)
  suppressed = _beats(facf, npf, "fac", "no_penalty", "frac Q(s,pi) > 0", lower=True)
  success = {arm: _per_seed(result, arm, "eval/success") for arm in ("fac", "no_penalty", "fql")}
  return [
      Claim("Without a behavior constraint the critic's Q(s, pi) explodes above 0, the "
            "ceiling of the true values (rewards in {-1, 0})", *explosion),
      Claim("FAC's density-weighted critic penalty suppresses overestimation: fewer "
            "Q(s, pi) > 0 than with no penalty", *suppressed),
      Claim("FAC succeeds more often than the unconstrained actor-critic",
            *_beats(success["fac"], success["no_penalty"], "fac", "no_penalty", "success")),
      Claim("FAC outperforms Flow Q-Learning (the paper: OGBench average 60.3 vs 43.6; "
            "here success on the multi-goal point task)",
            *_beats(success["fac"], success["fql"], "fac", "fql", "success")),
  ]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS`` and the run's selections."""
  cli = ExperimentCLI(__doc__, CONFIGS, out="results/flow_actor_critic", resumable=True,
                      quick_help="smoke scale, < 10 min on 2 cores")
  cli.parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
  cli.parser.add_argument("--ogbench-dataset", default=None,
                          help="an OGBench pointmaze .npz (experiments.make_ogbench_data)")
  return cli


def main(argv=None) -> dict:
  def run(cfg, args):
    tasks = [("multigoal_point", envs.make_dataset(jax.random.key(1234), cfg["episodes"]), True)]
    if args.ogbench_dataset:
      from jaxlab.rl.ogbench_data import load_dataset
      tasks.append(("ogbench_pointmaze", load_dataset(args.ogbench_dataset), False))
    runs = []
    jobs = [(t, a) for t in tasks for a in args.arms]
    for (task, data, evaluate), arm in tqdm(jobs, desc="flow_actor_critic", unit="arm"):
      ckpt = (os.path.join(os.path.abspath(args.checkpoint_dir), task, arm)
              if args.checkpoint_dir else None)
      record = run_arm(arm, cfg, data, evaluate, ckpt)
      record["task"] = task
      runs.append(record)
    return {"runs": runs, "dataset_sizes": {t: len(d["rewards"]) for t, d, _ in tasks}}

  return run_experiment(argv, cli(), "flow_actor_critic", run,
                        lambda r, out: plot(r["runs"], out), lambda r: format_table(r["runs"]),
                        lambda r: "Final chunk, mean ± std over seeds.")


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/flow_actor_critic.md


def _g3pm(per_seed) -> str:
  """``mean ± sample std``, 3 and 2 significant digits."""
  return pages.pm(per_seed, g, lambda x: g(x, 2))


def page() -> dict[str, str]:
  """``{name: text}`` for the ``<!-- gen:flow_actor_critic.<name> -->`` regions of
  ``docs/methods/flow_actor_critic.md``, from the committed records."""
  full, og = load("flow_actor_critic", "full"), load("flow_actor_critic", "ogbench")
  benches = [load("flow_actor_critic", "bench"),
             load("run_all", "quick", "bench_flow_actor_critic")]
  arms = {r["arm"]: r["final"] for r in full["runs"]}
  cols = ("critic/q_pi_mean", "critic/q_pi_max", "critic/q_pi_pos_frac", "penalty/w_mean",
          "eval/success", "eval/return")
  rows = [[arm] + [_g3pm(fin[c]["per_seed"]) if c in fin else "" for c in cols]
          for arm, fin in arms.items()]
  seeds = lambda arm, key: np.asarray(arms[arm][key]["per_seed"])  # noqa: E731
  ogarms = {r["arm"]: r["final"] for r in og["runs"]}
  b, q = benches
  return {
      "seeds": str(full["config"]["seeds"]),
      "wall": seconds(full["wall_time_s"]),
      "transitions": thousands(sum(full["dataset_sizes"].values())),
      "table": table(["arm", "Q(s,pi) mean", "Q(s,pi) max", "frac Q > 0", "mean w", "success",
                      "return"], rows),
      "no_penalty_q": f"{seeds('no_penalty', 'critic/q_pi_mean').mean():.0f}",
      "no_penalty_return": f"{seeds('no_penalty', 'eval/return').mean():.0f}",
      "penalty_only_success": minmax(seeds("penalty_only", "eval/success")),
      "fac_success": f(seeds("fac", "eval/success").mean()),
      "fql_success": f(seeds("fql", "eval/success").mean()),
      "bench_setup": f"{b['seeds']} seeds x {thousands(b['steps'])} steps",
      "bench_scan": f"{b['scan_seed_steps_per_s']:.0f}",
      "bench_loop": f"{b['loop_seed_steps_per_s']:.0f}",
      "bench_ratio": f"{b['ratio']:.2f}",
      "quick_scan": f"{q['scan_seed_steps_per_s']:.0f}",
      "quick_loop": f"{q['loop_seed_steps_per_s']:.0f}",
      "quick_ratio": f"{q['ratio']:.2f}",
      # the profile of one chunk (bench --profile-steps): what the scan can remove
      "profile_steps": thousands(b["profile"]["steps"]),
      "profile_overhead": pct(b["profile"]["share"]["loop control"]
                              + b["profile"]["share"]["sampling"]),
      "profile_density": pct(b["profile"]["share"]["density"]),
      "profile_distill": pct(b["profile"]["share"]["distillation"]),
      "profile_rest": pct(b["profile"]["share"]["critic+actor+Adam"]),
      "loop_overhead": pct(1 - b["scan_s"] / b["loop_s"]),
      "quick_setup": (f"{thousands(q['steps'])} steps per seed, nets "
                      f"{' x '.join(str(h) for h in q['hidden'])}"),
      "og_q_max": ", ".join(f"{g(ogarms[a]['critic/q_pi_max']['mean'], 2)} ({a})"
                            for a in ("no_penalty", "penalty_only", "fac", "fql")),
      "og_pos_frac": g(100 * max(max(fin["critic/q_pi_pos_frac"]["per_seed"])
                                 for fin in ogarms.values()), 2),
  }


if __name__ == "__main__":
  main()
