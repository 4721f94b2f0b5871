"""Planned Diffusion vs autoregressive vs pure masked diffusion on independent spans.

    python -m experiments.planned_diffusion [--quick] [--out DIR]   (same --out resumes)

Task (``jaxlab.data.span_tasks``): a prompt of ``K`` digits (``1 <= K <= max_spans``), one
independent span per digit: its word spelled forward then backward (6-10 letters). Per seed,
three transformers of the same size, trained for the same steps and batch on the same
problems:

* ``pd``: Planned Diffusion's format (plan of ``<promise>-<topic> d n </topic>`` per span,
  ``n`` in units of ``unit`` tokens; then ``<async> letters, filler </async>`` per span; EOS),
  trained with the hybrid loss (``jaxlab.inference.planned_diffusion.hybrid_loss``); decoded
  by the plan (greedy, KV cache) and then all spans at once, ``steps = ceil(r max_k l_k)``
  for ``r`` in ``step_ratios``, and with the confidence threshold ``tau`` at the smallest
  ``r``;
* ``ar``: the plain answer (spans joined by ``|``, EOS) by next-token loss, greedy decoding;
* ``mdm``: the same plain answer (padded to a fixed length) by the masked-diffusion loss
  (the hybrid loss with no plan and full attention), decoded by
  ``jaxlab.models.decoding.unmask_sample`` (argmax, confidence-ordered) in ``mdm_steps``
  steps and at step counts matched to each PD setting's mean sequential passes.

Measured on ``test`` held-out prompts per ``K``: exact match (every span right, in order),
sequential forward passes per answer (AR: tokens generated, EOS included; PD: plan tokens,
EOS included, plus denoising steps; MDM: steps). The paper (Dream-7B on AlpacaEval) finds
PD within a few points of autoregressive quality at a fraction of the latency, its serial
steps set by the longest span; here the plan costs 4 passes per span, a fixed share of each
span (the paper's spans are far longer than their plan entries).

A larger scale for an accelerator (our suggestion, not run; the spec sets no sizes):
``--max-spans 8 --d-model 256 --layers 4 --heads 8
--steps 20000 --train 65536 --batch 128``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.data import span_tasks as st
from jaxlab.inference import planned_diffusion as pd
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.training import fit, minibatch_sampler

IDS = pd.PlanTokens(promise=st.PROMISE_ID, end_topic=st.END_TOPIC_ID, async_start=st.ASYNC_ID,
                    async_end=st.END_ASYNC_ID, sync=st.SYNC_ID, eos=st.EOS, mask=st.MASK,
                    pad=st.PAD, numerals=st.NUMERAL_IDS, unit=4)
EM_TOLERANCE = 0.05  # claim 1: PD's exact match at most 5 points (absolute) below AR's
SLOPE_SHARE = 0.25  # claim 2: PD's denoising passes grow by at most 1/4 of AR's per span
TAU = 0.9

CONFIGS = {
    "smoke": dict(seeds=1, max_spans=2, unit=4, train=128, test=4, d_model=16, heads=2,
                  layers=1, steps=10, batch=8, lr=3e-3, step_ratios=[1.0, 0.5],
                  mdm_steps=[2, 8]),
    "quick": dict(seeds=1, max_spans=3, unit=4, train=2048, test=32, d_model=48, heads=4,
                  layers=2, steps=500, batch=32, lr=3e-3, step_ratios=[1.0, 0.5, 0.25],
                  mdm_steps=[2, 4, 8, 16, 34]),
    "full": dict(seeds=3, max_spans=3, unit=4, train=8192, test=64, d_model=64, heads=4,
                 layers=3, steps=1500, batch=32, lr=3e-3, step_ratios=[1.0, 0.5, 0.25],
                 mdm_steps=[2, 4, 8, 16, 34]),
}


def _ids(cfg: dict) -> pd.PlanTokens:
  return dataclasses.replace(IDS, unit=cfg["unit"])


def make_programs(cfg: dict) -> dict:
  """The jitted training programs of one scale, shared by every seed."""
  k = cfg["max_spans"]
  pd_len = st.planned_sequences(np.zeros((1, k), np.int32), cfg["unit"]).tokens.shape[1]
  ans_len = st.answer_sequences(np.zeros((1, k), np.int32))[0].shape[1]
  model_cfg = tfm.TransformerConfig(st.TOKENIZER.vocab_size, cfg["d_model"], cfg["heads"],
                                    cfg["layers"], max(pd_len, ans_len))
  graph = tfm.graph(model_cfg)
  opt = optax.adamw(cfg["lr"], b1=0.9, b2=0.99)

  def _fit(loss, data, key):
    k_init, k_fit = jax.random.split(key)
    params = tfm.create(model_cfg, k_init).params
    res = fit(loss, opt, params, k_fit, num_steps=cfg["steps"],
              sample=minibatch_sampler(data, cfg["batch"]))
    return res.state.params, res.losses

  @jax.jit
  def train_hybrid(key, batch):
    """Every arm: the AR and MDM batches are hybrid batches too (plan-only, content-only),
    padded to the PD rows' length, so the three share this one program."""
    return _fit(lambda p, b, kk: pd.hybrid_loss(graph.replace(params=p), b, kk, IDS.mask)[0],
                batch, key)

  return {"train_hybrid": train_hybrid, "graph": graph, "ans_len": ans_len, "length": pd_len}


