"""Expert Divergence Learning on a domain-mixed Markov corpus: a beta sweep and a
random-label control.

    python -m experiments.expert_divergence [--quick] [--out DIR] [--seeds S]
                                            [--checkpoint-dir DIR]

Data (``jaxlab.data.lm_tasks``, the design is ours; the paper pre-trains 3B / 15B MoE
LMs on web text with 3 or 49 domain labels): ``domains`` overlapping domains over one
shared vocabulary of ``vocab`` symbols. Domain ``d`` is a sparse bigram chain (3
successors per symbol) mixed with one chain shared by all domains,
``P_d = (1 - shared) C_d + shared G``, so a domain shows only in part of its bigrams.
Every seed draws its own chains, a training set of ``train_rows`` rows per domain and
a held-out set of ``val_rows`` rows per domain; batches are stratified
(``per_domain`` rows of every domain, ``jaxlab.lm.expert_divergence.domain_sampler``)
so every batch holds every domain, as the spec's tiny experiment asks.

Model: a decoder (``jaxlab.models.transformer``, RoPE) whose every layer's MLP is a
top-``top_k`` mixture of ``experts`` experts (the toolkit puts MoE in every layer; the
spec's tiny model has a dense first layer). Loss: ``CE + 0.01 L_LB + beta L_ED``.

Arms, per seed from the same initialization and data: ``beta`` in ``betas`` (``0`` is
the load-balanced baseline), and a control that trains ``L_ED`` at ``control_beta`` on
random domain labels (one uniform label per training row, drawn once). Every arm and
seed is one lane of one ``jax.vmap`` over the shared fit loop
(``jaxlab.training.fit``), run in ``num_evals`` chunks (``--checkpoint-dir``: orbax
checkpoints after each, a rerun with the same flag resumes) and evaluated after each
chunk on the held-out rows with the true labels: per-domain CE, inter-domain routing
JSD (mean over layers and domain pairs), domain-expert mutual information of the top-k
assignments (and of the soft router probabilities), and the entropy of the experts'
load. :func:`claims` gives the
report rows. Writes ``results.json``, ``summary.md``, ``final.png`` and ``curves.png``.

Cost: ``--quick`` is a tiny model (a pipeline check). The full scale (``CONFIGS["full"]``) is
sized for a 2-core CPU; its recorded wall time is on
the method's docs page. The spec's model (``--layers 4 --d-model 128 --heads 4
--seq-len 64 --vocab 128 --train-rows 2048 --val-rows 128 --per-domain 8 --steps 3000
--num-evals 15 --lr 1e-3``: every expert is
evaluated densely, about 2.8x the toolkit's dense 4-layer d = 128 model per token) is
a GPU run; ``--checkpoint-dir`` resumes.
"""

from __future__ import annotations

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
from jaxlab.lm import expert_divergence as ed
from jaxlab.models import transformer as tfm
from jaxlab.training import fit, shard_seeds

CONFIGS = {
    "smoke": dict(seeds=1, steps=20, num_evals=2, domains=4, vocab=16, shared=0.3, seq_len=16,
                  train_rows=32, val_rows=8, per_domain=2, d_model=16, layers=1, heads=2,
                  mlp_ratio=1, experts=4, top_k=2, lr=3e-3, betas=(0.0, 0.05),
                  control_beta=0.05),
    "quick": dict(seeds=3, steps=300, num_evals=5, domains=4, vocab=32, shared=0.3, seq_len=32,
                  train_rows=256, val_rows=32, per_domain=4, d_model=32, layers=2, heads=2,
                  mlp_ratio=2, experts=8, top_k=2, lr=3e-3, betas=(0.0, 0.01, 0.05, 0.1),
                  control_beta=0.05),
    "full": dict(seeds=3, steps=1000, num_evals=10, domains=4, vocab=64, shared=0.3,
                 seq_len=48, train_rows=512, val_rows=64, per_domain=4, d_model=64, layers=2,
                 heads=2, mlp_ratio=2, experts=8, top_k=2, lr=2e-3,
                 betas=(0.0, 0.01, 0.05, 0.1), control_beta=0.05),
}
HELPS = {
    "steps": "optimizer steps per arm", "num_evals": "held-out evaluations during training",
    "domains": "number of domains", "vocab": "shared symbols (besides the 5 special tokens)",
    "shared": "weight of the chain every domain mixes in (overlap between domains)",
    "seq_len": "tokens per training row (BOS + seq_len symbols)",
    "train_rows": "training rows per domain", "val_rows": "held-out rows per domain",
    "per_domain": "rows of each domain per batch", "experts": "experts per MoE layer",
    "top_k": "experts per token", "betas": "weights of L_ED (0: the baseline)",
    "control_beta": "beta of the random-label control",
}


