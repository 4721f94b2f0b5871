"""Vmapped environment throughput: PointMaze and PointPush next to gymnax's PointRobot.

    python -m experiments.bench_envs [--envs 1000] [--steps 1000] [--out DIR]

Each environment steps ``--envs`` copies with uniform random actions inside one
jitted ``lax.scan`` of ``--steps`` steps (gymnax's ``step`` with its automatic
reset, observations carried), compilation excluded. Prints steps per second
and the ratio to PointRobot-misc measured in the same run (targets from issue
5: PointMaze >= 0.5x, PointPush >= 0.3x); writes ``results.json`` under ``--out``.
Cheapest, to check that it runs (about 15 s of CPU, the ratios are noise):
``--envs 64 --steps 50``; the defaults give stable ratios in under a minute.
"""

from __future__ import annotations

import os
import time

import gymnax
import jax
import jax.numpy as jnp

from experiments.cli import ExperimentCLI
from experiments.records import save_json
from experiments.reporting import Ratio
from jaxlab.envs import PointMaze, PointPush

ANCHOR = "PointRobot-misc"
TARGETS = {"PointMaze": 0.5, "PointPush": 0.3}  # issue 5's minimum ratios to the anchor


def steps_per_second(env, params, num_envs: int, num_steps: int) -> float:
  def run(key):
    obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, num_envs), params)

    def step(carry, key):
      obs, state, total = carry
      k_act, k_step = jax.random.split(key)
      action = jax.random.uniform(k_act, (num_envs, 2), minval=-1.0, maxval=1.0)
      obs, state, reward, *_ = jax.vmap(env.step, (0, 0, 0, None))(
          jax.random.split(k_step, num_envs), state, action, params)
      return (obs, state, total + reward.sum() + 0.0 * obs.sum()), None

    (obs, _, total), _ = jax.lax.scan(step, (obs, state, jnp.zeros(())),
                                      jax.random.split(key, num_steps))
    return total

  fn = jax.jit(run)
  jax.block_until_ready(fn(jax.random.key(0)))
  start = time.perf_counter()
  jax.block_until_ready(fn(jax.random.key(1)))
  return num_envs * num_steps / (time.perf_counter() - start)


def ratios(result: dict) -> list[Ratio]:
  """``run_all``'s ratios from a ``results.json`` dict, one per environment of ours.

  Each is that environment's vmapped steps per second over gymnax's PointRobot-misc
  measured in the same run (> 1: ours is faster).
  """
  rates = result["steps_per_s"]
  size = f"{result['envs']} envs x {result['steps']} steps, {result['backend']}"
  rows = []
  for name, rate in rates.items():
    if name == ANCHOR:
      continue
    note = f"throughput ratio, > 1 is faster; {size}"
    if name in TARGETS:
      note += f"; target >= {TARGETS[name]}x"
    if "grid" in name:
      note += "; PIPER's 121-cell wall map as the observation"
    rows.append(Ratio(f"{name} steps/s vs gymnax {ANCHOR}", float(rate / rates[ANCHOR]), note,
                      higher_is_better=True))
  return rows


CONFIGS = {"full": dict(envs=1000, steps=1000)}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_envs",
                       helps={"envs": "vmapped environments", "steps": "steps per environment"})


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  args.envs, args.steps = cfg["envs"], cfg["steps"]
  if args.envs < 1 or args.steps < 1:
    raise ValueError(f"--envs and --steps must be >= 1, got {args.envs}, {args.steps}")
  robot, robot_params = gymnax.make(ANCHOR)
  rows = {ANCHOR: steps_per_second(robot, robot_params, args.envs, args.steps)}
  for env in (PointMaze(), PointPush()):
    rows[env.name] = steps_per_second(env, env.default_params, args.envs, args.steps)
  maze = PointMaze()  # PIPER's observation: the 121-cell wall map
  rows["PointMaze (grid obs)"] = steps_per_second(
      maze, maze.default_params.replace(wall_obs="grid"), args.envs, args.steps)
  base = rows[ANCHOR]
  print(f"backend={jax.default_backend()} envs={args.envs} steps={args.steps}")
  for name, rate in rows.items():
    print(f"{name:22s} {rate / 1e6:7.2f} M steps/s  ratio {rate / base:5.2f}")
  result = {"envs": args.envs, "steps": args.steps, "steps_per_s": rows,
            "ratio_to_point_robot": {k: v / base for k, v in rows.items()},
            "backend": jax.default_backend(), "jax": jax.__version__}
  os.makedirs(args.out, exist_ok=True)
  result = save_json(os.path.join(args.out, "results.json"), result, "bench_envs", argv)
  return result


if __name__ == "__main__":
  main()
