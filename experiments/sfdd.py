"""SFDD: a speculative draft trained on the target's flattest samples vs other subsets.

    python -m experiments.sfdd [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. a corpus of rows ``BOS [m_1 s s ..] [m_2 s s ..] ..``: ``segments`` segments, each a
   marker token ``m`` naming its temperature ``T in {0.3, 1, 2}`` (drawn per segment)
   and ``seg_len - 1`` symbols of one sparse Markov chain tempered to ``P^(1/T)``, so
   rows mix peaked and flat stretches and their mean flatness varies;
2. a target transformer trained on it by next-token loss, then sampled (temperature 1)
   from ``BOS`` for the draft's training rows and held-out rows (target samples);
3. seven draft arms, each a 1-layer transformer from the same initialization, trained by
   forward KL ``-sum_v p(v) log q(v)`` to the target's distributions on a subset of the
   training rows for ``epochs`` epochs of that subset (``jaxlab.lm.sfdd``): full; random,
   flattest (SFDD), highest-entropy and lowest-top-1 at 50%; flattest at 30% and 70%.
   The arms are one vmapped program (subset masks and step counts traced);
4. on held-out target samples: the exact acceptance rate ``alpha = mean_t sum_v min(p, q)``
   and simulated speculative sampling with ``gamma = 5`` from ``BOS`` on the first
   ``spec_rows`` of them (tau = tokens per target call).

The paper (Llama-3 8B target, EAGLE-2 drafts) finds SFDD at 50% retain within ~3% of the
full data's speedup and above random and the other selectors. Risks it names: with a
small vocabulary flatness ranks samples almost like entropy (we report the rank
correlation), and a small draft may underfit the dropped peaked tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.data import lm_tasks as lt
from jaxlab.data.markov_text import sample_sequences, sparse_chain
from jaxlab.lm import sfdd
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.training import fit, minibatch_sampler

TEMPERATURES = (0.3, 1.0, 2.0)
MARKER = lt.FIRST_SYMBOL  # ids MARKER + i name temperature i; symbols follow
SYMBOL = MARKER + len(TEMPERATURES)
# (name, selector kind, retain ratio)
ARMS = (("full", "flatness", 1.0), ("random_50", "random", 0.5), ("sfdd_50", "flatness", 0.5),
        ("entropy_50", "entropy", 0.5), ("sfdd_30", "flatness", 0.3),
        ("sfdd_70", "flatness", 0.7), ("top1_50", "top1", 0.5))
ARM_NAMES = tuple(a[0] for a in ARMS)
GAMMA = 5
WITHIN = 0.03  # "within a few %" of full, relative on tau

CONFIGS = {
    "smoke": dict(seeds=1, symbols=8, branching=4, segments=2, seg_len=4, corpus=128,
                  target_layers=1, target_d=16, target_heads=2, target_steps=20,
                  samples=32, test=8, spec_rows=8, draft_d=16, draft_heads=2, epochs=1, batch=8,
                  target_lr=3e-3, draft_lr=3e-3),
    "quick": dict(seeds=2, symbols=24, branching=6, segments=4, seg_len=12, corpus=2048,
                  target_layers=2, target_d=64, target_heads=2, target_steps=300,
                  samples=512, test=64, spec_rows=64, draft_d=32, draft_heads=2, epochs=6, batch=32,
                  target_lr=3e-3, draft_lr=3e-3),
    "full": dict(seeds=3, symbols=32, branching=6, segments=4, seg_len=16, corpus=8192,
                 target_layers=2, target_d=128, target_heads=4, target_steps=1500,
                 samples=4096, test=128, spec_rows=64, draft_d=64, draft_heads=2, epochs=20,
                 batch=32, target_lr=1e-3, draft_lr=1e-3),
}


def corpus(key: jax.Array, chain: jax.Array, num: int, segments: int, seg_len: int
           ) -> tuple[jax.Array, jax.Array]:
  """``num`` rows ``BOS`` + ``segments`` x (marker, ``seg_len - 1`` symbols) and each
  segment's temperature index ``(num, segments)``."""
  k_t, k_s = jax.random.split(key)
  temps = jax.random.randint(k_t, (num, segments), 0, len(TEMPERATURES))
  tempered = jnp.stack([jnp.where(chain > 0, chain ** (1 / t), 0.0) for t in TEMPERATURES])
  tempered = tempered / tempered.sum(-1, keepdims=True)
  segs = jnp.stack([sample_sequences(k, c, num * segments, seg_len - 1)
                    for k, c in zip(jax.random.split(k_s, len(TEMPERATURES)), tempered,
                                    strict=True)])  # (3, num * segments, seg_len - 1)
  segs = jnp.take_along_axis(segs, temps.reshape(1, -1, 1), 0)[0]
  body = jnp.concatenate([MARKER + temps.reshape(-1, 1), SYMBOL + segs], 1)
  tokens = jnp.concatenate([jnp.full((num, 1), lt.BOS), body.reshape(num, -1)], 1)
  return tokens.astype(jnp.int32), temps