def _em_pd(out: pd.Decoded, gold: list[list[str]]) -> np.ndarray:
  em = []
  for spans, contents, g in zip(out.spans, out.contents, gold, strict=True):
    em.append(spans is not None and [st.decode_span(c) for c in contents] == g)
  return np.array(em)


def _per_k(values: np.ndarray, ks: np.ndarray, max_k: int) -> list[float]:
  return [float(np.mean(values[ks == k])) for k in range(1, max_k + 1)]


def _record(em, passes, ks, max_k, **extra) -> dict:
  return {"em": float(np.mean(em)), "passes": float(np.mean(passes)),
          "em_k": _per_k(em, ks, max_k), "passes_k": _per_k(passes, ks, max_k), **extra}


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  ids, k = _ids(cfg), cfg["max_spans"]
  key = jax.random.key(seed)
  k_train, k_test, k_pd, k_ar, k_mdm = jax.random.split(key, 5)
  train = np.asarray(st.span_problems(k_train, cfg["train"], k))
  test = np.concatenate([np.asarray(st.span_problems(kk, cfg["test"], k, num_spans=n))
                         for n, kk in enumerate(jax.random.split(k_test, k), 1)])
  ks = np.sum(test >= 0, 1)
  gold = st.gold_words(test)

  seqs = st.planned_sequences(train, cfg["unit"])
  hyb = jax.tree.map(jnp.asarray, pd.hybrid_batch(seqs.tokens, seqs.lengths, seqs.prompt_len,
                                                  ids))
  ans, loss_mask, plen = st.answer_sequences(train)
  length = prog["length"]
  ar_batch = jax.tree.map(jnp.asarray, pd.pad_batch(pd.autoregressive_batch(ans, loss_mask),
                                                    length, st.PAD))
  mdm_batch = jax.tree.map(jnp.asarray, pd.pad_batch(pd.masked_diffusion_batch(ans, plen),
                                                     length, st.PAD))
  p_pd, l_pd = prog["train_hybrid"](k_pd, hyb)
  p_ar, l_ar = prog["train_hybrid"](k_ar, ar_batch)
  p_mdm, l_mdm = prog["train_hybrid"](k_mdm, mdm_batch)
  graph = prog["graph"]
  net_pd, net_ar, net_mdm = (graph.replace(params=p) for p in (p_pd, p_ar, p_mdm))

  prompts = jnp.asarray(st.answer_sequences(test)[0][:, :plen])
  n_ans = prog["ans_len"] - plen
  # autoregressive
  gen = decoding.generate(net_ar, prompts, jax.random.key(0), n_ans, temperature=0.0,
                          eos_id=st.EOS, pad_id=st.PAD)
  em_ar = np.array([st.decode_answer(t) == g for t, g in zip(np.asarray(gen.tokens), gold,
                                                              strict=True)])
  arms = {"ar": _record(em_ar, np.asarray(gen.lengths), ks, k)}
  # planned diffusion: one plan, several denoising schedules
  max_plan = 4 * k + 1  # the plan's budget: n_ans >= it, one generate program for both
  plan = decoding.generate(net_pd, prompts, jax.random.key(0), n_ans, temperature=0.0,
                           eos_id=st.EOS, pad_id=st.PAD)
  settings = [(f"pd_r{r:g}", r, None) for r in cfg["step_ratios"]]
  settings.append((f"pd_r{min(cfg['step_ratios']):g}_tau{TAU:g}", min(cfg["step_ratios"]), TAU))
  for name, r, tau in settings:
    out = pd.planned_decode(net_pd, np.asarray(prompts), ids, max_plan, step_ratio=r,
                            threshold=tau, max_blocks=k, plan=plan, width=length)
    em = _em_pd(out, gold)
    arms[name] = _record(em, out.plan_passes + out.denoise_passes, ks, k,
                         denoise_passes_k=_per_k(out.denoise_passes, ks, k),
                         plan_passes_k=_per_k(out.plan_passes, ks, k),
                         plan_ok=float(np.mean([s is not None for s in out.spans])),
                         ratio=r, tau=tau)
  # pure masked diffusion on the grid and at each PD setting's mean passes: one block over
  # the whole answer with full attention (the rule of decoding.unmask_sample at argmax,
  # tested equal to it; steps traced, so one program for every step count)
  matched = {name: min(int(round(arms[name]["passes"])), n_ans) for name, _, _ in settings}
  b, pos = prompts.shape[0], np.arange(length)
  x0 = np.concatenate([prompts, np.full((b, n_ans), st.MASK, np.int32),
                       np.full((b, length - plen - n_ans), st.PAD, np.int32)], 1)
  block = np.broadcast_to(np.where((pos >= plen) & (pos < plen + n_ans), 0, -1), x0.shape)
  ans_cols = pos < plen + n_ans  # full attention over the answer; the padding as in training
  full = np.broadcast_to((ans_cols[None, :] & ans_cols[:, None]) | np.eye(length, dtype=bool),
                         (b, length, length))
  for steps in sorted(set(min(s, n_ans) for s in cfg["mdm_steps"]) | set(matched.values())):
    x, _ = pd.denoise_blocks(net_mdm, x0, full, block, np.full(b, steps), num_blocks=k,
                             mask_id=st.MASK)
    em = np.array([st.decode_answer(t) == g for t, g in zip(np.asarray(x)[:, plen:], gold,
                                                             strict=True)])
    arms[f"mdm_{steps}"] = _record(em, np.full(len(em), steps), ks, k, steps=steps)
  return {"seed": seed, "arms": arms, "matched_mdm": matched,
          "final_loss": {"pd": float(np.mean(l_pd[-50:])), "ar": float(np.mean(l_ar[-50:])),
                         "mdm": float(np.mean(l_mdm[-50:]))}}


