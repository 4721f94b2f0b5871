"""CoCoMix on HMM text: NTP vs knowledge distillation vs CoCoMix vs its two ablations.

    python -m experiments.cocomix [--quick] [--out DIR] [--seeds S] [--checkpoint-dir DIR]

Paper (arXiv 2502.08524): GPT-2-style students (69M-1.38B) pre-trained on OpenWebText
with concepts from GPT-2 124M's TopK SAE (32768 latents, k = 32, layer 5). Ours (the
spec's tiny experiment, [I]): per seed, one random HMM (``jaxlab.data.lm_tasks.hmm_text``:
``states`` hidden states on a sparse chain, each emitting from ``emit_branching`` of
``vocab`` symbols), ``train_rows`` training rows and ``val_rows`` held-out rows.

Pipeline per seed (every seed one lane of a ``jax.vmap``):

1. a teacher decoder (``teacher_layers`` blocks, RoPE) trained by next-token prediction
   for ``teacher_steps``;
2. a TopK SAE (``latents`` latents, top-``k``) on its residual stream after
   ``sae_layer`` blocks, trained on the normalised MSE for ``sae_steps``;
3. the top-4 attribution labels ``c ⊙ (∇_h L · W_dec^T)`` of every training row,
   precomputed once (``jaxlab.lm.cocomix.attribution_labels``);
4. students (``student_layers`` blocks, the weak-to-strong setting) from one
   initialisation per seed, five arms: NTP; KD (NTP + ``kd_weight`` KL(teacher ‖
   student)); CoCoMix (concept loss ``lam`` and interleaving after ``insert_layer``
   blocks); interleave-only (``λ = 0``); concept-loss-only (no interleaving). All arms
   and seeds run as one vmapped program (the arms are traced flags), in ``num_evals``
   chunks (``--checkpoint-dir``: orbax checkpoints, a rerun resumes), with the
   held-out next-token CE after each.

FLOPs (``train_flops``): 2 per multiply-add, a training step 3x its forward (forward +
backward), counted per arm as if it ran alone (the shared program computes the ``2T``
sequence for every arm): the interleaved blocks see ``2T`` tokens and ``2T`` keys, the
concept head costs ``2 d C`` multiply-adds per token where it is used, KD adds the
teacher's forward. The teacher, SAE and label costs are shared by KD and CoCoMix and
reported separately (``setup_flops``). :func:`claims` gives the report rows. Writes
``results.json``, ``summary.md``, ``curves.png``.

Cost: ``--quick`` is a pipeline check (tiny models, 300 steps). The full scale
(``CONFIGS["full"]``: a teacher trained longer than the students) is sized for a
2-core CPU; its recorded wall time is on the method's docs page.
The spec's scale (``--vocab 256 --states 64 --seq-len 64 --train-rows 4096 --val-rows 256
--d-model 128 --heads 4 --latents 512 --k 16 --sae-steps 2000 --sae-batch 1024 --steps 3000
--num-evals 15 --batch 32 --lr 1e-3``) is
a GPU run (the shared program runs the last two blocks on 2T tokens plus the teacher's
forward, about 1.7x a plain step); ``--checkpoint-dir`` resumes.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from tqdm.auto import tqdm

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import run_experiment
from experiments.reporting import Claim, pm, save_figure
from jaxlab.data import lm_tasks as lt
from jaxlab.lm import cocomix as cm
from jaxlab.models import transformer as tfm
from jaxlab.training import fit, minibatch_sampler, shard_seeds

CONFIGS = {
    "smoke": dict(seeds=1, vocab=8, states=4, emit_branching=3, seq_len=8, train_rows=32,
                  val_rows=8, d_model=16, heads=2, teacher_layers=2, student_layers=2,
                  sae_layer=1, insert_layer=1, latents=32, k=4, teacher_steps=20, sae_steps=20,
                  sae_batch=64, steps=10, num_evals=2, batch=4, lr=3e-3, lam=0.1,
                  kd_weight=0.1),
    "quick": dict(seeds=3, vocab=32, states=16, emit_branching=4, seq_len=32, train_rows=512,
                  val_rows=64, d_model=32, heads=2, teacher_layers=2, student_layers=4,
                  sae_layer=1, insert_layer=2, latents=128, k=8, teacher_steps=300,
                  sae_steps=300, sae_batch=256, steps=300, num_evals=5, batch=16, lr=3e-3,
                  lam=0.1, kd_weight=0.1),
    "full": dict(seeds=3, vocab=64, states=32, emit_branching=4, seq_len=32, train_rows=2048,
                 val_rows=128, d_model=64, heads=2, teacher_layers=2, student_layers=4,
                 sae_layer=1, insert_layer=2, latents=256, k=8, teacher_steps=3000,
                 sae_steps=1000, sae_batch=512, steps=1200, num_evals=8, batch=16, lr=2e-3,
                 lam=0.1, kd_weight=0.1),
}
HELPS = {
    "vocab": "HMM symbols (besides the 5 special tokens)", "states": "HMM hidden states",
    "emit_branching": "symbols each state emits", "seq_len": "tokens per row (after BOS)",
    "train_rows": "training rows", "val_rows": "held-out rows",
    "teacher_layers": "teacher blocks", "student_layers": "student blocks",
    "sae_layer": "teacher blocks before the SAE's residual",
    "insert_layer": "student blocks before the concept insertion",
    "latents": "SAE latents C", "k": "SAE top-k (also the concept head's)",
    "teacher_steps": "teacher optimizer steps", "sae_steps": "SAE optimizer steps",
    "sae_batch": "residual vectors per SAE step", "steps": "student optimizer steps per arm",
    "num_evals": "held-out evaluations during training", "batch": "rows per student step",
    "lam": "concept-loss weight λ", "kd_weight": "weight of KL(teacher || student) in KD",
}
NUM_LABELS = 4  # topK_attri [C]


def arms(cfg: dict) -> list[dict]:
  """The five arms as traced flags: interleave, concept-loss weight, KD weight."""
  lam, kd = float(cfg["lam"]), float(cfg["kd_weight"])
  return [dict(name="NTP", interleave=False, lam=0.0, kd=0.0),
          dict(name="KD", interleave=False, lam=0.0, kd=kd),
          dict(name="CoCoMix", interleave=True, lam=lam, kd=0.0),
          dict(name="interleave only (λ=0)", interleave=True, lam=0.0, kd=0.0),
          dict(name="concept loss only", interleave=False, lam=lam, kd=0.0)]


def model_configs(cfg: dict) -> tuple[tfm.TransformerConfig, tfm.TransformerConfig]:
  make = lambda layers: tfm.TransformerConfig(  # noqa: E731
      vocab_size=lt.FIRST_SYMBOL + cfg["vocab"], d_model=cfg["d_model"], num_heads=cfg["heads"],
      num_layers=layers, seq_len=cfg["seq_len"])
  return make(cfg["teacher_layers"]), make(cfg["student_layers"])


def _layer_macs(d: int, tokens: int, keys: int, mlp_ratio: int = 4) -> float:
  """Multiply-adds of one dense block on ``tokens`` queries over ``keys`` keys (full,
  not causal-halved): qkv + out ``4 d²``, MLP ``2 r d²`` per token, scores and values
  ``2 keys d`` per query."""
  return tokens * (4 * d * d + 2 * mlp_ratio * d * d + 2 * keys * d)


def forward_macs(cfg: tfm.TransformerConfig, t: int, insert_layer: int | None = None,
                 interleave: bool = False, latents: int = 0) -> float:
  """Multiply-adds of one ``t``-token row's forward (embedding lookups free)."""
  d, n = cfg.d_model, cfg.num_layers
  cut = n if insert_layer is None else insert_layer
  macs = cut * _layer_macs(d, t, t)
  tt = 2 * t if interleave else t
  macs += (n - cut) * _layer_macs(d, tt, tt)
  macs += t * 2 * d * latents  # concept head: W_pred and W_comp
  return macs + t * d * cfg.vocab_size  # the LM head on the read-out slots


