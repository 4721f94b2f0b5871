"""Decode time per token of FreeKV's page-selected attention against full attention over
the same KV cache, at 1k / 4k / 16k tokens.

    python -m experiments.bench_freekv [--contexts 1024 4096 16384] [--repeats R] [--out DIR]

The model is the recall experiment's (``experiments/freekv.py``: 2 layers, d = 64, 4
heads) with random weights, and the cache is filled with random keys and values: beyond
the training length only time is meaningful. Two timings per context, each FreeKV arm
against full attention in the same interleaved rounds (paired ratios; the median and the
rounds' min-max are reported):

1. ``attention``: one layer's attention for one new token: ``transformer.attention``
   over the whole cache (masked to the filled length) vs :func:`jaxlab.inference.freekv.
   freekv_step` (summary update, page scoring and selection, attention over ``budget``
   tokens);
2. ``decode step``: the whole model's :func:`jaxlab.models.decoding.decode_step` (the
   cache donated, so its update is in place) without and with the FreeKV hook.

FreeKV runs in its two extremes: ``reuse`` (no head corrected: one selection, with the
previous query) and ``corrected`` (every head corrected: the speculative selection and a
second one with the current query; random queries have cosine near 0, so ``tau`` 0.9
gives this case).

What is timed, and what is not: the paper's speed-up comes from hiding the recall of
offloaded KV pages (CPU to GPU) behind compute. Here the cache is in memory on one CPU,
nothing is offloaded or recalled, and no work runs in the background: only the compute
of sparse attention (with its selection) against dense attention is timed.
"""

from __future__ import annotations

import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments.cli import ExperimentCLI
from experiments.records import machine, write_results
from experiments.reporting import Ratio
from experiments.timing import time_interleaved
from jaxlab.data import kv_recall
from jaxlab.inference import freekv as fk
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

CONFIGS = {
    "full": dict(contexts=[1024, 4096, 16384], d_model=64, heads=4, layers=2, batch=1,
                 page_size=16, budget=128, repeats=7, inner=20),
    "quick": dict(contexts=[1024, 4096, 16384], d_model=64, heads=4, layers=2, batch=1,
                  page_size=16, budget=128, repeats=3, inner=10),
    "smoke": dict(contexts=[64], d_model=32, heads=2, layers=1, batch=1, page_size=16,
                  budget=32, repeats=1, inner=1),
}
ARMS = {"reuse": -math.inf, "corrected": math.inf}  # tau of each extreme


def _summary_state(cfg, k, position, key, tau):
  """A layer's FreeKV state over cache keys ``k (B, S, H, D)``: random previous query."""
  b, _, h, d = k.shape
  kmax, kmin = fk.page_summaries(k, position, cfg.page_size)
  return fk.FreeKVState(jax.random.normal(key, (b, h, d)), kmax, kmin, jnp.float32(tau),
                        jnp.int32(cfg.num_select), jnp.zeros((b, h), bool),
                        jnp.zeros((b, h), jnp.int32), jnp.zeros((b, h)))


def bench_context(c: dict, s: int, key) -> dict:
  """Both timings at cache size ``s``."""
  mcfg = tfm.TransformerConfig(kv_recall.vocab_size(16, 16, 16), c["d_model"], c["heads"],
                               c["layers"], s)
  fcfg = fk.FreeKVConfig(page_size=c["page_size"], budget=c["budget"])
  hook = fk.FreeKVAttention(fcfg)
  b, h, d, layers = c["batch"], c["heads"], c["d_model"] // c["heads"], c["layers"]
  calls = c["repeats"] * c["inner"] + 2
  start = s - calls - 1  # room for every timed call to write one token
  k_q, k_k, k_v, k_p, k_m = jax.random.split(key, 5)
  kc = jax.random.normal(k_k, (layers, b, s, h, d))
  vc = jax.random.normal(k_v, (layers, b, s, h, d))
  q0 = jax.random.normal(k_q, (b, h, d))

  # 1. one layer's attention for one new token at a fixed position
  pos = jnp.int32(start)
  mask = (jnp.arange(s) <= start)[None, :]
  dense = jax.jit(lambda q, k, v: tfm.attention(q[:, None], k, v, mask=mask)[:, 0])
  sparse = jax.jit(lambda q, st, k, v: fk.freekv_step(fcfg, q, k, v, pos, st))
  k1, v1 = kc[0], vc[0]
  cases = {"full": (lambda q: (dense(q, k1, v1),), (q0,))}
  for arm, tau in ARMS.items():
    st = _summary_state(fcfg, k1, pos, k_p, tau)
    cases[arm] = (lambda q, st: sparse(q, st, k1, v1), (q0, st))
  attn = time_interleaved(cases, c["repeats"], c["inner"])

  # 2. the whole decode step, the cache donated (updated in place)
  net = Net.create(tfm.Transformer(mcfg, rngs=nnx.Rngs(params=k_m)))
  full_step = jax.jit(lambda cache, tok: _chain(decoding.decode_step(net, tok, cache)),
                      donate_argnums=0)
  hook_step = jax.jit(lambda cache, st, tok: _chain(decoding.decode_step(
      net, tok, cache, attend=hook, attend_state=st)), donate_argnums=0)
  tok = jnp.zeros((b, 1), jnp.int32)

  def cache():  # a fresh copy per case: each case's calls donate and grow their own
    return tfm.KVCache(kc + 0, vc + 0, jnp.int32(start))

  cases = {"full": (full_step, (cache(), tok))}
  for arm, tau in ARMS.items():
    st = jax.vmap(lambda k, tau=tau: _summary_state(fcfg, k, jnp.int32(start), k_p, tau))(kc)
    cases[arm] = (hook_step, (cache(), st, tok))
  step = _time_chained(cases, c["repeats"], c["inner"])
  return {"context": s, "attention": attn, "decode_step": step}