def _configs(cfg: dict) -> tuple[tfm.TransformerConfig, tfm.TransformerConfig]:
  vocab = SYMBOL + cfg["symbols"]
  # room for BOS + the row + gamma scratch slots of speculative decoding (learned positions)
  seq = 1 + cfg["segments"] * cfg["seg_len"] + GAMMA
  target = tfm.TransformerConfig(vocab, cfg["target_d"], cfg["target_heads"],
                                 cfg["target_layers"], seq, positions="learned")
  draft = tfm.TransformerConfig(vocab, cfg["draft_d"], cfg["draft_heads"], 1, seq,
                                positions="learned")
  return target, draft


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, compiled once and shared by every seed."""
  target_cfg, draft_cfg = _configs(cfg)
  # the graphs from abstract modules; parameters are initialized inside the programs
  target_net, draft_net = tfm.graph(target_cfg), tfm.graph(draft_cfg)
  seq = cfg["segments"] * cfg["seg_len"]  # tokens after BOS
  per_epoch_max = -(-cfg["samples"] // cfg["batch"])
  num_steps = cfg["epochs"] * per_epoch_max

  @jax.jit
  def train_target(key, tokens):
    k_init, k_fit = jax.random.split(key)
    params = tfm.create(target_cfg, k_init).params
    loss = lambda p, batch, _: tfm.next_token_loss(target_net.replace(params=p), batch)  # noqa: E731
    res = fit(loss, optax.adam(cfg["target_lr"]), params, k_fit, num_steps=cfg["target_steps"],
              sample=minibatch_sampler(tokens, cfg["batch"]))
    return res.state.params, res.losses

  @jax.jit
  def data(key):
    k_chain, k_corpus = jax.random.split(key)
    chain = sparse_chain(k_chain, cfg["symbols"], cfg["branching"])
    return corpus(k_corpus, chain, cfg["corpus"], cfg["segments"], cfg["seg_len"])[0]

  @jax.jit
  def target_samples(params, key):
    """Training and held-out rows sampled from the target, with its distributions on them."""
    n = cfg["samples"] + cfg["test"]
    prompt = jnp.full((n, 1), lt.BOS, jnp.int32)
    gen = decoding.generate(target_net.replace(params=params), prompt, key, seq, temperature=1.0)
    rows = jnp.concatenate([prompt, gen.tokens], 1)
    probs = jax.nn.softmax(target_net.replace(params=params)(rows[:, :-1]))
    m = cfg["samples"]
    return rows[:m], probs[:m], rows[m:], probs[m:]

  @jax.jit
  def select(probs, key):
    """Every arm's kept rows ``(A, N)`` and the flatness / entropy / top-1 scores."""
    scores = {kind: sfdd.sample_scores(probs, None, kind, key=key) for kind in sfdd.KINDS}
    keeps = jnp.stack([sfdd.keep_lowest(scores[kind], r) for _, kind, r in ARMS])
    return keeps, scores

  @jax.jit
  def train_drafts(key, rows, probs, keeps):
    k_init, k_order = jax.random.split(key)
    init = tfm.create(draft_cfg, k_init).params  # one initialization for every arm

    def one(keep):
      sample, per_epoch = sfdd.subset_epochs(k_order, keep, cfg["batch"])
      limit = cfg["epochs"] * per_epoch  # the same epochs in every arm: fewer steps when smaller
      opt = optax.conditionally_mask(
          optax.chain(optax.clip_by_global_norm(0.5),
                      optax.adamw(cfg["draft_lr"], b1=0.9, b2=0.95)),
          lambda step: step < limit)

      def loss(p, batch, _):
        ids, w = batch
        logq = jax.nn.log_softmax(draft_net.replace(params=p)(rows[ids, :-1]))
        ce = -jnp.sum(probs[ids] * logq, -1)  # forward KL up to the target's entropy
        return jnp.sum(ce * w[:, None]) / jnp.maximum(jnp.sum(w) * ce.shape[1], 1.0)

      res = fit(loss, opt, init, k_order, num_steps=num_steps, sample=sample)
      return res.state.params, limit

    return jax.vmap(one)(keeps)

  @jax.jit
  def evaluate(key, target_params, draft_params, rows, probs):
    target = target_net.replace(params=target_params)

    def one(params):
      draft = draft_net.replace(params=params)
      q = jax.nn.softmax(draft(rows[:, :-1]))
      spec = sfdd.speculative_decode(key, lambda x: jax.nn.softmax(target(x)),
                                     lambda x: jax.nn.softmax(draft(x)),
                                     rows[:cfg["spec_rows"], :1], seq,
                                     gamma=GAMMA)
      return {"alpha": sfdd.acceptance_rate(probs, q), "tau": spec.tokens_per_call,
              "accepted_per_call": jnp.sum(spec.accepted) / jnp.sum(spec.calls)}

    return jax.vmap(one)(draft_params)

  return {"data": data, "select": select, "train_target": train_target,
          "target_samples": target_samples,
          "train_drafts": train_drafts, "evaluate": evaluate, "num_steps": num_steps}


