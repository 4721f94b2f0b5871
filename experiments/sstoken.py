"""ssToken on noisy SFT data: full SFT vs random vs loss-only vs attention-only vs ssToken.

    python -m experiments.sstoken [--quick] [--out DIR] [--seeds N] [--sft-steps N]

Task rows ``BOS task x_1..x_n SEP answer is y_1..y_n EOS`` with ``task`` in {sort,
reverse} (``y`` the sorted / reversed digits; ``answer is`` two template tokens, the
response is ``answer is y EOS``). Per seed:

1. **base**: a small transformer pretrained on clean task rows mixed with generic
   Markov text (``jaxlab.data.lm_tasks.markov_domains``), briefly, so it knows the
   format and part of the tasks;
2. **SFT data**: fresh task rows where 30% of the samples have 30% of their answer
   digits replaced by other random digits (label noise);
3. six arms fine-tune the base on it (``jaxlab.lm.sstoken``): **full** SFT on every
   response token, **random** selection at rho = 0.6, **loss_only** (gamma = 1),
   **attn_only** (gamma = 0), **sstoken** (gamma = 0.5), and **sstoken_ema** (gamma = 0.5
   with an EMA history model, alpha = 0.99, instead of the fixed base). As the official
   code does, the selecting arms start with attention only (gamma = 0) for the first
   ``warmup`` share of the steps (there: the first 10,000 samples): at step 0 the current
   model is the base and every loss gap is 0.

Metrics every ``eval_every`` steps on clean held-out prompts: exact match of the greedy
answer (template, digits and EOS) and the cross-entropy of the clean response. The arms
share one compiled program (their rho, gamma, random flag and EMA alpha are traced
values, vmapped), and one compiled pipeline runs the seeds in turn (each finished seed is saved in
``--out``, so a rerun with the same folder resumes); every arm sees the same
minibatches; the share of corrupted and of clean response tokens each arm keeps is
recorded. The SFT rows are taken in order, as the official loader does, and cycle when
``sft < sft_steps x batch``; the full scale is one pass over them, the official single
epoch. The paper (LLMs, 1-4 points) expects ssToken > each single signal > full
SFT; :func:`claims` reports what this tiny setting gives.
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
from experiments.reporting import Claim, claims_markdown, pm, save_figure
from jaxlab.data import lm_tasks as lt
from jaxlab.lm import sstoken as ss
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.training import fit, minibatch_sampler

ARMS = ("full", "random", "loss_only", "attn_only", "sstoken", "sstoken_ema")
# (rho, gamma, use_random, alpha) per arm: full SFT keeps every response token (rho = 1)
ARM_PARAMS = {"full": (1.0, 0.5, 0.0, 1.0), "random": (0.6, 0.5, 1.0, 1.0),
              "loss_only": (0.6, 1.0, 0.0, 1.0), "attn_only": (0.6, 0.0, 0.0, 1.0),
              "sstoken": (0.6, 0.5, 0.0, 1.0), "sstoken_ema": (0.6, 0.5, 0.0, 0.99)}
TOKENIZER = lt.Tokenizer([str(d) for d in range(10)] + ["sort", "reverse", "answer", "is"])
SORT, REVERSE, ANSWER, IS = (lt.FIRST_SYMBOL + 10 + i for i in range(4))

CONFIGS = {
    "smoke": dict(seeds=1, length=3, pretrain_task=64, pretrain_text=64, pretrain_steps=20,
                  sft=64, test=32, sft_steps=8, eval_every=4, layers=1, d_model=16, heads=2,
                  batch=16, pretrain_lr=3e-3, sft_lr=1e-3, noise_samples=0.3,
                  noise_tokens=0.3, rho=0.6, gamma=0.5, ema=0.99, layer=-1, warmup=0.2),
    "quick": dict(seeds=2, length=5, pretrain_task=512, pretrain_text=512, pretrain_steps=300,
                  sft=512, test=256, sft_steps=300, eval_every=50, layers=2, d_model=64,
                  heads=2, batch=32, pretrain_lr=3e-3, sft_lr=1e-3, noise_samples=0.3,
                  noise_tokens=0.3, rho=0.6, gamma=0.5, ema=0.99, layer=-1, warmup=0.2),
    # the full scale is nearer the official regime than the quick one (the review of the
    # quick result): one pass over the SFT rows (sft = sft_steps x batch, each row scored on
    # first sight, as in the official single epoch), a 4x smaller SFT step than pretraining's
    # (official: LoRA at 1e-4), and a base pretrained 1,000 steps
    "full": dict(seeds=3, length=5, pretrain_task=2048, pretrain_text=2048,
                 pretrain_steps=1000, sft=32000, test=256, sft_steps=1000, eval_every=100,
                 layers=3, d_model=96, heads=4, batch=32, pretrain_lr=1e-3, sft_lr=2.5e-4,
                 noise_samples=0.3, noise_tokens=0.3, rho=0.6, gamma=0.5, ema=0.99, layer=-1,
                 warmup=0.2),
}


def task_rows(key: jax.Array, num: int, length: int) -> lt.SeqData:
  """Half sort, half reverse (random per row): ``BOS task x SEP answer is y EOS``."""
  k_task, k_x = jax.random.split(key)
  is_sort = jax.random.bernoulli(k_task, 0.5, (num,))
  x = jax.random.randint(k_x, (num, length), 0, 10)
  y = jnp.where(is_sort[:, None], jnp.sort(x, -1), x[:, ::-1])
  col = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.int32), (num,))[:, None]  # noqa: E731
  tokens = jnp.concatenate([col(lt.BOS), col(jnp.where(is_sort, SORT, REVERSE)),
                            x + lt.FIRST_SYMBOL, col(lt.SEP), col(ANSWER), col(IS),
                            y + lt.FIRST_SYMBOL, col(lt.EOS)], 1).astype(jnp.int32)
  prompt = length + 3
  mask = (jnp.arange(tokens.shape[1] - 1) >= prompt - 1).astype(jnp.float32)
  return lt.SeqData(tokens, jnp.broadcast_to(mask, (num, tokens.shape[1] - 1)), prompt)


def corrupt(key: jax.Array, data: lt.SeqData, length: int, sample_share: float,
            token_share: float) -> tuple[jax.Array, jax.Array]:
  """Replaces ``round(token_share * n)`` answer digits of a ``sample_share`` of the rows by
  other random digits; returns the noisy tokens and the ``(N, T)`` corruption mask."""
  n_rows = data.tokens.shape[0]
  k_rows, k_pos, k_val = jax.random.split(key, 3)
  noisy_row = jax.random.uniform(k_rows, (n_rows,)) < sample_share
  count = max(1, round(token_share * length))
  rank = jnp.argsort(jnp.argsort(jax.random.uniform(k_pos, (n_rows, length)), -1), -1)
  hit = noisy_row[:, None] & (rank < count)
  start = data.prompt_len + 2  # after "answer is"
  digits = data.tokens[:, start:start + length] - lt.FIRST_SYMBOL
  shift = jax.random.randint(k_val, digits.shape, 1, 10)  # a different digit
  new = jnp.where(hit, (digits + shift) % 10, digits) + lt.FIRST_SYMBOL
  tokens = data.tokens.at[:, start:start + length].set(new)
  where = jnp.zeros(data.tokens.shape, bool).at[:, start:start + length].set(hit)
  return tokens, where


def _model(cfg: dict) -> tfm.TransformerConfig:
  return tfm.TransformerConfig(TOKENIZER.vocab_size, cfg["d_model"], cfg["heads"],
                               cfg["layers"], 2 * cfg["length"] + 6)


def arm_table(cfg: dict) -> dict[str, jax.Array]:
  """The arms' traced parameters, ``(len(ARMS),)`` each; ``rho``/``gamma``/``ema`` from
  the config replace the defaults of the selecting arms."""
  rows = []
  for arm in ARMS:
    rho, gamma, rnd, alpha = ARM_PARAMS[arm]
    rho = rho if arm == "full" else cfg["rho"]
    gamma = {"sstoken": cfg["gamma"], "sstoken_ema": cfg["gamma"]}.get(arm, gamma)
    alpha = cfg["ema"] if arm == "sstoken_ema" else alpha
    rows.append((rho, gamma, rnd, alpha))
  a = np.array(rows, np.float32)
  return {"rho": jnp.asarray(a[:, 0]), "gamma": jnp.asarray(a[:, 1]),
          "use_random": jnp.asarray(a[:, 2] > 0), "alpha": jnp.asarray(a[:, 3])}


def make_pipeline(cfg: dict):
  """``pipeline(key) -> metrics``: pretrain the base, then every arm's SFT with evaluations
  (pure: jitted once by :func:`run`, which runs the seeds in turn)."""
  n = cfg["length"]
  mcfg = _model(cfg)
  net = tfm.create(mcfg, jax.random.key(0))  # the graph; parameters are drawn per seed
  answer_len = n + 3
  chunks = cfg["sft_steps"] // cfg["eval_every"]
  opt = optax.adam(cfg["sft_lr"])
  arms = arm_table(cfg)
  step = ss.make_train_step(net, opt, n + 3, layer=cfg["layer"])
  warmup = round(cfg["warmup"] * cfg["sft_steps"])

  def evaluate(params, test: lt.SeqData):
    model = net.replace(params=params)
    p = test.prompt_len
    out = decoding.generate(model, test.tokens[:, :p], jax.random.key(0), answer_len,
                            temperature=0.0, eos_id=lt.EOS, pad_id=lt.PAD)
    em = jnp.mean(jnp.all(out.tokens == test.tokens[:, p:], -1))
    return {"em": em, "ce": tfm.next_token_loss(model, test.tokens, test.loss_mask)}

  def pipeline(key):
    k_init, k_pre, k_text, k_chain, k_fit, k_sft, k_noise, k_test, k_train = (
        jax.random.split(key, 9))
    params = tfm.create(mcfg, k_init).params
    clean = task_rows(k_pre, cfg["pretrain_task"], n)
    chains = lt.markov_domains(k_chain, 2, TOKENIZER.vocab_size - lt.FIRST_SYMBOL)
    text, _ = lt.domain_text(k_text, chains, cfg["pretrain_text"], clean.tokens.shape[1])
    corpus = jnp.concatenate([clean.tokens, text], 0)
    loss = lambda q, batch, _: tfm.next_token_loss(net.replace(params=q), batch[0])  # noqa: E731
    base = fit(loss, optax.adam(cfg["pretrain_lr"]), params, k_fit,
               num_steps=cfg["pretrain_steps"],
               sample=minibatch_sampler((corpus,), cfg["batch"])).state.params
    sft = task_rows(k_sft, cfg["sft"], n)
    noisy, where = corrupt(k_noise, sft, n, cfg["noise_samples"], cfg["noise_tokens"])
    corrupted = where[:, 1:].astype(jnp.float32)  # aligned with loss_mask
    test = task_rows(k_test, cfg["test"], n)

    def train_arm(arm):
      def one(state, xs):
        k, t = xs
        # rows in order, as the official (unshuffled) loader takes them; they cycle when
        # sft < sft_steps x batch (the full scale is one pass: each row scored on first sight)
        idx = (t * cfg["batch"] + jnp.arange(cfg["batch"])) % cfg["sft"]
        noise = jax.random.uniform(k, sft.loss_mask[idx].shape)
        gamma = ss.warm_gamma(t, arm["gamma"], warmup)  # official warm start
        mask = sft.loss_mask[idx]
        state, metrics = step(state, (noisy[idx], mask, noise), {**arm, "gamma": gamma})
        keep, bad = metrics.pop("keep"), corrupted[idx]
        metrics["noise_kept"] = jnp.sum(keep * bad) / jnp.maximum(jnp.sum(bad), 1.0)
        metrics["clean_kept"] = jnp.sum(keep * (mask - bad)) / jnp.sum(mask - bad)
        return state, metrics

      def chunk(state, keys):
        state, metrics = jax.lax.scan(one, state, keys)
        return state, {**evaluate(state.params, test),
                       **{f"train_{k}": v.mean() for k, v in metrics.items()}}

      state = ss.SSTokenState(base, opt.init(base), base)
      keys = jax.random.split(k_train, (chunks, cfg["eval_every"]))  # same batches per arm
      steps = jnp.arange(chunks * cfg["eval_every"]).reshape(chunks, -1)
      return jax.lax.scan(chunk, state, (keys, steps))[1]

    return {"base": evaluate(base, test), "arms": jax.vmap(train_arm)(arms)}

  return pipeline


def run(cfg: dict, out: str | None = None) -> list[dict]:
  """Every seed's record: base metrics and each arm's curve. One compiled pipeline runs the
  seeds in turn; with ``out``, each finished seed is saved there and a rerun resumes
  (:func:`experiments.records.seed_runs`)."""
  pipeline = jax.jit(make_pipeline(cfg))
  steps = [(i + 1) * cfg["eval_every"] for i in range(cfg["sft_steps"] // cfg["eval_every"])]

  def one(seed: int) -> dict:
    res = jax.device_get(pipeline(jax.random.key(seed)))
    rec = {"seed": seed, "base": {k: float(v) for k, v in res["base"].items()}}
    for a, arm in enumerate(ARMS):
      rec[arm] = [{"step": t, **{k: float(v[a, i]) for k, v in res["arms"].items()}}
                  for i, t in enumerate(steps)]
    return rec

  if out is None:
    return [one(seed) for seed in range(cfg["seeds"])]
  return seed_runs(out, cfg, one, "sstoken")


def _wins(a: np.ndarray, b: np.ndarray) -> tuple[bool, str]:
  diff = a - b
  wins = int(np.sum(diff > 0))
  held = bool(diff.mean() > 0 and wins > len(diff) / 2)
  return held, f"{pm(diff, sign=True)}, {wins}/{len(diff)} seeds"


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  Held means: the mean final exact match (clean held-out prompts) is higher and it is
  higher in more than half of the seeds.

  1. ssToken beats full SFT on noisy SFT data.
  2. ssToken beats the loss signal alone (gamma = 1).
  3. ssToken beats the attention signal alone (gamma = 0).
  4. Each single signal beats full SFT (the spec's expectation).
  """
  runs = result["runs"]
  if not runs:
    return []
  em = {a: np.array([r[a][-1]["em"] for r in runs]) for a in ARMS}
  ce = {a: np.array([r[a][-1]["ce"] for r in runs]) for a in ARMS}
  rows = []
  for other, text in (("full", "ssToken beats full SFT on SFT data with corrupted answers"),
                      ("loss_only", "ssToken beats its loss signal alone (gamma = 1)"),
                      ("attn_only", "ssToken beats its attention signal alone (gamma = 0)")):
    held, diff = _wins(em["sstoken"], em[other])
    rows.append(Claim(text, f"exact match {pm(em['sstoken'])} vs {pm(em[other])} "
                      f"(difference {diff}); CE {pm(ce['sstoken'])} vs {pm(ce[other])}", held))
  h1, d1 = _wins(em["loss_only"], em["full"])
  h2, d2 = _wins(em["attn_only"], em["full"])
  rows.append(Claim("Each single signal beats full SFT",
                    f"exact match loss-only − full {d1}; attention-only − full {d2}",
                    h1 and h2))
  return rows


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  steps = [h["step"] for h in result["runs"][0]["full"]]
  for i, arm in enumerate(ARMS):
    for ax, key in zip(axes, ("em", "ce"), strict=True):
      curves = np.array([[h[key] for h in r[arm]] for r in result["runs"]])
      ax.plot(steps, curves.mean(0), color=f"C{i}", marker="o", ms=3, label=arm)
      ax.fill_between(steps, curves.min(0), curves.max(0), color=f"C{i}", alpha=0.15)
  base_em = np.mean([r["base"]["em"] for r in result["runs"]])
  axes[0].axhline(base_em, color="k", ls=":", lw=1, label="base")
  axes[0].set(xlabel="SFT step", ylabel="exact match (clean held-out)",
              title="sort / reverse, 30% of samples noisy")
  axes[1].set(xlabel="SFT step", ylabel="response CE (clean held-out)")
  axes[0].legend(fontsize=7)
  save_figure(fig, out, "sstoken.png")
  return ["sstoken.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/sstoken",
                       quick_help="2 seeds, 2-layer d=64 model: the pipeline in under 2 minutes",
                       helps={"length": "digits per task row", "sft": "SFT training rows",
                              "noise_samples": "share of SFT rows corrupted",
                              "noise_tokens": "share of a corrupted row's answer digits",
                              "layer": "attention layer of the prompt score (-1: last)",
                              "ema": "alpha of the EMA history arm",
                              "warmup": "share of SFT steps with gamma = 0 in the selecting "
                                        "arms (the official warm start)"})