def _time_chained(cases: dict, repeats: int, inner: int) -> dict[str, list[float]]:
  """:func:`experiments.timing.time_interleaved` for functions that donate their arguments:
  the compiling call's outputs are the first timed call's arguments (the originals are
  gone), and each call's outputs the next's."""
  state = {name: jax.block_until_ready(fn(*args)) for name, (fn, args) in cases.items()}
  times = {name: [] for name in cases}
  for _ in range(repeats):
    for name, (fn, _) in cases.items():
      start = time.perf_counter()
      out = state[name]
      for _ in range(inner):
        out = fn(*out)
      state[name] = jax.block_until_ready(out)
      times[name].append((time.perf_counter() - start) / inner)
  return times


def _chain(out):
  """``decode_step``'s outputs as the next call's arguments (the greedy token fed back)."""
  logits, *rest = out
  return (*rest, jnp.argmax(logits, -1)[:, None].astype(jnp.int32))


def summarize(times: dict) -> dict:
  """Median seconds per call of each case, and each FreeKV arm's paired ratio to full."""
  full = np.array(times["full"])
  out = {"full_s": float(np.median(full))}
  for arm in ARMS:
    r = np.array(times[arm]) / full
    out[f"{arm}_s"] = float(np.median(times[arm]))
    out[f"{arm}_ratio"] = float(np.median(r))
    out[f"{arm}_ratio_range"] = [float(r.min()), float(r.max())]
  return out


def ratios(result: dict) -> list[Ratio]:
  """FreeKV's time over full attention's per context and arm (< 1: FreeKV faster)."""
  rows = []
  for ctx in result["contexts"]:
    for level, label in (("attention", "one layer's attention"), ("decode_step", "decode step")):
      sm = ctx[level]
      for arm in ARMS:
        rows.append(Ratio(f"{label} at {ctx['context']} tokens, FreeKV ({arm}) vs full",
                          sm[f"{arm}_ratio"],
                          f"{1e6 * sm[f'{arm}_s']:.0f} vs {1e6 * sm['full_s']:.0f} us; "
                          f"budget {result['config']['budget']} tokens"))
  return rows


TIMING_NOTE = ("The paper's speed-up comes from hiding the recall of offloaded KV pages "
               "behind compute; here the cache is in memory on one CPU and only the "
               "sparse-attention compute (with page selection) is timed against dense "
               "attention.")


def table(result: dict) -> str:
  lines = ["| context | timing | full (us) | FreeKV reuse (us) | ratio | FreeKV corrected (us) "
           "| ratio |", "|---|---|---|---|---|---|---|"]
  for ctx in result["contexts"]:
    for level in ("attention", "decode_step"):
      sm = ctx[level]
      cells = [f"{1e6 * sm['full_s']:.0f}"]
      for arm in ARMS:
        lo, hi = sm[f"{arm}_ratio_range"]
        cells += [f"{1e6 * sm[f'{arm}_s']:.0f}", f"{sm[f'{arm}_ratio']:.2f} ({lo:.2f}-{hi:.2f})"]
      lines.append(f"| {ctx['context']:,} | {level.replace('_', ' ')} | " + " | ".join(cells)
                   + " |")
  return "\n".join(lines) + "\n\n" + TIMING_NOTE


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_freekv",
                       quick_help="fewer timing rounds",
                       helps={"contexts": "cache sizes timed", "budget": "FreeKV tokens",
                              "repeats": "interleaved timing rounds",
                              "inner": "calls per round"})


def main(argv=None) -> dict:
  args, scale, cfg = cli().parse(argv)
  os.makedirs(args.out, exist_ok=True)
  start = time.time()
  keys = jax.random.split(jax.random.key(0), len(cfg["contexts"]))
  contexts = []
  for s, key in zip(cfg["contexts"], keys, strict=True):
    raw = bench_context(cfg, s, key)
    contexts.append({"context": s, "attention": summarize(raw["attention"]),
                     "decode_step": summarize(raw["decode_step"]),
                     "rounds": {k: raw[k] for k in ("attention", "decode_step")}})
  result = {"scale": scale, "config": cfg, "contexts": contexts, "backend":
            jax.default_backend(), "wall_time_s": time.time() - start, "machine": machine()}
  write_results(args.out, "bench_freekv", result, table(result),
                f"Median of {cfg['repeats']} interleaved rounds of {cfg['inner']} calls "
                "(ratio: paired per round, min-max in brackets); batch "
                f"{cfg['batch']}, page {cfg['page_size']}, budget {cfg['budget']} tokens, "
                f"backend {jax.default_backend()}.", argv=argv)
  return result


if __name__ == "__main__":
  main()