def _rank_corr(a: np.ndarray, b: np.ndarray) -> float:
  ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
  return float(np.corrcoef(ra, rb)[0, 1])


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_data, k_target, k_samp, k_rand, k_draft, k_eval = jax.random.split(key, 6)
  target_params, losses = prog["train_target"](k_target, prog["data"](k_data))
  rows, probs, test_rows, test_probs = prog["target_samples"](target_params, k_samp)
  keeps, scores = prog["select"](probs, k_rand)
  scores = jax.device_get(scores)
  params, steps = prog["train_drafts"](k_draft, rows, probs, keeps)
  metrics = jax.device_get(prog["evaluate"](k_eval, target_params, params, test_rows,
                                            test_probs))
  # share of each kept subset's segments that the target marked hot (T = 2)
  hot = (np.asarray(rows)[:, 1::cfg["seg_len"]] == MARKER + 2).mean(1)
  keeps_np = np.asarray(keeps)
  flat = np.asarray(scores["flatness"])
  arms = {name: {"alpha": float(metrics["alpha"][i]), "tau": float(metrics["tau"][i]),
                 "accepted_per_call": float(metrics["accepted_per_call"][i]),
                 "kept": int(keeps_np[i].sum()), "steps": int(steps[i]),
                 "hot_share": float(hot[keeps_np[i]].mean())}
          for i, name in enumerate(ARM_NAMES)}
  return {"seed": seed, "arms": arms, "target_final_loss": float(np.mean(losses[-20:])),
          "sample_flatness": [float(x) for x in np.quantile(1 - flat, [0, 0.25, 0.5, 0.75, 1])],
          "rank_corr_entropy": _rank_corr(flat, np.asarray(scores["entropy"])),
          "rank_corr_top1": _rank_corr(flat, np.asarray(scores["top1"])),
          "overlap_entropy": float((keeps_np[2] & keeps_np[3]).sum() / keeps_np[2].sum())}


