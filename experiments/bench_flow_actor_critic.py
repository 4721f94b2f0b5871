"""Training throughput of FAC: our scanned, seed-vmapped trainer vs a per-step Python loop.

    python -m experiments.bench_flow_actor_critic [--seeds 4] [--steps 1000] [--hidden 128 128]

Both run the same FAC actor-critic update (penalty on, same networks and batch
size) on the multi-goal point dataset:

* ``scan``: ``jaxlab.rl.train``'s chunk, ``jax.jit(jax.vmap(lax.scan(update)))``
  over seeds, batches sampled on device;
* ``loop``: how the FQL / FAC reference code trains: one jitted ``update`` per
  step called from Python, the batch sampled with numpy on the host and
  transferred, one seed after another.

Compilation is excluded (one warm-up call each). Prints seed-steps per second
and the ratio; writes ``results.json`` under ``--out``. Cheapest, to check that
it runs (about 25 s of CPU, nearly all compilation; the ratio means nothing):
``--seeds 1 --steps 20 --hidden 16 --batch-size 16``; a meaningful ratio in 1-2
minutes on 2 CPU cores: ``--steps 300``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import ExperimentCLI, Ratio, save_json
from jaxlab import envs
from jaxlab.core.rng import split_key_data as split
from jaxlab.rl.agents import FACAgent, FACConfig
from jaxlab.rl.train import Carry, check_dataset, sample_batch


def bench(seeds: int, steps: int, hidden: tuple[int, ...], batch_size: int) -> dict:
  data = check_dataset(envs.make_dataset(jax.random.key(0), 300))
  n = data["observations"].shape[0]
  cfg = FACConfig(hidden_dims=hidden, batch_size=batch_size, pretrain_steps=0)
  log_prob = jnp.asarray(np.random.default_rng(0).normal(-1.0, 0.5, n), jnp.float32)

  def init(key):
    k_agent, k_sampler = jax.random.split(key)
    agent = FACAgent.create(k_agent, data["observations"][:1], data["actions"][:1], cfg)
    return Carry(agent, jax.random.key_data(k_sampler), log_prob)

  def chunk(carry, data):
    def step(c, _):
      sampler, key = split(c.sampler, 2)
      agent, info = c.agent.update(sample_batch(data, c.log_prob, key, batch_size))
      return c._replace(agent=agent, sampler=sampler), info["critic/td_loss"]
    return jax.lax.scan(step, carry, None, length=steps)

  keys = jax.random.split(jax.random.key(1), seeds)
  carry = jax.jit(jax.vmap(init))(keys)
  run = jax.jit(jax.vmap(chunk, in_axes=(0, None)))
  jax.block_until_ready(run(carry, data))  # compile
  start = time.perf_counter()
  jax.block_until_ready(run(carry, data))
  scan_s = time.perf_counter() - start

  host = {k: np.asarray(v) for k, v in data.items()}
  host["log_prob"] = np.asarray(log_prob)
  update = jax.jit(FACAgent.update)
  rng = np.random.default_rng(0)

  def host_batch():
    idx = rng.integers(0, n, batch_size)
    return {k: v[idx] for k, v in host.items()}

  # each seed's agent, sliced on the host from the jitted init's (made op by op on the
  # device, by create or by slicing, every operation would compile on its own)
  on_host = jax.device_get(carry.agent)
  agents = [jax.device_put(jax.tree.map(lambda x, i=i: x[i], on_host)) for i in range(seeds)]
  jax.block_until_ready(update(agents[0], host_batch()))  # compile
  start = time.perf_counter()
  for agent in agents:
    for _ in range(steps):
      agent, info = update(agent, host_batch())
    jax.block_until_ready(info["critic/td_loss"])
  loop_s = time.perf_counter() - start
  scan_rate, loop_rate = seeds * steps / scan_s, seeds * steps / loop_s
  return {"seeds": seeds, "steps": steps, "hidden": list(hidden), "batch_size": batch_size,
          "scan_s": scan_s, "loop_s": loop_s, "scan_seed_steps_per_s": scan_rate,
          "loop_seed_steps_per_s": loop_rate, "ratio": scan_rate / loop_rate,
          "backend": jax.default_backend(), "jax": jax.__version__}


def ratios(result: dict) -> list[Ratio]:
  """``run_all``'s ratio from a ``results.json`` dict: our trainer's throughput over the loop's.

  Seed-steps per second of the scanned, seed-vmapped chunk divided by those of the
  per-step Python loop measured in the same run (> 1: ours is faster).
  """
  ratio = result["scan_seed_steps_per_s"] / result["loop_seed_steps_per_s"]
  hidden = "x".join(str(h) for h in result["hidden"])
  return [Ratio("FAC training seed-steps/s: scanned, seed-vmapped chunk vs per-step jitted "
                "update called from Python (the reference code's loop)", float(ratio),
                f"throughput ratio, > 1 is faster; {result['seeds']} seeds x {result['steps']} "
                f"steps, nets {hidden}, batch {result['batch_size']}, {result['backend']}",
                higher_is_better=True)]


CONFIGS = {"full": dict(seeds=4, steps=1000, hidden=[128, 128], batch_size=256)}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_flow_actor_critic")


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  args = argparse.Namespace(**{**vars(args), **cfg})
  for name in ("seeds", "steps", "batch_size"):
    if getattr(args, name) < 1:
      raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
  r = bench(args.seeds, args.steps, tuple(args.hidden), args.batch_size)
  print(f"backend={r['backend']} seeds={r['seeds']} steps={r['steps']} hidden={r['hidden']}")
  print(f"scan+vmap: {r['scan_seed_steps_per_s']:8.1f} seed-steps/s ({r['scan_s']:.1f} s)")
  print(f"py loop:   {r['loop_seed_steps_per_s']:8.1f} seed-steps/s ({r['loop_s']:.1f} s)")
  print(f"ratio (ours / per-step loop): {r['ratio']:.2f}x")
  os.makedirs(args.out, exist_ok=True)
  r = save_json(os.path.join(args.out, "results.json"), r, "bench_flow_actor_critic", argv)
  return r


if __name__ == "__main__":
  main()
