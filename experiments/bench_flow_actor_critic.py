"""Training throughput of FAC: our scanned, seed-vmapped trainer vs a per-step Python loop.

    python -m experiments.bench_flow_actor_critic [--seeds 4] [--steps 1000] [--hidden 128 128]

Both run the same FAC actor-critic update (penalty on, same networks and batch
size) on the multi-goal point dataset:

* ``scan``: ``jaxlab.rl.train``'s chunk, ``jax.jit(jax.vmap(lax.scan(update)))``
  over seeds, batches sampled on device;
* ``loop``: how the FQL / FAC reference code trains: one jitted ``update`` per
  step called from Python, the batch sampled with numpy on the host and
  transferred, one seed after another.

Compilation is excluded (one warm-up call each). ``--rounds R`` (default 5) times
both R times, alternating which goes first in a round so that drift in the machine's
load hits both alike. Reported: the median time of each path, their ratio
(``ratio``, seed-steps/s of ours over the loop's from the two medians), every round's
times and ratio, and the per-round ratios' min and max (``ratio_spread``).

``--profile-steps N`` (0: off) traces one scanned chunk of N steps with
``jax.profiler`` and splits the compiled ops' self time (time in an op, less the
ops nested in it, summed over threads) by the named scope the op was traced under:
``density`` (the behavior log-density of the actor's actions, the penalty's
weight), ``distillation`` (the frozen flow's Euler samples the actor is
distilled to), ``sampling`` (the batch gather), ``loop control`` (the scan's
``while`` and its bookkeeping) and ``critic+actor+Adam`` (everything else: the
critic, the actor, their gradients, Adam and the Polyak update). The shares are of
summed op time, not of wall time (ops on separate threads overlap); the traced
chunk's wall time is recorded next to the untraced one. An op XLA fused across
scopes counts for the scope of the fusion's root.

Prints seed-steps per second and the ratio; writes ``results.json`` under
``--out``. Cheapest, to check that it runs (about 25 s of CPU, nearly all
compilation; the ratio means nothing): ``--seeds 1 --steps 20 --hidden 16
--batch-size 16 --rounds 1 --profile-steps 0``; a meaningful ratio in a few minutes
on 2 CPU cores: ``--steps 300``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.cli import ExperimentCLI
from experiments.records import save_json
from experiments.reporting import Ratio
from experiments.timing import trace_self_times
from jaxlab import envs
from jaxlab.core.rng import split_key_data as split
from jaxlab.rl.agents import FACAgent, FACConfig
from jaxlab.rl.train import Carry, check_dataset, sample_batch


def bench(seeds: int, steps: int, hidden: tuple[int, ...], batch_size: int, rounds: int = 5,
          profile_steps: int = 0) -> dict:
  data = check_dataset(envs.make_dataset(jax.random.key(0), 300))
  n = data["observations"].shape[0]
  cfg = FACConfig(hidden_dims=hidden, batch_size=batch_size, pretrain_steps=0)
  log_prob = jnp.asarray(np.random.default_rng(0).normal(-1.0, 0.5, n), jnp.float32)

  def init(key):
    k_agent, k_sampler = jax.random.split(key)
    agent = FACAgent.create(k_agent, data["observations"][:1], data["actions"][:1], cfg)
    return Carry(agent, jax.random.key_data(k_sampler), log_prob)

  def chunk(carry, data, length):
    def step(c, _):
      sampler, key = split(c.sampler, 2)
      with jax.named_scope("sampling"):
        batch = sample_batch(data, c.log_prob, key, batch_size)
      agent, info = c.agent.update(batch)
      return c._replace(agent=agent, sampler=sampler), info["critic/td_loss"]
    return jax.lax.scan(step, carry, None, length=length)

  chunks = {}

  def scanned(length: int):  # one compiled chunk per length (the profile may reuse the timed one)
    if length not in chunks:
      chunks[length] = jax.jit(jax.vmap(lambda c, d: chunk(c, d, length), in_axes=(0, None)))
    return chunks[length]

  keys = jax.random.split(jax.random.key(1), seeds)
  carry = jax.jit(jax.vmap(init))(keys)
  run = scanned(steps)
  jax.block_until_ready(run(carry, data))  # compile

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

  def time_scan() -> float:
    start = time.perf_counter()
    jax.block_until_ready(run(carry, data))
    return time.perf_counter() - start

  def time_loop() -> float:
    start = time.perf_counter()
    for agent in agents:
      for _ in range(steps):
        agent, info = update(agent, host_batch())
      jax.block_until_ready(info["critic/td_loss"])
    return time.perf_counter() - start

  scan_rounds, loop_rounds = [], []
  for r in range(rounds):  # alternate the order: load drift hits both paths alike
    if r % 2 == 0:
      scan_rounds.append(time_scan())
      loop_rounds.append(time_loop())
    else:
      loop_rounds.append(time_loop())
      scan_rounds.append(time_scan())
  ratio_rounds = [lo / sc for sc, lo in zip(scan_rounds, loop_rounds, strict=True)]
  scan_s, loop_s = float(np.median(scan_rounds)), float(np.median(loop_rounds))
  scan_rate, loop_rate = seeds * steps / scan_s, seeds * steps / loop_s
  result = {"seeds": seeds, "steps": steps, "hidden": list(hidden), "batch_size": batch_size,
            "rounds": rounds, "scan_s": scan_s, "loop_s": loop_s,
            "scan_s_rounds": scan_rounds, "loop_s_rounds": loop_rounds,
            "scan_seed_steps_per_s": scan_rate, "loop_seed_steps_per_s": loop_rate,
            "ratio": scan_rate / loop_rate, "ratio_rounds": ratio_rounds,
            "ratio_spread": [min(ratio_rounds), max(ratio_rounds)],
            "backend": jax.default_backend(), "jax": jax.__version__}
  if profile_steps > 0:
    result["profile"] = profile_chunk(scanned(profile_steps), carry, data, seeds, profile_steps)
  return result


PARTS = ("density", "distillation", "sampling")  # named scopes; the rest: critic+actor+Adam
_CONTROL = ("while", "conditional", "call")


def _scope(op_name: str) -> str:
  """The part an op belongs to, from its ``op_name`` (the name stack it was traced under)."""
  for part in PARTS:
    if re.search(rf"(^|[/(]){part}([/)]|$)", op_name):
      return part
  return "critic+actor+Adam"


def _op_parts(compiled_text: str) -> dict[str, str]:
  """HLO instruction name -> part, for every instruction of a compiled module's text."""
  parts = {}
  for line in compiled_text.splitlines():
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \S+ ([\w\-]+)\(", line)
    if not m:
      continue
    name, opcode = m.groups()
    if opcode in _CONTROL:
      parts[name] = "loop control"
      continue
    meta = re.search(r'op_name="([^"]*)"', line)
    parts[name] = _scope(meta.group(1)) if meta else "critic+actor+Adam"
  return parts


def profile_chunk(run, carry, data, seeds: int, steps: int) -> dict:
  """Traces one call of the compiled chunk ``run`` (``steps`` steps) and splits its op time."""
  compiled = run.lower(carry, data).compile()
  jax.block_until_ready(compiled(carry, data))  # warm
  start = time.perf_counter()
  jax.block_until_ready(compiled(carry, data))
  untraced = time.perf_counter() - start
  folder = tempfile.mkdtemp(prefix="jaxlab-trace-")
  try:
    with jax.profiler.trace(folder, create_perfetto_trace=True):
      start = time.perf_counter()
      jax.block_until_ready(compiled(carry, data))
      traced = time.perf_counter() - start
    files = glob.glob(os.path.join(folder, "**", "*perfetto_trace.json.gz"), recursive=True)
    with gzip.open(files[0]) as f:
      events = json.load(f)
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  events = events["traceEvents"] if isinstance(events, dict) else events
  parts = _op_parts(compiled.as_text())
  self_us, _ = trace_self_times(events, key=lambda e: (e.get("args") or {}).get("hlo_op"))
  by_part = collections.Counter()
  for op, us in self_us.items():
    by_part[parts.get(op, "loop control" if op.split(".")[0] in _CONTROL else "unattributed")] += us
  total = sum(by_part.values())
  share = {k: v / total for k, v in sorted(by_part.items(), key=lambda kv: -kv[1])} if total else {}
  out = {"steps": steps, "seeds": seeds, "untraced_s": untraced, "traced_s": traced,
         "op_time_s": total / 1e6, "op_time_per_step_ms": total / 1e3 / steps, "share": share}
  if not total:  # checked on CPU only: other runtimes may name their trace events otherwise
    out["note"] = "no trace event named an HLO op (args.hlo_op): nothing to split"
  return out


def ratios(result: dict) -> list[Ratio]:
  """``run_all``'s ratio from a ``results.json`` dict: our trainer's throughput over the loop's.

  Seed-steps per second of the scanned, seed-vmapped chunk divided by those of the
  per-step Python loop measured in the same run (> 1: ours is faster); with rounds, of
  the median times, the per-round ratios' range in the note.
  """
  ratio = result["scan_seed_steps_per_s"] / result["loop_seed_steps_per_s"]
  hidden = "x".join(str(h) for h in result["hidden"])
  return [Ratio("FAC training seed-steps/s: scanned, seed-vmapped chunk vs per-step jitted "
                "update called from Python (the reference code's loop)", float(ratio),
                f"throughput ratio, > 1 is faster; {result['seeds']} seeds x {result['steps']} "
                f"steps, nets {hidden}, batch {result['batch_size']}, {result['backend']}"
                + (f", median times of {result['rounds']} rounds (per-round ratios "
                   f"{result['ratio_spread'][0]:.2f}-{result['ratio_spread'][1]:.2f})"
                   if "ratio_rounds" in result else ""),
                higher_is_better=True)]


CONFIGS = {"full": dict(seeds=4, steps=1000, hidden=[128, 128], batch_size=256, rounds=5,
                        profile_steps=100)}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_flow_actor_critic")


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  args = argparse.Namespace(**{**vars(args), **cfg})
  for name in ("seeds", "steps", "batch_size", "rounds"):
    if getattr(args, name) < 1:
      raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
  if args.profile_steps < 0:
    raise ValueError(f"--profile-steps must be >= 0 (0: no profile), got {args.profile_steps}")
  r = bench(args.seeds, args.steps, tuple(args.hidden), args.batch_size, args.rounds,
            args.profile_steps)
  print(f"backend={r['backend']} seeds={r['seeds']} steps={r['steps']} hidden={r['hidden']} "
        f"rounds={r['rounds']} (medians)")
  print(f"scan+vmap: {r['scan_seed_steps_per_s']:8.1f} seed-steps/s ({r['scan_s']:.2f} s)")
  print(f"py loop:   {r['loop_seed_steps_per_s']:8.1f} seed-steps/s ({r['loop_s']:.2f} s)")
  lo, hi = r["ratio_spread"]
  print(f"ratio (ours / per-step loop): {r['ratio']:.2f}x (rounds {lo:.2f}-{hi:.2f}x)")
  if "profile" in r and "note" in r["profile"]:
    print(f"profile: {r['profile']['note']}")
  elif "profile" in r:
    p = r["profile"]
    print(f"profile of one {p['steps']}-step chunk ({p['op_time_per_step_ms']:.2f} ms of op time "
          f"per step, {p['seeds']} seeds): " + ", ".join(
              f"{k} {v:.0%}" for k, v in p["share"].items()))
  os.makedirs(args.out, exist_ok=True)
  r = save_json(os.path.join(args.out, "results.json"), r, "bench_flow_actor_critic", argv)
  return r


if __name__ == "__main__":
  main()
