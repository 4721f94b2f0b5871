"""Regenerate an OGBench pointmaze dataset locally, in the file format OGBench downloads.

    python -m experiments.make_ogbench_data [--env pointmaze-medium-navigate-v0]
        [--num-episodes N] [--max-steps T] [--out PATH] [--seed S] [--noise STD]
        [--num-val-episodes V]

Drives OGBench's point mass with the scripted oracle its pointmaze data come from (the unit
direction to the env's BFS oracle subgoal plus N(0, 0.5^2) noise, clipped to [-1, 1]; a new random
goal each time one is reached; see ``jaxlab.rl.ogbench_data.generate``). The official datasets
have 1000 episodes x 1000 transitions (1001 rows each) plus 100 validation episodes; the default
here is 200 episodes for speed. Writes ``PATH`` and, for ``ogbench.make_env_and_datasets(...,
dataset_path=PATH)``, the validation twin ``PATH`` with ``-val.npz`` (V episodes, default N // 10,
at least 1; 0 skips it). Then reloads ``PATH`` through OGBench's loader as single-task data
(``jaxlab.rl.ogbench_data.load_dataset``, task 1) and prints steps/s, the oracle's goal-reaching
rate and the reward statistics.

Needs the optional extra: ``pip install -e '.[ogbench]'``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from experiments.cli import ExperimentCLI
from jaxlab.rl import ogbench_data

CONFIGS = {"full": dict(env="pointmaze-medium-navigate-v0", num_episodes=200, max_steps=1000,
                        num_val_episodes=None, noise=0.5, seed=0, progress=True)}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS`` and ``--out``."""
  cli = ExperimentCLI(
      __doc__, CONFIGS, types={"num_val_episodes": int | None},
      helps={"env": "OGBench dataset name '<pointmaze env>-<navigate|stitch|explore>-v0'",
             "num_episodes": "training episodes",
             "max_steps": "transitions per episode (OGBench: 1000; stored as T + 1 rows)",
             "num_val_episodes": "episodes in the -val.npz twin (default N // 10, min 1; 0: "
                                 "none)",
             "noise": "Gaussian action noise std", "progress": "show a tqdm bar"})
  cli.parser.add_argument("--out", default=None,
                          help="output .npz (default results/ogbench_data/<env>.npz)")
  return cli


def main(argv: list[str] | None = None) -> dict:
  args, _, cfg = cli().parse(argv)
  args = argparse.Namespace(**{**vars(args), **cfg}, no_progress=not cfg["progress"])

  out = args.out or os.path.join("results", "ogbench_data", f"{args.env}.npz")
  n_val = args.num_val_episodes
  if n_val is None:
    n_val = max(1, args.num_episodes // 10)
  if n_val < 0:
    raise ValueError(f"--num-val-episodes must be >= 0, got {n_val}")

  # One stream for train + val, as OGBench's script collects them (val = the last episodes).
  data, stats = ogbench_data.generate(
    args.env, args.num_episodes + n_val, args.max_steps, args.seed,
    noise=args.noise, progress=not args.no_progress, return_stats=True,
  )
  steps_per_s = stats["steps"] / max(stats["seconds"], 1e-9)
  print(f"collected {stats['steps']} env steps in {stats['seconds']:.1f} s "
        f"({steps_per_s:,.0f} steps/s)")

  if n_val:
    train, val = ogbench_data.split_episodes(data, args.num_episodes)
    val_path = ogbench_data.save(out.replace(".npz", "-val.npz"), val)
  else:
    train, val_path = data, None
  path = ogbench_data.save(out, train)

  n_tr = args.num_episodes
  reached = stats["first_goal_step"][:n_tr] >= 0
  goals = stats["goals_reached"][:n_tr]
  rl = ogbench_data.load_dataset(path, task_id=1, dataset_name=args.env)
  summary = {
    "path": path,
    "val_path": val_path,
    "file_mb": os.path.getsize(path) / 2**20,
    "rows": int(train["terminals"].shape[0]),
    "transitions": int(rl["rewards"].shape[0]),
    "steps_per_s": steps_per_s,
    "first_goal_success_frac": float(reached.mean()),
    "first_goal_steps_median": float(np.median(stats["first_goal_step"][:n_tr][reached]))
    if reached.any() else float("nan"),
    "goals_per_episode": float(goals.mean()),
    "task1_reward0_frac": float((rl["rewards"] == 0).mean()),
  }
  print(f"wrote {path} ({summary['file_mb']:.2f} MiB, {summary['rows']} rows, "
        f"{args.num_episodes} episodes)" + (f" and {val_path} ({n_val} episodes)" if n_val else ""))
  print(f"oracle: first goal reached in {summary['first_goal_success_frac']:.1%} of episodes "
        f"(median {summary['first_goal_steps_median']:.0f} steps), "
        f"{summary['goals_per_episode']:.2f} goals reached per episode")
  print(f"loaded via ogbench: {summary['transitions']} transitions, obs dim "
        f"{rl['observations'].shape[1]}, task-1 reward 0 on {summary['task1_reward0_frac']:.2%}")
  return summary


if __name__ == "__main__":
  main()