# ------------------------------------------------------------------------------ report
def _vals(result: dict, arm: str, field: str = "em") -> np.ndarray:
  return np.array([r["arms"][arm][field] for r in result["runs"]])


def pd_settings(result: dict) -> list[str]:
  return [a for a in result["runs"][0]["arms"] if a.startswith("pd_")]


def mdm_arms(result: dict) -> list[str]:
  """The pure-diffusion step counts every seed ran (the grid; a matched count can differ
  between seeds)."""
  arms = set.intersection(*({a for a in r["arms"] if a.startswith("mdm_")}
                            for r in result["runs"]))
  return sorted(arms, key=lambda a: int(a.split("_")[1]))


def _slope(values_k: np.ndarray) -> np.ndarray:
  """Least-squares slope over K = 1..max per seed: ``values_k (seeds, K)``."""
  x = np.arange(1, values_k.shape[1] + 1)
  return np.array([np.polyfit(x, v, 1)[0] for v in values_k])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. PD (``r = 1``) exact match at most ``EM_TOLERANCE`` (5 points, absolute) below the
     autoregressive model's, on the mean over seeds.
  2. PD's denoising passes grow with the number of spans ``K`` at most ``SLOPE_SHARE`` as
     fast as AR's passes (least-squares slope over ``K``, mean over seeds): they follow
     the longest span, not the total length.
  3. PD beats pure masked diffusion at equal sequential passes: at every PD setting, the
     mean exact match over seeds is above MDM's at the step count matched to that
     setting's mean passes.
  """
  if not result["runs"]:
    return []
  n = len(result["runs"])
  em_pd, em_ar = _vals(result, "pd_r1"), _vals(result, "ar")
  gap = em_ar.mean() - em_pd.mean()
  rows = [Claim(
      "Planned diffusion is near autoregressive quality",
      f"exact match PD (r = 1) {pm(em_pd)} vs AR {pm(em_ar)} (tolerance "
      f"{EM_TOLERANCE:.2f} below); passes {pm(_vals(result, 'pd_r1', 'passes'), '.1f')} vs "
      f"{pm(_vals(result, 'ar', 'passes'), '.1f')}", bool(gap <= EM_TOLERANCE))]
  den = _slope(_vals(result, "pd_r1", "denoise_passes_k"))
  tot = _slope(_vals(result, "pd_r1", "passes_k"))
  ar = _slope(_vals(result, "ar", "passes_k"))
  rows.append(Claim(
      "PD's serial denoising steps follow the longest span, not the total length",
      f"passes per added span: PD denoising {pm(den, '.2f')}, PD total (plan included) "
      f"{pm(tot, '.2f')}, AR {pm(ar, '.2f')} (threshold {SLOPE_SHARE:.2f} x AR)",
      bool(den.mean() <= SLOPE_SHARE * ar.mean())))
  parts, ok = [], True
  for name in pd_settings(result):
    mdm = np.array([r["arms"][f"mdm_{r['matched_mdm'][name]}"]["em"] for r in result["runs"]])
    em = _vals(result, name)
    wins = int(np.sum(em > mdm))
    ok &= bool(em.mean() > mdm.mean())
    parts.append(f"{name} {pm(em, '.2f')} vs MDM {pm(mdm, '.2f')} ({wins}/{n} seeds)")
  rows.append(Claim("PD beats pure masked diffusion at equal sequential passes",
                    "; ".join(parts), ok))
  return rows


TABLE_HEAD = ["arm", "exact match", "sequential passes", "denoising passes"]


def table_rows(result: dict) -> list[list[str]]:
  rows = [["ar", pm(_vals(result, "ar")), pm(_vals(result, "ar", "passes"), ".1f"), "-"]]
  for name in pd_settings(result):
    den = np.array([np.mean(r["arms"][name]["denoise_passes_k"]) for r in result["runs"]])
    rows.append([name, pm(_vals(result, name)), pm(_vals(result, name, "passes"), ".1f"),
                 pm(den, ".1f")])
  rows += [[name, pm(_vals(result, name)), pm(_vals(result, name, "passes"), ".0f"), "-"]
           for name in mdm_arms(result)]
  return rows


def per_k_head(result: dict) -> list[str]:
  return ["arm"] + [f"K = {k}" for k in range(1, result["config"]["max_spans"] + 1)]


def per_k_rows(result: dict) -> list[list[str]]:
  """Exact match per number of spans K: AR, every PD setting, and MDM at the step count
  matched to PD r = 1 (each seed's own match)."""
  arms = ["ar", *pd_settings(result)]
  em = {a: _vals(result, a, "em_k") for a in arms}  # (seeds, K)
  em["mdm (matched to pd_r1)"] = np.array(
      [r["arms"][f"mdm_{r['matched_mdm']['pd_r1']}"]["em_k"] for r in result["runs"]])
  return [[a] + [pm(v[:, k], ".2f") for k in range(v.shape[1])] for a, v in em.items()]


def plot(result: dict, out: str) -> list[str]:
  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
  mean = lambda arm, f: _vals(result, arm, f).mean(0)  # noqa: E731
  mdm = mdm_arms(result)
  a.plot([mean(m, "passes") for m in mdm], [mean(m, "em") for m in mdm], "o-", c="C2",
         label="pure masked diffusion (steps)")
  a.plot(mean("ar", "passes"), mean("ar", "em"), "s", c="C0", ms=9, label="autoregressive")
  for i, name in enumerate(pd_settings(result)):
    a.plot(mean(name, "passes"), mean(name, "em"), "*", c=f"C{3 + i}", ms=12,
           label=f"planned diffusion {name[3:]}")
  a.set(xscale="log", xlabel="sequential forward passes per answer (mean)",
        ylabel="exact match", title="quality vs latency")
  a.legend(fontsize=7)
  ks = np.arange(1, result["config"]["max_spans"] + 1)
  b.plot(ks, mean("ar", "passes_k"), "s-", c="C0", label="AR")
  b.plot(ks, mean("pd_r1", "passes_k"), "*-", c="C3", label="PD r=1, total")
  b.plot(ks, mean("pd_r1", "plan_passes_k"), ":", c="C3", label="PD plan")
  b.plot(ks, mean("pd_r1", "denoise_passes_k"), "--", c="C3", label="PD denoising")
  b.set(xlabel="spans K", ylabel="sequential passes", title="serial cost vs number of spans",
        xticks=ks)
  b.legend(fontsize=7)
  fig.suptitle(f"{len(result['runs'])} seeds (means)")
  save_figure(fig, out, "planned_diffusion.png")
  return ["planned_diffusion.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/planned_diffusion",
                       quick_help="1 seed, up to 3 spans, tiny models: the pipeline in "
                                  "about a minute on one core",
                       helps={"max_spans": "most spans per prompt (K = 1..max_spans)",
                              "unit": "tokens per planned length unit (the paper: 10)",
                              "train": "training problems", "test": "test prompts per K",
                              "steps": "optimizer steps per model (all three the same)",
                              "step_ratios": "PD denoising steps / longest span",
                              "mdm_steps": "pure-diffusion step counts (plus the matched ones)"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "planned_diffusion")
    return {"runs": runs, "tau": TAU, "em_tolerance": EM_TOLERANCE}

  return run_experiment(
      argv, cli(), "planned_diffusion", run, plot, _table,
      lambda r: f"{r['config']['seeds']} seeds, mean ± std over seeds; "
                f"{r['config']['test']} test prompts per K.",
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/planned_diffusion.md


def _report(record: dict) -> str:
  c = record["config"]
  return ("\n" + f"K = 1..{c['max_spans']} spans, unit {c['unit']} tokens, three transformers of "
          f"{c['layers']} layers d = {c['d_model']} ({P.thousands(c['steps'])} steps, batch "
          f"{c['batch']}, {P.thousands(c['train'])} training problems), {c['test']} test prompts "
          f"per K, {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds "
          "(`pd_r<r>`: denoising steps = ceil(r x longest span); `_tau`: with the confidence "
          "threshold; `mdm_<s>`: pure masked diffusion in s steps):\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + "Exact match per number of spans:\n\n"
          + P.table(per_k_head(record), per_k_rows(record)) + "\n\n"
          + P.claims_table("planned_diffusion", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("planned_diffusion", _report)


if __name__ == "__main__":
  main()