def _table(result: dict) -> str:
  runs = result["runs"]
  final = lambda a, k: pm([r[a][-1][k] for r in runs])  # noqa: E731
  rows = ["| arm | exact match | response CE | corrupted kept | clean kept |",
          "|---|---|---|---|---|",
          f"| base | {pm([r['base']['em'] for r in runs])} | "
          f"{pm([r['base']['ce'] for r in runs])} | | |"]
  rows += [f"| {a} | {final(a, 'em')} | {final(a, 'ce')} | {final(a, 'train_noise_kept')} | "
           f"{final(a, 'train_clean_kept')} |" for a in ARMS]
  return "\n".join(rows) + "\n\n" + claims_markdown(claims(result))


def main(argv=None) -> dict:
  def run_all_seeds(cfg, args):
    if cfg["sft_steps"] % cfg["eval_every"]:
      raise ValueError(f"eval_every must divide sft_steps, got {cfg['eval_every']} and "
                       f"{cfg['sft_steps']}")
    return {"runs": run(cfg, args.out)}

  return run_experiment(
      argv, cli(), "sstoken", run_all_seeds, plot, _table,
      lambda r: f"{r['config']['seeds']} seeds, sort / reverse with {r['config']['length']} "
                f"digits, {r['config']['noise_samples']:.0%} of SFT rows with "
                f"{r['config']['noise_tokens']:.0%} of answer digits corrupted; mean ± std over "
                "seeds.",
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/sstoken.md


def _arms_table(record: dict) -> str:
  runs = record["runs"]
  final = lambda arm, key: np.array([r[arm][-1][key] for r in runs])  # noqa: E731
  rows = [["base (before SFT)", P.pm(np.array([r["base"]["em"] for r in runs])),
           P.pm(np.array([r["base"]["ce"] for r in runs])), "", ""]]
  rows += [[arm, P.pm(final(arm, "em")), P.pm(final(arm, "ce")),
            P.pm(final(arm, "train_noise_kept")), P.pm(final(arm, "train_clean_kept"))]
           for arm in ARMS]
  return P.table(["arm", "exact match", "response CE", "corrupted tokens kept (last chunk)",
                  "clean tokens kept"], rows)


def _report(record: dict) -> str:
  cfg = record["config"]
  return ("\n" + f"{cfg['length']} digits, {cfg['layers']} layers, d = {cfg['d_model']}, "
          f"{P.thousands(cfg['pretrain_steps'])} pretraining steps, {P.thousands(cfg['sft'])} SFT "
          f"rows, {P.thousands(cfg['sft_steps'])} SFT steps of {cfg['batch']}, {cfg['seeds']} "
          f"seeds, {P.seconds(record['wall_time_s'])}; mean ± std over seeds at the last "
          "evaluation (clean held-out prompts):\n\n" + _arms_table(record) + "\n\n"
          + P.claims_table("sstoken", record) + "\n")


def page() -> dict[str, str]:
  out = P.quick_and_full("sstoken", _report)
  for name in ("quick_base1000", "quick_layer0"):
    if (record := P.recorded("sstoken", name)) is not None:
      out[name] = ("\n" + f"`{record['provenance']['command']}` "
                   f"({P.seconds(record['wall_time_s'])}):\n\n" + _arms_table(record) + "\n")
  return out


if __name__ == "__main__":
  main()