def arms(cfg: dict) -> list[dict]:
  """The beta sweep, then the random-label control."""
  out = [{"name": f"beta={b:g}", "beta": float(b), "random_labels": False} for b in cfg["betas"]]
  out.append({"name": f"random labels, beta={cfg['control_beta']:g}",
              "beta": float(cfg["control_beta"]), "random_labels": True})
  return out


def model_config(cfg: dict) -> tfm.TransformerConfig:
  return tfm.TransformerConfig(
      vocab_size=lt.FIRST_SYMBOL + cfg["vocab"], d_model=cfg["d_model"], num_heads=cfg["heads"],
      num_layers=cfg["layers"], seq_len=cfg["seq_len"], mlp_ratio=cfg["mlp_ratio"],
      num_experts=cfg["experts"], experts_per_token=cfg["top_k"])


def make_data(cfg: dict):
  """``data(key) -> (train (D, train_rows, T + 1), val (D, val_rows, T + 1), random labels
  (D, train_rows), chains (D, V, V))``: one seed's corpus, jitted once for every seed."""
  d, t = cfg["domains"], cfg["seq_len"] + 1

  @jax.jit
  def data(key):
    k_chain, k_train, k_val, k_label = jax.random.split(key, 4)
    chains = lt.markov_domains(k_chain, d + 1, cfg["vocab"], branching=3)
    chains = (1 - cfg["shared"]) * chains[:d] + cfg["shared"] * chains[d]
    rows = lambda key, n: jax.vmap(  # noqa: E731
        lambda k, c: lt.domain_text(k, c[None], n, t)[0])(jax.random.split(key, d), chains)
    return (rows(k_train, cfg["train_rows"]), rows(k_val, cfg["val_rows"]),
            jax.random.randint(k_label, (d, cfg["train_rows"]), 0, d), chains)

  return data


def make_chunk(cfg: dict, net):
  """``(init, chunk)``: ``init(params0) -> opt_state``, and ``chunk(beta, random, carry, train,
  random_labels, val) -> (carry, evals, per-step info)``, ``steps / num_evals`` steps of one
  arm on one seed through the shared fit loop, then one held-out evaluation (vmap both
  over arms and seeds). ``carry = (params, opt_state, key data)``; consecutive chunks are
  one fit run (the learning-rate schedule's count is in the optimizer state, the key chain
  in the carry)."""
  d, k = cfg["domains"], cfg["top_k"]
  sched = optax.warmup_cosine_decay_schedule(0.0, cfg["lr"], max(cfg["steps"] // 20, 1),
                                             cfg["steps"], cfg["lr"] / 10)
  opt = optax.adamw(sched, weight_decay=1e-4)
  per_eval = cfg["steps"] // cfg["num_evals"]

  def evaluate(params, val):
    tokens = val.reshape(-1, val.shape[-1])
    labels = jnp.repeat(jnp.arange(d), val.shape[1])
    out = net.module(params).forward(tokens[:, :-1])
    ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, tokens[:, 1:]).mean(-1)
    ce_domain, _ = ed.per_domain_mean(ce, labels, d)
    metrics = ed.routing_metrics(out.router_probs, labels, d, k)
    return {"ce": ce_domain.mean(), "ce_domain": ce_domain, **metrics}

  def chunk(beta, random, carry, train_rows, random_labels, val):
    params, opt_state, key_data = carry
    true = jnp.broadcast_to(jnp.arange(d)[:, None], random_labels.shape)
    labels = jnp.where(random, random_labels, true)
    sample = ed.domain_sampler(train_rows, labels, cfg["per_domain"])

    def loss_fn(params, batch, _):
      return ed.edl_loss(net.replace(params=params), batch[0], batch[1], num_domains=d,
                         beta=beta)

    result = fit(loss_fn, opt, params, jax.random.wrap_key_data(key_data), num_steps=per_eval,
                 sample=sample, has_aux=True, opt_state=opt_state)
    state = result.state
    info = {"ce": result.metrics.aux["lm/ce"], "ed_jsd": result.metrics.aux["ed/jsd"]}
    carry = (state.params, state.opt_state, jax.random.key_data(state.key))
    return carry, evaluate(state.params, val), info

  return opt.init, chunk