def train_flops(cfg: dict, arm: dict) -> float:
  """FLOPs of one student step of ``arm`` run alone (module docstring)."""
  tcfg, scfg = model_configs(cfg)
  t = cfg["seq_len"]
  uses_head = arm["interleave"] or arm["lam"] > 0
  per_row = 6 * forward_macs(scfg, t, cfg["insert_layer"], arm["interleave"],
                             cfg["latents"] if uses_head else 0)
  if arm["kd"] > 0:
    per_row += 2 * forward_macs(tcfg, t)
  return float(cfg["batch"] * per_row)


def setup_flops(cfg: dict) -> float:
  """Teacher training, SAE training and the labels' forward + backward, once per seed."""
  tcfg, _ = model_configs(cfg)
  t, d, c = cfg["seq_len"], cfg["d_model"], cfg["latents"]
  teacher = 6 * forward_macs(tcfg, t) * cfg["batch"] * cfg["teacher_steps"]
  sae = 6 * 2 * d * c * cfg["sae_batch"] * cfg["sae_steps"]
  labels = cfg["train_rows"] * (6 * forward_macs(tcfg, t) + 2 * 2 * d * c * t)
  return float(teacher + sae + labels)


def make_setup(cfg: dict, teacher_net):
  """``setup(key, teacher_params) -> dict``: one seed's data, trained teacher, SAE and
  labels (vmap over seeds)."""
  n_train, t = cfg["train_rows"], cfg["seq_len"] + 1
  layer, k = cfg["sae_layer"], cfg["k"]
  opt = optax.adamw(optax.warmup_cosine_decay_schedule(
      0.0, cfg["lr"], max(cfg["teacher_steps"] // 20, 1), cfg["teacher_steps"], cfg["lr"] / 10),
      weight_decay=1e-4)
  sae_opt = optax.adam(1e-3)

  def setup(key, params):
    k_data, k_fit, k_sae, k_fit2 = jax.random.split(key, 4)
    rows = lt.hmm_text(k_data, n_train + cfg["val_rows"], t, cfg["states"], cfg["vocab"],
                       cfg["emit_branching"])
    train, val = rows[:n_train], rows[n_train:]

    def ntp(p, batch, _):
      return tfm.next_token_loss(teacher_net.replace(params=p), batch)

    teacher = fit(ntp, opt, params, k_fit, num_steps=cfg["teacher_steps"],
                  sample=minibatch_sampler(train, cfg["batch"])).state.params
    model = teacher_net.module(teacher)
    h = cm.teacher_hidden(model, train[:, :-1], layer).reshape(-1, cfg["d_model"])
    sae0 = cm.init_sae(k_sae, cfg["d_model"], cfg["latents"],
                       b_pre=cm.layer_norm0(h)[0].mean(0))
    sae_fit = fit(lambda s, x, _: cm.sae_loss(s, x, k), sae_opt, sae0, k_fit2,
                  num_steps=cfg["sae_steps"], sample=minibatch_sampler(h, cfg["sae_batch"]),
                  has_aux=True)
    sae = sae_fit.state.params
    nmse = cm.sae_loss(sae, h[:4096], k)[0]
    blocks = train.reshape(-1, cfg["batch"], t)
    labels = jax.lax.map(lambda x: cm.attribution_labels(model, sae, x, layer, k,
                                                         NUM_LABELS)[0], blocks)
    live = jnp.mean(jnp.any(cm.sae_encode(sae, h[:4096], k) > 0, 0))
    teacher_ce = tfm.next_token_loss(teacher_net.replace(params=teacher), val)
    return dict(train=train, val=val, labels=labels.reshape(n_train, t - 1, NUM_LABELS),
                teacher=teacher, sae_b_pre=sae.b_pre, sae_nmse=nmse, sae_live=live,
                teacher_ce=teacher_ce)

  return setup


def make_chunk(cfg: dict, student_net, teacher_net):
  """``(init, chunk)``: ``chunk(flags, carry, data) -> (carry, val CE, per-step info)``,
  ``steps / num_evals`` steps of one arm on one seed (vmap over arms and seeds);
  ``carry = (params, opt_state, key data)`` with ``params = (student, concept head)``."""
  sched = optax.warmup_cosine_decay_schedule(0.0, cfg["lr"], max(cfg["steps"] // 20, 1),
                                             cfg["steps"], cfg["lr"] / 10)
  opt = optax.adamw(sched, weight_decay=1e-4)
  per_eval = cfg["steps"] // cfg["num_evals"]
  kw = dict(insert_layer=cfg["insert_layer"], k=cfg["k"])

  def chunk(flags, carry, data):
    interleave, lam, kd = flags
    params, opt_state, key_data = carry
    teacher = teacher_net.module(data["teacher"])

    def loss_fn(p, batch, _):
      tokens, labels = batch
      t_logits = jax.lax.stop_gradient(teacher(tokens[:, :-1]))
      return cm.cocomix_loss(student_net.module(p[0]), p[1], tokens, labels, interleave=interleave,
                             lam=lam, kd_weight=kd, teacher_logits=t_logits, **kw)

    result = fit(loss_fn, opt, params, jax.random.wrap_key_data(key_data), num_steps=per_eval,
                 sample=minibatch_sampler((data["train"], data["labels"]), cfg["batch"]),
                 has_aux=True, opt_state=opt_state)
    state = result.state
    val = data["val"]
    logits, z = cm.student_forward(student_net.module(state.params[0]), state.params[1],
                                   val[:, :-1], interleave=interleave, **kw)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, val[:, 1:]).mean()
    info = {k: result.metrics.aux[k] for k in ("lm/ce", "cocomix/concept_ce")}
    return (state.params, state.opt_state, jax.random.key_data(state.key)), ce, info

  return opt.init, chunk


def run(cfg: dict, checkpoint_dir: str | None = None) -> dict:
  if cfg["steps"] % cfg["num_evals"]:
    raise ValueError(f"--num-evals must divide --steps, got {cfg['num_evals']} and "
                     f"{cfg['steps']}")
  if cfg["train_rows"] % cfg["batch"]:
    raise ValueError(f"--batch must divide --train-rows, got {cfg['batch']} and "
                     f"{cfg['train_rows']}")
  tcfg, scfg = model_configs(cfg)
  seeds = list(range(cfg["seeds"]))
  stack = lambda xs: jax.tree.map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
  teachers = [tfm.create(tcfg, jax.random.key(3000 + s)) for s in seeds]
  setup = jax.jit(jax.vmap(make_setup(cfg, teachers[0])))
  t0 = time.time()
  data = setup(stack([jax.random.key(s) for s in seeds]), stack([n.params for n in teachers]))
  data = jax.tree.map(lambda x: x, data)
  setup_s = time.time() - t0
  students = [tfm.create(scfg, jax.random.key(1000 + s)) for s in seeds]
  heads = [cm.init_concept_head(jax.random.key(4000 + s), cfg["d_model"], cfg["latents"],
                                b_pre=data["sae_b_pre"][i]) for i, s in enumerate(seeds)]
  params0 = stack([(n.params, h) for n, h in zip(students, heads, strict=True)])
  keys = jnp.stack([jax.random.key_data(jax.random.key(2000 + s)) for s in seeds])
  init, chunk = make_chunk(cfg, students[0], teachers[0])
  arm_list = arms(cfg)
  n_arms = len(arm_list)
  tile = lambda x: jnp.broadcast_to(x, (n_arms, *x.shape))  # noqa: E731
  carry = jax.tree.map(tile, (params0, jax.vmap(init)(params0), keys))
  flags = (jnp.asarray([a["interleave"] for a in arm_list]),
           jnp.asarray([a["lam"] for a in arm_list], jnp.float32),
           jnp.asarray([a["kd"] for a in arm_list], jnp.float32))
  per_seed = shard_seeds({k: data[k] for k in ("train", "val", "labels", "teacher")})
  program = jax.jit(jax.vmap(jax.vmap(chunk, (None, 0, 0)), (0, 0, None)))

  def run_chunk(i, carry, counter):
    carry, ce, info = program(flags, carry, per_seed)
    return carry, {"ce": ce, **{f"train_{k}": v for k, v in info.items()}}, counter + 1

  desc = "cocomix (arms x seeds vmapped)"
  if checkpoint_dir is None:  # no orbax import for the short scales
    history = []
    for i in tqdm(range(cfg["num_evals"]), desc=desc):
      carry, record, _ = run_chunk(i, carry, 0)
      history.append(jax.tree.map(np.asarray, record))
  else:
    from jaxlab.training import run_chunks  # noqa: PLC0415 (imports orbax)
    _, history = run_chunks(carry, cfg["num_evals"], run_chunk, checkpoint_dir=checkpoint_dir,
                            desc=desc, fingerprint={"config": cfg})
  ce = np.stack([h["ce"] for h in history], 2)  # (arms, seeds, evals)
  train_ce = np.concatenate([h["train_lm/ce"] for h in history], 2)
  concept = np.concatenate([h["train_cocomix/concept_ce"] for h in history], 2)
  every = cfg["steps"] // cfg["num_evals"]
  steps = [every * (j + 1) for j in range(cfg["num_evals"])]
  final, curves = {}, {}
  for i, arm in enumerate(arm_list):
    fl = train_flops(cfg, arm)
    final[arm["name"]] = {"ce": ce[i, :, -1].tolist(), "flops_per_step": fl}
    curves[arm["name"]] = {"eval_steps": steps, "eval_flops": [fl * s for s in steps],
                           "ce": ce[i].tolist(), "train_ce": train_ce[i].mean(0).tolist(),
                           "train_concept_ce": concept[i].mean(0).tolist()}
  return {"arms": arm_list, "final": final, "curves": curves,
          "teacher_ce": np.asarray(data["teacher_ce"]).tolist(),
          "sae_nmse": np.asarray(data["sae_nmse"]).tolist(),
          "sae_live_fraction": np.asarray(data["sae_live"]).tolist(),
          "setup_flops": setup_flops(cfg), "setup_wall_s": setup_s,
          "log_latents": float(np.log(cfg["latents"]))}


def _paired(result: dict, arm: str, base: str = "NTP") -> np.ndarray:
  f = result["final"]
  return np.asarray(f[arm]["ce"], np.float64) - np.asarray(f[base]["ce"], np.float64)


def equal_flops(result: dict, arm: str = "CoCoMix", base: str = "NTP") -> tuple | None:
  """Per seed, ``arm``'s held-out CE interpolated (linearly in log FLOPs) at ``base``'s final
  FLOPs, and ``base``'s final CE; ``None`` when ``arm``'s curve starts after that budget."""
  a, b = result["curves"][arm], result["curves"][base]
  budget = b["eval_flops"][-1]
  fa = np.log(np.asarray(a["eval_flops"], np.float64))
  if np.log(budget) < fa[0] or np.log(budget) > fa[-1]:
    return None
  ca = np.asarray([np.interp(np.log(budget), fa, np.asarray(c)) for c in a["ce"]])
  return budget, ca, np.asarray(b["ce"], np.float64)[:, -1]


def format_table(result: dict) -> str:
  lines = ["| arm | val CE (nats) | ΔCE vs NTP (paired) | train FLOPs / step |",
           "|---|---|---|---|"]
  for arm in result["arms"]:
    m = result["final"][arm["name"]]
    lines.append(f"| {arm['name']} | {pm(m['ce'], '.4f')} | "
                 f"{pm(_paired(result, arm['name']), '.4f', sign=True)} | "
                 f"{m['flops_per_step']:.3g} |")
  return ("\n".join(lines) + f"\n\nteacher val CE {pm(result['teacher_ce'], '.4f')}; SAE "
          f"normalised MSE {pm(result['sae_nmse'], '.3f')}, live latents "
          f"{pm(result['sae_live_fraction'], '.2f')}; teacher + SAE + labels "
          f"{result['setup_flops']:.3g} FLOPs per seed (shared by KD and CoCoMix)")


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  Per seed every arm is compared with NTP (or KD) of the same seed (same data, teacher,
  SAE and initialisation). Criteria, on the final held-out CE:

  1. CoCoMix beats NTP at equal steps: the mean paired difference is below 0.
  2. CoCoMix beats KD at equal steps: the same against KD.
  3. CoCoMix beats NTP at equal FLOPs: CoCoMix's CE interpolated at NTP's final FLOPs is
     below NTP's final CE on mean (no verdict when CoCoMix's curve does not reach back
     to that budget).
  4. Both parts help: CoCoMix is below both ablations on mean.
  """
  names = [a["name"] for a in result.get("arms") or []]
  need = {"NTP", "KD", "CoCoMix", "interleave only (λ=0)", "concept loss only"}
  if not need <= set(names) or not result.get("final"):
    return []
  n = len(result["final"]["NTP"]["ce"])
  rows = []
  d_ntp = _paired(result, "CoCoMix")
  rows.append(Claim(
      "CoCoMix reaches a lower validation loss than next-token prediction at equal steps",
      f"held-out CE ({n} seeds): NTP {pm(result['final']['NTP']['ce'], '.4f')}, CoCoMix "
      f"{pm(result['final']['CoCoMix']['ce'], '.4f')}; paired {pm(d_ntp, '.4f', sign=True)} "
      f"(lower in {int(np.sum(d_ntp < 0))}/{d_ntp.size})", bool(d_ntp.mean() < 0)))
  d_kd = _paired(result, "CoCoMix", "KD")
  rows.append(Claim(
      "CoCoMix beats knowledge distillation from the (weaker) teacher",
      f"KD {pm(result['final']['KD']['ce'], '.4f')}; CoCoMix − KD paired "
      f"{pm(d_kd, '.4f', sign=True)} (lower in {int(np.sum(d_kd < 0))}/{d_kd.size})",
      bool(d_kd.mean() < 0)))
  eq = equal_flops(result)
  if eq is None:
    rows.append(Claim("CoCoMix is more compute-efficient than NTP (equal FLOPs)",
                      "CoCoMix's first evaluation already costs more than NTP's whole run",
                      None))
  else:
    budget, ca, cb = eq
    dv = ca - cb
    rows.append(Claim(
        "CoCoMix is more compute-efficient than NTP (equal FLOPs)",
        f"at NTP's final {budget:.3g} FLOPs: CoCoMix {pm(ca, '.4f')} (interpolated) vs NTP "
        f"{pm(cb, '.4f')}; paired {pm(dv, '.4f', sign=True)}", bool(dv.mean() < 0)))
  parts = {a: _paired(result, "CoCoMix", a) for a in ("interleave only (λ=0)",
                                                        "concept loss only")}
  rows.append(Claim(
      "Both the concept prediction and the interleaving contribute",
      "CoCoMix − ablation, paired: " + "; ".join(
          f"{a}: {pm(v, '.4f', sign=True)}" for a, v in parts.items()),
      bool(all(v.mean() < 0 for v in parts.values()))))
  return rows


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
  for i, arm in enumerate(result["arms"]):
    c = result["curves"][arm["name"]]
    v = np.asarray(c["ce"])
    for ax, x in zip(axes, (c["eval_steps"], c["eval_flops"]), strict=True):
      ax.plot(x, v.mean(0), color=f"C{i}", marker="o", ms=3, label=arm["name"])
      ax.fill_between(x, v.min(0), v.max(0), color=f"C{i}", alpha=0.15)
  axes[0].set(xlabel="step", ylabel="held-out CE (nats)", title="against steps")
  axes[1].set(xlabel="training FLOPs (arm alone)", xscale="log", title="against FLOPs")
  axes[0].legend(fontsize=7)
  save_figure(fig, out, "curves.png")
  return ["curves.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/cocomix", helps=HELPS, resumable=True,
                       quick_help="3 seeds, 5 arms, 300 steps of tiny models: the pipeline in "
                                  "under 2 minutes")


def main(argv=None) -> dict:
  return run_experiment(
      argv, cli(), "cocomix", lambda cfg, args: run(cfg, args.checkpoint_dir), plot,
      format_table,
      lambda r: f"{len(r['arms'])} arms x {r['config']['seeds']} seeds, held-out next-token "
                "CE, mean ± sample std over seeds (paired: per seed, then mean).")


# Page text: the generated regions of docs/methods/cocomix.md


def _tables(result: dict) -> str:
  fmt = lambda v: P.f(v, 4)  # noqa: E731
  rows = [[a["name"], P.pm(result["final"][a["name"]]["ce"], fmt),
           P.pm(_paired(result, a["name"]), lambda v: P.signed(v, 4), fmt),
           f"{result['final'][a['name']]['flops_per_step']:.3g}"] for a in result["arms"]]
  return (P.table(["arm", "held-out CE", "ΔCE vs NTP (paired)", "training FLOPs / step"], rows)
          + "\n\n" + P.claims_table("cocomix", result))


def _teacher(result: dict) -> str:
  return (f"teacher held-out CE {P.pm(result['teacher_ce'], lambda v: P.f(v, 4))}; SAE normalised "
          f"MSE {P.pm(result['sae_nmse'], lambda v: P.f(v, 3))}, live latents "
          f"{P.pm(result['sae_live_fraction'])}")


def page() -> dict[str, str]:
  quick = P.load("cocomix", "quick")
  qc = quick["config"]
  out = {
      "quick_setting": (f"{qc['seeds']} seeds, {P.thousands(qc['steps'])} steps, vocab "
                        f"{qc['vocab']}, {qc['states']} HMM states, teacher "
                        f"{qc['teacher_layers']} layers / student {qc['student_layers']} layers, "
                        f"d = {qc['d_model']}, SAE C = {qc['latents']}, k = {qc['k']}, "
                        f"{P.seconds(quick['wall_time_s'])}"),
      "quick_table": _tables(quick),
      "quick_teacher": _teacher(quick),
  }
  if (full := P.recorded("cocomix", "full")) is not None:
    out["full"] = (f"Full run (`docs/results/cocomix/full/`, {full['config']['seeds']} seeds, "
                   f"{P.thousands(full['config']['steps'])} steps, "
                   f"{P.seconds(full['wall_time_s'])}):\n\n" + _tables(full)
                   + f"\n\n{_teacher(full)[0].upper()}{_teacher(full)[1:]}.")
  else:
    out["full"] = P.not_recorded("cocomix")
  return out


if __name__ == "__main__":
  main()
