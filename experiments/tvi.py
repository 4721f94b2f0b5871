"""TVI: the visual integration point of a tiny VLM, TVI vs correctness, and the regulariser.

    python -m experiments.tvi [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed (``jaxlab.vision.tvi``, ``jaxlab.data.digit_questions``):

1. the digits split into train / test images; ``train_rows`` training questions, half
   "which digit?" with a hint token equal to the label 80% of the time, half "copy token
   k"; a share ``blind_share`` of them answered blind (image tokens replaced by the learned
   null token, so the blind pass is in distribution);
2. stage 1: the tiny VLM (``layers`` blocks, width ``d``) trained on cross-entropy for
   ``steps`` Adam steps;
3. chain of embedding on a probe set (held-out images, the training distribution): the
   per-layer profiles ``D_l`` over ``D_VT`` (sighted and blind answers differ) and ``D_T``,
   the VIP by the paper's rule at ``tau`` and by our automatic rule (``auto_share`` of
   the largest gap);
4. on the conflict set (held-out images, the hint never the label): accuracy, the share
   of answers equal to the hint (the language prior; chance 10%), and the Spearman
   correlation of correctness with TVI (layers from the VIP on) and with the same mean
   over the layers before it;
5. stage 2: from the stage-1 weights, ``finetune`` more steps per arm with
   ``L = CE - lambda TVI`` for each ``lambda`` in ``lams`` (0: plain continued training;
   the arms are one vmapped program), then conflict / consistent / copy accuracy.

The spec's scale (6-8 layers, d = 128) is ``--layers 8 --d 128 --heads 4`` (GPU); the full
run here is 6 layers at d = 64 to fit one CPU core. ``--noise 0.5`` adds Gaussian pixel noise
(std 0.5 on ``[0, 1]`` pixels) so that the image alone is about as reliable as the 80% hint:
on clean digits a fully trained model reads the image and the hint prior fades.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from scipy import stats

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.data import digit_questions as dq
from jaxlab.data import load_digits
from jaxlab.training import fit, minibatch_sampler
from jaxlab.vision import tvi

CHANCE = 1 / dq.NUM_DIGITS  # a uniform answer equals the hint this often
PRIOR_MIN = 2 * CHANCE  # "follows the hint more than chance": at least twice chance, every seed
LAM = 0.03  # the spec's lambda, the arm the regulariser claim is about

CONFIGS = {
    "smoke": dict(seeds=1, layers=1, d=16, heads=2, patch=4, noise=0.0, train_rows=64,
                  blind_share=0.1, hint_agree=0.8, steps=4, finetune=2, batch=8, lr=1e-3,
                  probe=64, test=64, tau=0.05, auto_share=0.5, lams=(0.0, 0.03)),
    "quick": dict(seeds=2, layers=4, d=32, heads=4, patch=4, noise=0.0, train_rows=4096,
                  blind_share=0.1, hint_agree=0.8, steps=400, finetune=150, batch=32, lr=2e-3,
                  probe=512, test=512, tau=0.05, auto_share=0.5, lams=(0.0, 0.03, 0.3)),
    "full": dict(seeds=3, layers=6, d=64, heads=4, patch=4, noise=0.0, train_rows=8192,
                 blind_share=0.1, hint_agree=0.8, steps=1500, finetune=400, batch=32, lr=1e-3,
                 probe=1024, test=1024, tau=0.05, auto_share=0.5, lams=(0.0, 0.03, 0.3)),
}


def vlm_config(cfg: dict) -> tvi.VLMConfig:
  side = 8 // cfg["patch"]
  return tvi.VLMConfig(num_layers=cfg["layers"], d_model=cfg["d"], num_heads=cfg["heads"],
                       num_patches=side * side, patch_dim=cfg["patch"] ** 2)


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, shared by every seed."""
  vcfg = vlm_config(cfg)
  net = tvi.graph(vcfg)
  opt = optax.adam(cfg["lr"])

  def ce(p, batch, _):
    q, blind = batch
    out = net.replace(params=p)(q.patches, q.text, blind)
    return optax.softmax_cross_entropy_with_integer_labels(out.logits, q.answer).mean()

  @jax.jit
  def train(key, data):
    k_init, k_fit = jax.random.split(key)
    params = tvi.create(vcfg, k_init).params
    res = fit(ce, opt, params, k_fit, num_steps=cfg["steps"],
              sample=minibatch_sampler(data, cfg["batch"]))
    return res.state.params, res.losses

  @jax.jit
  def finetune(key, params, data, vip):
    def one(lam):
      def loss(p, batch, _):
        q, blind = batch
        return tvi.tvi_loss(net.replace(params=p), q.patches, q.text, q.answer, vip, lam,
                            blind)

      res = fit(loss, opt, params, key, num_steps=cfg["finetune"], has_aux=True,
                sample=minibatch_sampler(data, cfg["batch"]))
      return res.state.params, res.metrics.aux

    return jax.vmap(one)(jnp.asarray(cfg["lams"], jnp.float32))

  @jax.jit
  def evaluate(params, q, vip):
    """Per-row answers and scores at ``vip``, and the set's chain-of-embedding profile with
    its VIPs (the probe set and the test sets share this one program)."""
    vis, blind = tvi.chain_of_embedding(net.replace(params=params), q.patches, q.text)
    dist = tvi.layer_distances(vis.hidden, blind.hidden)
    pred = jnp.argmax(vis.logits, -1)
    vt = tvi.vt_split(vis.logits, blind.logits)
    p_vt, p_t = tvi.layer_profile(dist, vt), tvi.layer_profile(dist, ~vt)
    tau_auto = tvi.auto_tau(p_vt, p_t, cfg["auto_share"])
    return {"correct": pred == q.answer, "follows_hint": pred == q.hint,
            "blind_correct": jnp.argmax(blind.logits, -1) == q.answer,
            "tvi": tvi.tvi_score(dist, vip), "pre": tvi.pre_vip_score(dist, vip),
            "profile_vt": p_vt, "profile_t": p_t, "vt_share": vt.mean(),
            "vip": tvi.visual_integration_point(p_vt, p_t, cfg["tau"]),
            "tau_auto": tau_auto, "vip_auto": tvi.visual_integration_point(p_vt, p_t, tau_auto)}

  return {"train": train, "finetune": finetune, "evaluate": evaluate,
          "num_layers": vcfg.num_layers}