def _per_seed(result: dict, arm: str, metric: str = "tau") -> np.ndarray:
  return np.array([r["arms"][arm][metric] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. Flattest-50% beats random-50%: mean tau (tokens per target call) higher, and higher
     in every seed.
  2. Flattest-50% beats entropy-50%, the same way.
  3. Flattest-50% is within ``WITHIN`` (3%, relative) of the full data's mean tau.
  """
  if not result["runs"]:
    return []
  tau = {a: _per_seed(result, a) for a in ARM_NAMES}
  alpha = {a: _per_seed(result, a, "alpha") for a in ARM_NAMES}
  n = len(result["runs"])
  rows = []
  for other, label in (("random_50", "random"), ("entropy_50", "highest-entropy")):
    wins = int(np.sum(tau["sfdd_50"] > tau[other]))
    rows.append(Claim(
        f"The flattest 50% train a better draft than the {label} 50%",
        f"tau {pm(tau['sfdd_50'])} vs {pm(tau[other])} (alpha {pm(alpha['sfdd_50'])} vs "
        f"{pm(alpha[other])}); higher in {wins}/{n} seeds",
        bool(tau["sfdd_50"].mean() > tau[other].mean() and wins == n)))
  gap = 1 - tau["sfdd_50"].mean() / tau["full"].mean()
  rows.append(Claim(
      "The flattest 50% come within a few % of the full data",
      f"tau {pm(tau['sfdd_50'])} vs full {pm(tau['full'])}: {100 * gap:+.1f}% below "
      f"(threshold {100 * WITHIN:.0f}%)", bool(gap <= WITHIN)))
  return rows


def table_rows(result: dict) -> list[list[str]]:
  """One row per arm: retain, alpha, tau, hot-segment share of the kept rows."""
  retain = {name: r for name, _, r in ARMS}
  return [[name, f"{retain[name]:.0%}", pm(_per_seed(result, name, "alpha")),
           pm(_per_seed(result, name, "tau")), pm(_per_seed(result, name, "hot_share"), ".2f")]
          for name in ARM_NAMES]


TABLE_HEAD = ["arm", "retain", "alpha", "tau (tokens / target call)", "T = 2 share of kept"]


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  x = np.arange(len(ARM_NAMES))
  for ax, metric in zip(axes, ("alpha", "tau"), strict=True):
    vals = np.array([_per_seed(result, a, metric) for a in ARM_NAMES])  # (A, seeds)
    ax.bar(x, vals.mean(1), color=["C7", "C1", "C0", "C2", "C0", "C0", "C3"], alpha=0.7)
    for s in range(vals.shape[1]):
      ax.plot(x, vals[:, s], "k.", ms=4)
    ax.set_xticks(x, ARM_NAMES, rotation=30, fontsize=8)
    lo, hi = vals.min(), vals.max()
    ax.set_ylim(lo - 0.2 * (hi - lo + 1e-3), hi + 0.2 * (hi - lo + 1e-3))
    ax.set(ylabel={"alpha": "exact acceptance rate alpha",
                   "tau": f"tokens per target call (gamma = {GAMMA})"}[metric])
  fig.suptitle(f"draft subsets, {len(result['runs'])} seeds (bars: mean, dots: seeds)")
  save_figure(fig, out, "sfdd.png")
  return ["sfdd.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/sfdd",
                       quick_help="2 seeds, tiny target and draft: the pipeline in under 2 "
                                  "minutes",
                       helps={"symbols": "Markov-chain symbols", "segments": "segments per row",
                              "seg_len": "tokens per segment, marker included",
                              "corpus": "rows the target trains on",
                              "samples": "target samples the drafts train on",
                              "test": "held-out target samples (alpha)",
                              "spec_rows": "held-out rows decoded speculatively (tau; no KV "
                                           "cache, so the costliest step)",
                              "epochs": "draft epochs over each arm's subset"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "sfdd")
    return {"arms": [list(a) for a in ARMS], "gamma": GAMMA, "runs": runs}

  return run_experiment(
      argv, cli(), "sfdd", run, plot, _table,
      lambda r: f"{r['config']['seeds']} seeds, mean ± std over seeds; gamma = {GAMMA}.",
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/sfdd.md


def _report(record: dict) -> str:
  runs, c = record["runs"], record["config"]
  corr = np.array([r["rank_corr_entropy"] for r in runs])
  overlap = np.array([r["overlap_entropy"] for r in runs])
  return ("\n" + f"{c['symbols']} symbols, target {c['target_layers']} layers d = "
          f"{c['target_d']} ({P.thousands(c['target_steps'])} steps), draft 1 layer d = "
          f"{c['draft_d']}, {P.thousands(c['samples'])} target samples, {c['epochs']} epochs per "
          f"arm, {c['seeds']} seeds, {P.seconds(record['wall_time_s'])}; mean ± std over seeds "
          "on held-out target samples:\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + f"Rank correlation of the flatness and entropy sample scores: {P.pm(corr)}; share of "
          f"the flattest 50% also in the highest-entropy 50%: {P.pm(overlap)}.\n\n"
          + P.claims_table("sfdd", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("sfdd", _report)


if __name__ == "__main__":
  main()
