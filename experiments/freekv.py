"""FreeKV: speculative KV-page retrieval with correction vs exact selection, on a recall task.

    python -m experiments.freekv [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. a 2-layer transformer (RoPE) trained by next-token loss on the value positions of
   key-value recall rows (:mod:`jaxlab.data.kv_recall`: one-token dictionary entries
   scattered in filler, then ``queries`` keys each followed by its value), with a
   curriculum of growing contexts ending at the evaluation context (``curriculum``: one
   ``[context, pairs, steps, batch]`` per phase; fresh rows every step);
2. on ``eval_rows`` held-out rows at the evaluation context: the context is prefilled
   (dense), then the query section is decoded token by token (teacher-forced, one
   :func:`jaxlab.models.decoding.decode_step` per token) in each arm:

   * ``full``: dense attention over the whole cache (the library's default decode);
   * ``exact``: per-step page selection with the current query ``q_i``;
   * ``freekv``: pages selected with ``q_{i-1}`` (speculative), a group reselecting with
     ``q_i`` when the query cosine falls below ``tau`` (one arm per ``taus`` entry);
   * ``reuse``: pages selected with ``q_{i-1}``, never corrected;
   * ``tiny``: exact selection with only the sink and recent pages (``tiny_pages``): the
     control showing that recall needs the pages far back.

   Page size ``page_size``, budget ``budget`` tokens (sink and recent pages included),
   selection per head (``group_size`` 1: our model has as many KV heads as query heads).

Metrics on the value predictions: recall accuracy (greedy), KL(full || arm) of the
next-token distribution, the fraction of head-steps corrected (over every decode step
and layer) and of layer-steps whose selection ran on the critical path (some head
corrected). Decode time per token is measured by ``experiments/bench_freekv.py``.

The paper (arXiv:2505.13109; Llama-3.1-8B and others on LongBench and long generation)
finds FreeKV's accuracy close to exact per-step selection with few corrections, and
reuse without correction losing accuracy. Spec scale for a GPU: context 1024, page 16,
budget 128 (the full run's settings); the paper's own: page 32, budget 2048.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.data import kv_recall
from jaxlab.inference import freekv as fk
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.training import fit

CONFIGS = {
    "smoke": dict(seeds=1, d_model=32, heads=2, layers=2, lr=3e-3,
                  curriculum=[[48, 4, 4, 4]], context=48, pairs=4, queries=3,
                  eval_rows=2, page_size=16, budget=32, tiny_pages=2, sink_pages=1,
                  recent_pages=1, taus=[0.9], num_keys=8, num_values=8, num_filler=8),
    "quick": dict(seeds=1, d_model=64, heads=4, layers=2, lr=3e-3,
                  curriculum=[[8, 4, 200, 64], [32, 16, 100, 32], [128, 16, 40, 16],
                              [512, 16, 10, 8]],
                  context=512, pairs=16, queries=16, eval_rows=32, page_size=16, budget=64,
                  tiny_pages=2, sink_pages=1, recent_pages=1, taus=[0.5, 0.9], num_keys=16,
                  num_values=16, num_filler=16),
    "full": dict(seeds=3, d_model=64, heads=4, layers=2, lr=3e-3,
                 curriculum=[[8, 4, 300, 64], [32, 16, 200, 32], [128, 16, 100, 16],
                             [512, 16, 60, 8], [1024, 16, 40, 4]],
                 context=1024, pairs=16, queries=16, eval_rows=64, page_size=16, budget=128,
                 tiny_pages=2, sink_pages=1, recent_pages=1, taus=[0.0, 0.5, 0.8, 0.9],
                 num_keys=16,
                 num_values=16, num_filler=16),
}
WITHIN_ACC = 0.03  # "about equal" accuracy: within 3 points of exact selection
FEW = 0.5  # "few corrections": at most half the head-steps


def arm_names(cfg: dict) -> list[str]:
  return (["full", "exact"] + [f"freekv_{tau:g}" for tau in cfg["taus"]]
          + ["reuse", "tiny"])


def _data(cfg: dict, key, num: int, context: int, pairs: int):
  return kv_recall.kv_recall_rows(key, num, context=context, pairs=pairs,
                                  queries=min(cfg["queries"], pairs), num_keys=cfg["num_keys"],
                                  num_values=cfg["num_values"], num_filler=cfg["num_filler"])


def model_config(cfg: dict) -> tfm.TransformerConfig:
  vocab = kv_recall.vocab_size(cfg["num_keys"], cfg["num_values"], cfg["num_filler"])
  return tfm.TransformerConfig(vocab, cfg["d_model"], cfg["heads"], cfg["layers"],
                               2 + cfg["context"] + 2 * cfg["queries"])


def freekv_config(cfg: dict) -> fk.FreeKVConfig:
  return fk.FreeKVConfig(page_size=cfg["page_size"], budget=cfg["budget"],
                         sink_pages=cfg["sink_pages"], recent_pages=cfg["recent_pages"])


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, compiled once and shared by every seed."""
  mcfg = model_config(cfg)
  net = tfm.graph(mcfg)
  hook = fk.FreeKVAttention(freekv_config(cfg))

  def loss(p, batch, _):
    return tfm.next_token_loss(net.replace(params=p), batch.tokens, batch.loss_mask)

  @functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
  def phase(params, key, context, pairs, steps, batch):
    sample = lambda k, _: _data(cfg, k, batch, context, pairs)  # noqa: E731 (fresh rows)
    res = fit(loss, optax.adam(cfg["lr"]), params, key, num_steps=steps, sample=sample)
    return res.state.params, res.losses

  def train(key):
    k_init, *k_phases = jax.random.split(key, 1 + len(cfg["curriculum"]))
    params = tfm.create(mcfg, k_init).params
    losses = []
    for k, (context, pairs, steps, batch) in zip(k_phases, cfg["curriculum"], strict=True):
      params, l = phase(params, k, context, pairs, steps, batch)
      losses.append(float(np.mean(np.asarray(l)[-max(1, steps // 10):])))
    return params, losses

  rows_len = 2 + cfg["context"] + 2 * cfg["queries"]
  max_len = -(-rows_len // cfg["page_size"]) * cfg["page_size"]

  def split(rows):
    prompt_len = 2 + cfg["context"]
    return rows[:, :prompt_len], rows[:, prompt_len:]

  @jax.jit
  def decode_full(params, rows):
    m = net.replace(params=params)
    prompt, tail = split(rows)
    _, cache = decoding.prefill(m, prompt, max_len)

    def step(cache, tok):
      logits, cache = decoding.decode_step(m, tok[:, None], cache)
      return cache, logits

    return jax.lax.scan(step, cache, tail[:, :-1].T)[1]  # (steps, B, V)

  @jax.jit
  def decode_sparse(params, rows, tau, num_select):
    m = net.replace(params=params)
    prompt, tail = split(rows)
    _, cache, state = decoding.prefill(m, prompt, max_len, attend=hook)
    state = fk.with_knobs(state, tau=tau, num_select=num_select)

    def step(carry, tok):
      cache, state = carry
      logits, cache, state = decoding.decode_step(m, tok[:, None], cache, attend=hook,
                                                  attend_state=state)
      return (cache, state), (logits, state.corrected, state.attended, state.cosine)

    return jax.lax.scan(step, (cache, state), tail[:, :-1].T)[1]

  return {"train": train, "decode_full": decode_full, "decode_sparse": decode_sparse,
          "data": jax.jit(lambda k: _data(cfg, k, cfg["eval_rows"], cfg["context"],
                                          cfg["pairs"]).tokens)}


def arm_settings(cfg: dict) -> dict[str, tuple[float, int]]:
  """``arm -> (tau, pages attended)`` for the page-selected arms."""
  n = cfg["budget"] // cfg["page_size"]
  arms = {"exact": (math.inf, n)}
  arms.update({f"freekv_{tau:g}": (tau, n) for tau in cfg["taus"]})
  arms.update({"reuse": (-math.inf, n), "tiny": (math.inf, cfg["tiny_pages"])})
  return arms


def metrics(logits, full_logits, targets, corrected=None, attended=None, cosine=None) -> dict:
  """Accuracy and KL to full on the value predictions (even decode steps), corrections."""
  ans = slice(0, None, 2)  # step 2j feeds key j and predicts its value
  logp = jax.nn.log_softmax(logits[ans])
  logq = jax.nn.log_softmax(full_logits[ans])
  out = {"accuracy": float(jnp.mean(jnp.argmax(logits[ans], -1) == targets[ans])),
         "kl": float(jnp.mean(jnp.sum(jnp.exp(logq) * (logq - logp), -1)))}
  if corrected is not None:  # (steps, L, B, groups)
    c = np.asarray(corrected)
    out.update(corrected=float(c.mean()), corrected_at_keys=float(c[ans].mean()),
               corrected_elsewhere=float(c[1::2].mean()) if c.shape[0] > 1 else 0.0,
               critical_path=float(c.any(-1).mean()),
               pages_attended=float(np.asarray(attended).mean()),
               cosine=float(np.asarray(cosine).mean()),
               cosine_at_keys=float(np.asarray(cosine)[ans].mean()))
  return out


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_train, k_eval = jax.random.split(key)
  params, losses = prog["train"](k_train)
  rows = prog["data"](k_eval)
  targets = rows[:, 2 + cfg["context"] + 1:].T  # the token each decode step predicts
  full = prog["decode_full"](params, rows)
  arms = {"full": metrics(full, full, targets)}
  for name, (tau, n) in arm_settings(cfg).items():
    logits, *stats = prog["decode_sparse"](params, rows, jnp.float32(tau), jnp.int32(n))
    arms[name] = metrics(logits, full, targets, *stats)
  return {"seed": seed, "phase_losses": losses, "arms": arms}


def _per_seed(result: dict, arm: str, metric: str) -> np.ndarray:
  return np.array([r["arms"][arm][metric] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  0. The task needs long-range retrieval: full attention's recall is high (>= 0.9) and
     the tiny budget's (sink + recent pages) low (<= 0.5).
  1. FreeKV (the largest tau run) is about as accurate as exact per-step selection:
     within 3 points in mean accuracy and in every seed.
  2. FreeKV corrects few head-steps: at most half.
  3. Reuse without correction degrades: mean accuracy below FreeKV's by more than the
     3 points, and its KL to full attention higher, in every seed.
  """
  if not result["runs"]:
    return []
  n = len(result["runs"])
  taus = result["config"]["taus"]
  fkv = f"freekv_{max(taus):g}"
  acc = {a: _per_seed(result, a, "accuracy") for a in result["arms"]}
  kl = {a: _per_seed(result, a, "kl") for a in result["arms"]}
  corr = _per_seed(result, fkv, "corrected")
  rows = [Claim(
      "The task needs long-range retrieval (full attention recalls, sink + recent pages "
      "alone do not)",
      f"accuracy full {pm(acc['full'])}, tiny budget {pm(acc['tiny'])}",
      bool(acc["full"].mean() >= 0.9 and acc["tiny"].mean() <= 0.5))]
  gap = acc["exact"] - acc[fkv]
  rows.append(Claim(
      f"FreeKV (tau {max(taus):g}) is about as accurate as exact per-step selection",
      f"accuracy {pm(acc[fkv])} vs exact {pm(acc['exact'])} (KL to full {pm(kl[fkv], '.4f')} "
      f"vs {pm(kl['exact'], '.4f')}); within {100 * WITHIN_ACC:.0f} points in "
      f"{int(np.sum(np.abs(gap) <= WITHIN_ACC))}/{n} seeds",
      bool(abs(gap.mean()) <= WITHIN_ACC and np.all(np.abs(gap) <= WITHIN_ACC))))
  rows.append(Claim(
      "FreeKV corrects few head-steps",
      f"{pm(100 * corr, '.1f')}% of head-steps corrected (at the value predictions "
      f"{pm(100 * _per_seed(result, fkv, 'corrected_at_keys'), '.1f')}%; mean query cosine "
      f"{pm(_per_seed(result, fkv, 'cosine'), '.2f')}); threshold {100 * FEW:.0f}%",
      bool(corr.mean() <= FEW)))
  worse = (acc[fkv] - acc["reuse"] > WITHIN_ACC) & (kl["reuse"] > kl[fkv])
  rows.append(Claim(
      "Reuse without correction degrades",
      f"accuracy {pm(acc['reuse'])} vs FreeKV {pm(acc[fkv])}, KL to full "
      f"{pm(kl['reuse'], '.4f')} vs {pm(kl[fkv], '.4f')}; worse in {int(worse.sum())}/{n} "
      "seeds", bool(acc[fkv].mean() - acc["reuse"].mean() > WITHIN_ACC and np.all(worse))))
  return rows


TABLE_HEAD = ["arm", "pages attended", "recall accuracy", "KL to full",
              "head-steps corrected", "critical-path selections", "mean cos(q_i, q_i-1)"]


def table_rows(result: dict) -> list[list[str]]:
  rows = []
  for arm in result["arms"]:
    sparse = arm != "full"

    def cell(m, f=".3f", arm=arm, sparse=sparse):
      return pm(_per_seed(result, arm, m), f) if sparse else "-"

    pages = ("all" if not sparse else pm(_per_seed(result, arm, "pages_attended"), ".1f"))
    rows.append([arm, pages, pm(_per_seed(result, arm, "accuracy")),
                 pm(_per_seed(result, arm, "kl"), ".4f") if sparse else "0",
                 cell("corrected"), cell("critical_path"), cell("cosine", ".2f")])
  return rows


def plot(result: dict, out: str) -> list[str]:
  arms = result["arms"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  x = np.arange(len(arms))
  for ax, metric, label in ((axes[0], "accuracy", "recall accuracy"),
                            (axes[1], "kl", "KL(full || arm) at the values")):
    vals = np.array([_per_seed(result, a, metric) for a in arms])
    ax.bar(x, vals.mean(1), color=["C7", "C0", *["C2"] * (len(arms) - 4), "C3", "C1"],
           alpha=0.7)
    for s in range(vals.shape[1]):
      ax.plot(x, vals[:, s], "k.", ms=4)
    ax.set_xticks(x, arms, rotation=30, fontsize=8)
    ax.set(ylabel=label)
  c = result["config"]
  fig.suptitle(f"context {c['context']}, page {c['page_size']}, budget {c['budget']} tokens, "
               f"{len(result['runs'])} seed(s) (bars: mean, dots: seeds)")
  save_figure(fig, out, "freekv.png")
  return ["freekv.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/freekv",
                       quick_help="1 seed at context 512: the pipeline in about a minute",
                       helps={"curriculum": "training phases [context, pairs, steps, batch]",
                              "context": "evaluation context (the last phase's)",
                              "pairs": "entries in an evaluation context",
                              "queries": "keys asked per row (decoded)",
                              "budget": "tokens attended per head and step",
                              "tiny_pages": "pages of the tiny-budget control",
                              "taus": "FreeKV correction thresholds (one arm each)"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "freekv")
    return {"arms": arm_names(cfg), "runs": runs}

  return run_experiment(
      argv, cli(), "freekv", run, plot, _table,
      lambda r: (f"{r['config']['seeds']} seed(s), mean ± std over seeds; context "
                 f"{r['config']['context']}, page {r['config']['page_size']}, budget "
                 f"{r['config']['budget']} tokens."),
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/freekv.md


def _report(record: dict) -> str:
  c = record["config"]
  steps = sum(phase[2] for phase in c["curriculum"])
  contexts = ", ".join(P.thousands(phase[0]) for phase in c["curriculum"])
  return ("\n" + f"{c['layers']} layers d = {c['d_model']} ({c['heads']} heads), trained "
          f"{P.thousands(steps)} steps on contexts {contexts}; evaluated at context "
          f"{P.thousands(c['context'])} ({c['pairs']} entries, {c['queries']} queries decoded on "
          f"{c['eval_rows']} rows); page {c['page_size']}, budget {c['budget']} tokens; "
          f"{len(record['runs'])} seed(s), {P.seconds(record['wall_time_s'])}; mean ± std over "
          "seeds:\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("freekv", record) + "\n")


def page() -> dict[str, str]:
  from experiments import bench_freekv  # noqa: PLC0415

  out = P.quick_and_full("freekv", _report)
  bench = P.recorded("freekv", "bench")
  out["bench"] = (
      "\nThe benchmark (`python -m experiments.bench_freekv`) is not recorded yet.\n"
      if bench is None else
      f"\nRecord `docs/results/freekv/bench/` ({bench['backend']}, batch "
      f"{bench['config']['batch']}, page {bench['config']['page_size']}, budget "
      f"{bench['config']['budget']} tokens, median of {bench['config']['repeats']} "
      f"interleaved rounds of {bench['config']['inner']} calls; ratio = FreeKV / full, "
      "paired per round, min-max in brackets):\n\n" + bench_freekv.table(bench) + "\n")
  return out


if __name__ == "__main__":
  main()