def run(cfg: dict, checkpoint_dir: str | None = None) -> dict:
  mcfg = model_config(cfg)
  seeds = list(range(cfg["seeds"]))
  if cfg["steps"] % cfg["num_evals"]:
    raise ValueError(f"--num-evals must divide --steps, got {cfg['num_evals']} and "
                     f"{cfg['steps']}")
  data_fn = make_data(cfg)
  data = [data_fn(jax.random.fold_in(jax.random.key(s), 7)) for s in seeds]
  # each domain's entropy rate: the CE floor once the domain is known
  entropy = [[float(lt.entropy_rate(c)) for c in x[3]] for x in data]
  nets = [tfm.create(mcfg, jax.random.key(1000 + s)) for s in seeds]
  arm_list = arms(cfg)
  n_arms = len(arm_list)
  stack = lambda xs: jax.tree.map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
  params0 = stack([n.params for n in nets])
  keys = jnp.stack([jax.random.key_data(jax.random.key(2000 + s)) for s in seeds])
  init, chunk = make_chunk(cfg, nets[0])
  # every arm starts from its seed's initialization and key: carry leaves (arms, seeds, ...)
  tile = lambda x: jnp.broadcast_to(x, (n_arms, *x.shape))  # noqa: E731
  carry = jax.tree.map(tile, (params0, jax.vmap(init)(params0), keys))
  per_seed = shard_seeds((stack([x[0] for x in data]), stack([x[2] for x in data]),
                          stack([x[1] for x in data])))
  betas = jnp.asarray([a["beta"] for a in arm_list], jnp.float32)
  random = jnp.asarray([a["random_labels"] for a in arm_list])
  over_seeds = jax.vmap(chunk, (None, None, 0, 0, 0, 0))
  program = jax.jit(jax.vmap(over_seeds, (0, 0, 0, None, None, None)))

  def run_chunk(i, carry, counter):
    carry, evals, info = program(betas, random, carry, *per_seed)
    return carry, {**evals, **{f"train_{k}": v for k, v in info.items()}}, counter + 1

  if checkpoint_dir is None:  # no orbax import for the short scales
    history = []
    for i in tqdm(range(cfg["num_evals"]), desc="expert_divergence (arms x seeds vmapped)"):
      carry, record, _ = run_chunk(i, carry, 0)
      history.append(jax.tree.map(np.asarray, record))
  else:
    from jaxlab.training import run_chunks  # noqa: PLC0415 (imports orbax)
    _, history = run_chunks(carry, cfg["num_evals"], run_chunk, checkpoint_dir=checkpoint_dir,
                            desc="expert_divergence (arms x seeds vmapped)",
                            fingerprint={"config": cfg})
  # leaves (arms, seeds, num_evals, ...); per-step training info (arms, seeds, steps)
  evals = {k: np.stack([h[k] for h in history], 2) for k in history[0]
           if not k.startswith("train_")}
  info = {k[len("train_"):]: np.concatenate([h[k] for h in history], 2) for k in history[0]
          if k.startswith("train_")}
  every = cfg["steps"] // cfg["num_evals"]
  final, curves = {}, {}
  for i, arm in enumerate(arm_list):
    final[arm["name"]] = {
        "ce": evals["ce"][i, :, -1].tolist(), "ce_domain": evals["ce_domain"][i, :, -1].tolist(),
        "jsd": evals["jsd"][i, :, -1].tolist(), "mi": evals["mi"][i, :, -1].tolist(),
        "mi_soft": evals["mi_soft"][i, :, -1].tolist(),
        "load_entropy": evals["load_entropy"][i, :, -1].tolist(),
        "jsd_layers": evals["jsd_layers"][i, :, -1].tolist(),
        "mi_layers": evals["mi_layers"][i, :, -1].tolist(),
        "load_entropy_layers": evals["load_entropy_layers"][i, :, -1].tolist()}
    curves[arm["name"]] = {
        "eval_steps": [every * (j + 1) for j in range(cfg["num_evals"])],
        **{m: evals[m][i].tolist() for m in ("ce", "jsd", "mi", "load_entropy")},
        "train_ce": info["ce"][i].mean(0).tolist(),
        "train_ed_jsd": info["ed_jsd"][i].mean(0).tolist()}
  return {"arms": arm_list, "final": final, "curves": curves,
          "entropy_rate": entropy, "log_experts": float(np.log(cfg["experts"]))}


def _paired(result: dict, arm: str, metric: str) -> np.ndarray:
  """Per-seed ``arm - baseline`` of a final metric (the baseline: the first arm, beta 0)."""
  base = result["arms"][0]["name"]
  f = result["final"]
  return np.asarray(f[arm][metric], np.float64) - np.asarray(f[base][metric], np.float64)