def _spearman(score: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
  """Spearman's ``(rho, p-value)`` (scipy) of a score with 0/1 correctness; NaN when either
  is constant."""
  if np.ptp(score) == 0 or np.ptp(correct) == 0:
    return float("nan"), float("nan")
  res = stats.spearmanr(score, correct)
  return float(res.statistic), float(res.pvalue)


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  digits = load_digits("unit_images")
  tr, te = dq.split_indices(seed, len(digits.y))
  key = jax.random.key(seed)
  k_data, k_blind, k_train, k_probe, k_test, k_ft = jax.random.split(key, 6)
  kw = dict(patch=cfg["patch"], noise=cfg["noise"])
  q = dq.make_questions(k_data, digits.x[tr], digits.y[tr], cfg["train_rows"],
                        hint_agree=cfg["hint_agree"], **kw)
  blind = jax.random.bernoulli(k_blind, cfg["blind_share"], (cfg["train_rows"],))
  params, losses = prog["train"](k_train, (q, blind))
  probe = jax.device_get(prog["evaluate"](params, dq.make_questions(
      k_probe, digits.x[te], digits.y[te], cfg["probe"], hint_agree=cfg["hint_agree"], **kw), 0))
  L = prog["num_layers"]
  vip, vip_auto = int(probe["vip"]), int(probe["vip_auto"])
  # the regulariser's layers: the rule's VIP, else the automatic one, else the last layer
  vip_used = vip if vip <= L else (vip_auto if vip_auto <= L else L)
  k_c, k_a, k_p = jax.random.split(k_test, 3)
  sets = {"conflict": dq.make_questions(k_c, digits.x[te], digits.y[te], cfg["test"],
                                        which_share=1.0, hint_agree=0.0, **kw),
          "consistent": dq.make_questions(k_a, digits.x[te], digits.y[te], cfg["test"],
                                          which_share=1.0, hint_agree=1.0, **kw),
          "copy": dq.make_questions(k_p, digits.x[te], digits.y[te], cfg["test"],
                                    which_share=0.0, **kw)}

  def metrics(p) -> dict:
    ev = {n: jax.device_get(prog["evaluate"](p, s, vip_used)) for n, s in sets.items()}
    c = ev["conflict"]
    rho_after, p_after = _spearman(c["tvi"], c["correct"].astype(float))
    rho_before, p_before = _spearman(c["pre"], c["correct"].astype(float))
    return {"acc": {n: float(e["correct"].mean()) for n, e in ev.items()},
            "blind_acc": {n: float(e["blind_correct"].mean()) for n, e in ev.items()},
            "hint_follow": float(c["follows_hint"].mean()),
            "tvi_conflict": float(c["tvi"].mean()),
            "rho_after": rho_after, "p_after": p_after, "rho_before": rho_before,
            "p_before": p_before}

  base = metrics(params)
  ft_params, aux = jax.device_get(prog["finetune"](k_ft, params, (q, blind), vip_used))
  arms = {}
  for i, lam in enumerate(cfg["lams"]):
    m = metrics(jax.tree.map(lambda x, i=i: x[i], ft_params))  # numpy slices: no compiles
    m["final_ce"] = float(np.mean(aux["loss/ce"][i][-20:]))
    m["final_tvi"] = float(np.mean(aux["loss/tvi"][i][-20:]))
    arms[f"{lam:g}"] = m
  return {"seed": seed, "num_layers": L, "vip": vip, "vip_auto": vip_auto,
          "vip_used": vip_used, "tau_auto": float(probe["tau_auto"]),
          "vt_share": float(probe["vt_share"]),
          "profile_vt": [float(x) for x in probe["profile_vt"]],
          "profile_t": [float(x) for x in probe["profile_t"]],
          "train_final_loss": float(np.mean(losses[-20:])), "base": base, "arms": arms}


def _arr(result: dict, fn) -> np.ndarray:
  return np.array([fn(r) for r in result["runs"]], dtype=float)


def claims(result: dict) -> list[Claim]:
  """The claims as report rows, decided from a ``results.json`` dict.

  1. The language prior occurs: on the conflict set the stage-1 model answers the hint in
     at least ``PRIOR_MIN`` (twice chance) of the rows, in every seed.
  2. A VIP exists: the paper's rule at ``tau`` finds a layer ``l* <= L`` in every seed.
  3. TVI after the VIP correlates positively with correctness on the conflict set in every
     seed, and more strongly than the mean distance before the VIP (mean rho after > mean
     |rho before|; a NaN before-VIP rho, no layer before the VIP, counts as 0).
  4. The regulariser at lambda = 0.03 raises conflict-set accuracy over lambda = 0 (the same
     continued training without it): higher mean, and higher in every seed.
  """
  runs = result["runs"]
  if not runs:
    return []
  n = len(runs)
  follow = _arr(result, lambda r: r["base"]["hint_follow"])
  acc_c = _arr(result, lambda r: r["base"]["acc"]["conflict"])
  acc_a = _arr(result, lambda r: r["base"]["acc"]["consistent"])
  rows = [Claim(
      "The language prior occurs: on the conflict set the model answers the hint more than "
      "chance",
      f"hint answered in {pm(follow)} of conflict rows (chance {CHANCE:.2f}, threshold "
      f"{PRIOR_MIN:.2f} every seed); accuracy conflict {pm(acc_c)} vs consistent {pm(acc_a)}",
      bool(np.all(follow >= PRIOR_MIN)))]
  vip = _arr(result, lambda r: r["vip"])
  L = _arr(result, lambda r: r["num_layers"])
  found = vip <= L
  depth = ", ".join(f"{int(v)}/{int(m)}" if v <= m else "none" for v, m in zip(vip, L,
                                                                              strict=True))
  rows.append(Claim(
      f"A visual integration point exists (paper's rule, tau = {result['config']['tau']})",
      f"l* = {depth} (seeds); automatic rule: "
      + ", ".join(f"{int(r['vip_auto'])}" for r in runs) + "; paper: about 60% of depth",
      bool(np.all(found))))
  after = _arr(result, lambda r: r["base"]["rho_after"])
  before = np.nan_to_num(_arr(result, lambda r: r["base"]["rho_before"]), nan=0.0)
  rows.append(Claim(
      "TVI after the VIP tracks correctness on the conflict set; the distance before it less",
      f"Spearman rho after {pm(after)} vs before {pm(before)}; rho after > 0 in "
      f"{int(np.sum(after > 0))}/{n} seeds",
      bool(np.all(after > 0) and np.mean(after) > np.mean(np.abs(before)))))
  lams = [float(x) for x in result["config"]["lams"]]
  if 0.0 in lams and LAM in lams:
    reg = _arr(result, lambda r: r["arms"][f"{LAM:g}"]["acc"]["conflict"])
    plain = _arr(result, lambda r: r["arms"]["0"]["acc"]["conflict"])
    wins = int(np.sum(reg > plain))
    rows.append(Claim(
        f"The TVI regulariser (lambda = {LAM}) raises conflict-set accuracy",
        f"{pm(reg)} vs {pm(plain)} without it; higher in {wins}/{n} seeds",
        bool(reg.mean() > plain.mean() and wins == n)))
  return rows


TABLE_HEAD = ["model", "conflict acc", "hint answered (conflict)", "consistent acc",
              "copy acc", "blind acc (consistent)", "TVI (conflict)"]


def table_rows(result: dict) -> list[list[str]]:
  """One row for the stage-1 model, one per fine-tuning arm."""
  def row(name, get):
    return [name, pm(_arr(result, lambda r: get(r)["acc"]["conflict"])),
            pm(_arr(result, lambda r: get(r)["hint_follow"])),
            pm(_arr(result, lambda r: get(r)["acc"]["consistent"])),
            pm(_arr(result, lambda r: get(r)["acc"]["copy"])),
            pm(_arr(result, lambda r: get(r)["blind_acc"]["consistent"])),
            pm(_arr(result, lambda r: get(r)["tvi_conflict"]))]

  rows = [row("stage 1", lambda r: r["base"])]
  for lam in result["config"]["lams"]:
    rows.append(row(f"+ fine-tune, lambda = {lam:g}", lambda r, k=f"{lam:g}": r["arms"][k]))
  return rows


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  ax = axes[0]
  for i, r in enumerate(result["runs"]):
    layers = np.arange(len(r["profile_vt"]))
    ax.plot(layers, r["profile_vt"], "-o", color="C3", ms=3, alpha=0.8,
            label="D_l(VT)" if i == 0 else None)
    ax.plot(layers, r["profile_t"], "-o", color="C0", ms=3, alpha=0.8,
            label="D_l(T)" if i == 0 else None)
    if r["vip"] <= r["num_layers"]:
      ax.axvline(r["vip"], color="k", ls=":", alpha=0.5, label="VIP" if i == 0 else None)
  ax.set_xticks(np.arange(len(result["runs"][0]["profile_vt"])))
  ax.set(xlabel="layer l (0 = embedding)", ylabel="mean 1 - cos(vis, blind)",
         title="chain-of-embedding profile (probe set)")
  ax.legend(fontsize=8)
  ax = axes[1]
  names = ["stage 1", *[f"lam {lam:g}" for lam in result["config"]["lams"]]]
  vals = np.array([[r["base"]["acc"]["conflict"]]
                   + [r["arms"][f"{lam:g}"]["acc"]["conflict"] for lam in
                      result["config"]["lams"]] for r in result["runs"]])
  x = np.arange(len(names))
  ax.bar(x, vals.mean(0), color="C2", alpha=0.6)
  for s in range(vals.shape[0]):
    ax.plot(x, vals[s], "k.", ms=5)
  ax.set_xticks(x, names)
  ax.set(ylabel="conflict-set accuracy", title="hint conflicts with the image")
  fig.tight_layout()
  save_figure(fig, out, "tvi.png")
  return ["tvi.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/tvi",
                       quick_help="2 seeds, a 4-layer d = 32 model: the pipeline in about a "
                                  "minute",
                       helps={"layers": "transformer blocks L", "d": "model width",
                              "patch": "patch side (divides 8)",
                              "noise": "pixel noise std on the images",
                              "train_rows": "training questions",
                              "blind_share": "training rows answered blind (null image)",
                              "hint_agree": "P(hint = label) in training",
                              "steps": "stage-1 Adam steps",
                              "finetune": "stage-2 steps per lambda arm",
                              "probe": "probe rows for the profile and the VIP (equal to "
                                       "test: one compiled evaluation)",
                              "test": "rows per test set (conflict, consistent, copy)",
                              "tau": "the VIP rule's threshold",
                              "auto_share": "automatic tau = share x the largest gap",
                              "lams": "regulariser weights of the stage-2 arms"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "tvi")
    return {"runs": runs}

  return run_experiment(
      argv, cli(), "tvi", run, plot, _table,
      lambda r: f"{r['config']['seeds']} seeds, mean ± std over seeds; held-out digits.",
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/tvi.md


def _report(record: dict) -> str:
  c, runs = record["config"], record["runs"]
  vt = np.array([r["profile_vt"] for r in runs])
  t = np.array([r["profile_t"] for r in runs])
  profile = P.table(["layer l", "D_l(VT)", "D_l(T)", "gap"],
                    [[str(layer), P.pm(vt[:, layer], P.g), P.pm(t[:, layer], P.g),
                      P.pm(vt[:, layer] - t[:, layer], P.g)] for layer in range(vt.shape[1])])
  vips = ", ".join(("none" if r["vip"] > r["num_layers"] else str(r["vip"]))
                   + f" (auto {r['vip_auto']}, tau = {P.g(r['tau_auto'])})" for r in runs)
  rho = lambda key: P.pm([r["base"][key] for r in runs], lambda x: P.f(x, 3))  # noqa: E731
  return ("\n" + f"{c['layers']} layers, d = {c['d']}, {(8 // c['patch']) ** 2} image tokens, "
          f"{P.thousands(c['train_rows'])} training questions ({c['hint_agree']:.0%} hint "
          f"agreement, {c['blind_share']:.0%} blind), {P.thousands(c['steps'])} steps, then "
          f"{P.thousands(c['finetune'])} fine-tuning steps per lambda; {c['seeds']} seeds, "
          f"{P.seconds(record['wall_time_s'])}. Mean ± std over seeds on held-out digits "
          f"({P.thousands(c['test'])} questions per set):\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + f"Chain-of-embedding profile of the stage-1 model on {P.thousands(c['probe'])} probe "
          f"questions (share in D_VT: {P.pm([r['vt_share'] for r in runs])}):\n\n" + profile
          + "\n\n" + f"VIP per seed (tau = {c['tau']}): {vips}. Spearman rho of conflict-set "
          f"correctness with TVI (layers from the VIP): {rho('rho_after')} (p per seed: "
          + ", ".join(P.g(r["base"]["p_after"], 2) for r in runs) + "); with the mean distance "
          f"before the VIP: {rho('rho_before')} (p per seed: "
          + ", ".join(P.g(r["base"]["p_before"], 2) for r in runs) + ").\n\n"
          + P.claims_table("tvi", record) + "\n")


def page() -> dict[str, str]:
  noisy = P.recorded("tvi", "full_noisy")
  return {**P.quick_and_full("tvi", _report),
          "full_noisy": ("The noisy-image full run (`python -m experiments.tvi --noise 0.5 --out "
                         "docs/results/tvi/full_noisy`) is not recorded yet." if noisy is None
                         else "\nNoisy-image full run (`docs/results/tvi/full_noisy/`, pixel "
                         f"noise std {noisy['config']['noise']}): "
                         + _report(noisy).lstrip("\n"))}


if __name__ == "__main__":
  main()