def format_table(result: dict) -> str:
  lines = ["| arm | val CE (nats) | ΔCE vs β=0 (paired) | routing JSD | domain-expert MI "
           "(top-k) | MI (soft) | load entropy |", "|---|---|---|---|---|---|---|"]
  for arm in result["arms"]:
    m = result["final"][arm["name"]]
    lines.append(f"| {arm['name']} | {pm(m['ce'], '.4f')} | "
                 f"{pm(_paired(result, arm['name'], 'ce'), '.4f', sign=True)} | "
                 f"{pm(m['jsd'], '.4f')} | {pm(m['mi'], '.4f')} | {pm(m['mi_soft'], '.4f')} | "
                 f"{pm(m['load_entropy'], '.3f')} |")
  floor = np.mean([np.mean(r) for r in result["entropy_rate"]])
  return ("\n".join(lines) + f"\n\nentropy-rate floor (mean over domains and seeds) "
          f"{floor:.4f} nats; MI at most log(domains); load entropy at most "
          f"log(experts) = {result['log_experts']:.3f}")


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  Per seed, every arm is compared with the beta = 0 baseline of the same seed (same data
  and initialization). Criteria:

  1. L_ED raises inter-domain routing divergence: every positive-beta arm has a higher
     held-out routing JSD than the baseline in every seed.
  2. ... and domain-expert mutual information (top-k assignments): the same test on MI.
  3. Every beta lowers the LM loss: the mean over seeds of the paired held-out CE
     difference is below 0 for every positive beta.
  4. Random labels do no better than the baseline: the control's mean paired CE
     difference is >= 0.
  5. (ours) The divergence comes from the true labels: the control's true-domain routing
     JSD is below the same-beta true-label arm's in every seed (no verdict when the sweep
     has no arm at the control's beta).
  """
  arm_list = result.get("arms") or []
  if len(arm_list) < 2 or not result.get("final"):
    return []
  sweep = [a for a in arm_list[1:] if not a["random_labels"] and a["beta"] > 0]
  control = next(a for a in arm_list if a["random_labels"])
  n = len(result["final"][arm_list[0]["name"]]["ce"])

  def ups(metric):
    parts, held = [], True
    for a in sweep:
      dv = _paired(result, a["name"], metric)
      held &= bool(np.all(dv > 0))
      parts.append(f"β={a['beta']:g}: {pm(dv, '.3g', sign=True)} (up in {int(np.sum(dv > 0))}"
                   f"/{dv.size})")
    base = result["final"][arm_list[0]["name"]][metric]
    return f"baseline {pm(base, '.3g')}; paired change " + "; ".join(parts), held

  rows = []
  text, held = ups("jsd")
  rows.append(Claim("Expert Divergence Learning raises the routing divergence between domains",
                    f"held-out inter-domain routing JSD (nats, {n} seeds): {text}",
                    held if sweep else None))
  text, held = ups("mi")
  rows.append(Claim("... and the domain-expert mutual information (expert specialisation)",
                    f"top-k domain-expert MI (nats): {text}", held if sweep else None))
  dce = {a["beta"]: _paired(result, a["name"], "ce") for a in sweep}
  rows.append(Claim(
      "Every β tested lowers the language-modelling loss",
      "paired held-out CE change vs β=0: " + "; ".join(
          f"β={b:g}: {pm(v, '.4f', sign=True)}" for b, v in dce.items()),
      bool(all(v.mean() < 0 for v in dce.values())) if sweep else None))
  dc = _paired(result, control["name"], "ce")
  rows.append(Claim("Random domain labels do no better than the baseline",
                    f"{control['name']}: paired held-out CE change vs β=0 "
                    f"{pm(dc, '.4f', sign=True)}", bool(dc.mean() >= 0)))
  same = next((a for a in sweep if a["beta"] == control["beta"]), None)
  if same is None:
    rows.append(Claim("(ours) the routing divergence comes from the true domain labels",
                      "no true-label arm at the control's β", None))
  else:
    ctrl = np.asarray(result["final"][control["name"]]["jsd"])
    true = np.asarray(result["final"][same["name"]]["jsd"])
    rows.append(Claim(
        "(ours) the routing divergence comes from the true domain labels",
        f"true-domain routing JSD at β={same['beta']:g}: random labels {pm(ctrl, '.3g')} vs "
        f"true labels {pm(true, '.3g')} (lower in {int(np.sum(ctrl < true))}/{ctrl.size} "
        "seeds)", bool(np.all(ctrl < true))))
  return rows


def plot(result: dict, out: str) -> list[str]:
  names = [a["name"] for a in result["arms"]]
  labels = [n.replace("random labels, beta=", "random labels\nβ=").replace("beta=", "β=")
            for n in names]
  metrics = (("ce", "held-out CE − baseline's, per seed (nats)"),
             ("jsd", "routing JSD (nats)"), ("mi", "domain-expert MI (nats)"),
             ("load_entropy", "load entropy (nats)"))
  fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
  for ax, (m, label) in zip(axes, metrics, strict=True):
    for i, name in enumerate(names):
      v = _paired(result, name, m) if m == "ce" else np.asarray(result["final"][name][m])
      ax.bar(i, v.mean(), color=f"C{i}", alpha=0.6)
      ax.plot(np.full(v.size, i), v, "k.", ms=4)
    ax.set_xticks(range(len(names)), labels, fontsize=7)
    ax.set_title(label, fontsize=9)
  axes[0].axhline(0.0, color="grey", lw=0.8)
  axes[-1].axhline(result["log_experts"], color="grey", ls=":", lw=0.8)
  save_figure(fig, out, "final.png")

  fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
  for i, name in enumerate(names):
    c = result["curves"][name]
    for ax, m in zip(axes, ("ce", "jsd", "mi"), strict=True):
      v = np.asarray(c[m])
      ax.plot(c["eval_steps"], v.mean(0), color=f"C{i}", marker="o", ms=3, label=name)
      ax.fill_between(c["eval_steps"], v.min(0), v.max(0), color=f"C{i}", alpha=0.15)
  for ax, label in zip(axes, ("held-out CE", "routing JSD", "domain-expert MI"), strict=True):
    ax.set(xlabel="step", title=label)
  axes[0].legend(fontsize=7)
  save_figure(fig, out, "curves.png")
  return ["final.png", "curves.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/expert_divergence", helps=HELPS,
                       resumable=True,
                       quick_help="3 seeds, 5 arms, 300 steps of a tiny MoE: the pipeline in "
                                  "under 2 minutes")


def main(argv=None) -> dict:
  return run_experiment(
      argv, cli(), "expert_divergence", lambda cfg, args: run(cfg, args.checkpoint_dir), plot,
      format_table,
      lambda r: f"{len(r['arms'])} arms x {r['config']['seeds']} seeds, held-out rows with the "
                "true domain labels, mean ± sample std over seeds (paired: per seed, then mean).")


# Page text: the generated regions of docs/methods/expert_divergence.md


def _arms_table(result: dict) -> str:
  fmt = lambda v: P.f(v, 4)  # noqa: E731
  rows = []
  for arm in result["arms"]:
    m = result["final"][arm["name"]]
    rows.append([arm["name"].replace("beta", "β"), P.pm(m["ce"], fmt),
                 P.pm(_paired(result, arm["name"], "ce"), lambda v: P.signed(v, 4), fmt),
                 P.pm(m["jsd"], fmt), P.pm(m["mi"], fmt), P.pm(m["mi_soft"], fmt),
                 P.pm(m["load_entropy"], lambda v: P.f(v, 3))])
  return P.table(["arm", "held-out CE", "ΔCE vs β = 0 (paired)", "routing JSD",
                  "domain-expert MI (top-k)", "MI (soft)", "load entropy"], rows)


def page() -> dict[str, str]:
  quick = P.load("expert_divergence", "quick")
  qc = quick["config"]
  out = {
      "quick_seeds": str(qc["seeds"]),
      "quick_steps": P.thousands(qc["steps"]),
      "quick_model": f"{qc['layers']} layers, d = {qc['d_model']}, {qc['experts']} experts "
                     f"top-{qc['top_k']}, {qc['domains']} domains over {qc['vocab']} symbols",
      "quick_wall": P.seconds(quick["wall_time_s"]),
      "quick_table": _arms_table(quick),
      "quick_claims": P.claims_table("expert_divergence", quick),
      "quick_floor": P.f(np.mean(quick["entropy_rate"]), 3),
      "quick_log_experts": P.f(quick["log_experts"], 3),
      "quick_load": P.span([np.mean(quick["final"][a["name"]]["load_entropy"])
                            for a in quick["arms"]], lambda v: P.f(v, 3)),
  }
  if (full := P.recorded("expert_divergence", "full")) is not None:
    out["full"] = (f"Full run (`docs/results/expert_divergence/full/`, "
                   f"{full['config']['seeds']} seeds, {P.thousands(full['config']['steps'])} "
                   f"steps, {P.seconds(full['wall_time_s'])}):\n\n" + _arms_table(full)
                   + "\n\n" + P.claims_table("expert_divergence", full))
  else:
    out["full"] = P.not_recorded("expert_divergence")
  return out


if __name__ == "__main__":
  main()
