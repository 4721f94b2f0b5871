"""CARE: confidence-filtered evidence views vs an end-to-end network; matched vs greedy vs binary
entity rewards in REINFORCE.

    python -m experiments.care [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. **Yardstick**: issue 13's digits classifier (:class:`jaxlab.models.sample_quality.Yardstick`),
   trained from the seed; it recognises every digit below.
2. **Region questions** (:mod:`jaxlab.data.region_questions`): two-digit 24 x 24 canvases with
   per-scene pixel noise (std uniform in ``[0, noise]``); "is the digit at <quadrant> odd /
   greater than 4?".
3. **The CARE pipeline**: a small segmenter (canvas + query-region map -> soft mask of the
   queried digit, trained by pixel BCE on the box masks with ``jaxlab.training.fit``); the
   mask confidence ``C = 1 - H(M)/log 2``; the crop view (8 x 8 window of largest mask mass)
   and the masked view (mask-weighted canvas at the mask's centroid), each read by the
   Yardstick and turned into an answer; the global view, an end-to-end network (canvas + region
   map + attribute -> answer, same training set and steps); a majority vote of the three,
   where a mask with ``C < tau`` drops both mask views (the global view answers alone).
   Reported: accuracy against ``tau`` (``tau = 0`` keeps every mask, ``tau > 1`` none: the
   end-to-end network), the share of masks kept, and each view's accuracy on the more / less
   confident half of the masks. Both networks are GELU MLPs (:class:`jaxlab.nn.MLP`), not
   CNNs: on one CPU core a small CNN's convolutions cost several times more time per step.
4. **Entity rewards in REINFORCE**: a policy MLP reads the Yardstick's class probabilities
   of the 9 cells (8 x 8) of a one- or two-digit canvas (digits on the cell grid, different
   classes, no noise) and fills ``slots`` slots with a digit class or "none"; the entities
   are its non-none slots, embedded by the Yardstick's centred class-mean features (the
   reference entities likewise); the format is "entities first, then nones". Three arms
   from one initialization, one vmapped program: the reward is CARE's entity reward with
   the Hungarian matching, the same with the greedy matching, or the binary exact-set
   reward (times the format); GRPO advantages over ``group`` samples per canvas and the
   same entropy bonus in every arm. Evaluated by argmax decoding on held-out canvases:
   exact-set accuracy, set F1 and the Hungarian R_sim; and how often the greedy matching's
   similarity falls below the exact one on sampled sets (whether the effect the matching
   fixes occurs here).

The paper (10B VLMs on medical VQA) finds the evidence-grounded pipeline well above the
end-to-end VLM and uses the Hungarian-matched entity reward for its entity proposer; the
expected ordering in the set-prediction toy is Hungarian >= greedy > binary.
Spec scale on a GPU: ``--train 60000 --steps 6000 --seg_width 1024 --qa_width 1024
--rl_steps 10000``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, markdown_table, pm, save_figure, table_and_claims
from jaxlab.data import digit_layouts as dl
from jaxlab.data import region_questions as rq
from jaxlab.models import policy_gradient as pg
from jaxlab.models.sample_quality import Yardstick, YardstickConfig
from jaxlab.nn import MLP, Net
from jaxlab.training import fit, minibatch_sampler
from jaxlab.vision import care

TAUS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.01)  # 1.01: every mask dropped
ARMS = ("hungarian", "greedy", "binary")
VIEWS = ("crop", "masked", "global")
NONE = 10  # the "no entity" token of a slot

CONFIGS = {
    "smoke": dict(seeds=1, yardstick_steps=50, train=128, test=64, noise=1.2, steps=10,
                  batch=32, seg_width=16, qa_width=16, lr=3e-3, rl_train=128, rl_test=64,
                  slots=2, group=4, rl_batch=8, rl_steps=10, rl_hidden=16, rl_lr=1e-3,
                  entropy=0.05),
    "quick": dict(seeds=1, yardstick_steps=1500, train=3000, test=1000, noise=1.2, steps=400,
                  batch=64, seg_width=256, qa_width=256, lr=3e-3, rl_train=2000, rl_test=500,
                  slots=3, group=16, rl_batch=32, rl_steps=1000, rl_hidden=128, rl_lr=1e-3,
                  entropy=0.05),
    "full": dict(seeds=3, yardstick_steps=1500, train=8000, test=2000, noise=1.2, steps=1500,
                 batch=64, seg_width=256, qa_width=256, lr=2e-3, rl_train=4000, rl_test=1000,
                 slots=3, group=16, rl_batch=32, rl_steps=3000, rl_hidden=128, rl_lr=1e-3,
                 entropy=0.05),
}


# ----------------------------------------------------------------------------- networks


class Segmenter(nnx.Module):
  """Canvas and region map ``(B, S, S, 2)`` -> mask logits ``(B, S, S)`` (an MLP: a CNN's
  convolutions cost several times more CPU time at these sizes)."""

  def __init__(self, width: int, canvas: int, *, rngs: nnx.Rngs):
    self.mlp = MLP(2 * canvas * canvas, (width,), canvas * canvas, rngs=rngs)

  def __call__(self, x):
    return self.mlp(x.reshape(x.shape[0], -1)).reshape(x.shape[:-1])


class QANet(nnx.Module):
  """The end-to-end answerer: canvas and region map ``(B, S, S, 2)`` and the attribute ->
  answer logit ``(B,)`` (an MLP)."""

  def __init__(self, width: int, canvas: int, *, rngs: nnx.Rngs):
    self.mlp = MLP(2 * canvas * canvas + len(rq.ATTRIBUTES), (width, width // 2), 1, rngs=rngs)

  def __call__(self, x, attribute):
    x = jnp.concatenate([x.reshape(x.shape[0], -1),
                         jax.nn.one_hot(attribute, len(rq.ATTRIBUTES))], -1)
    return self.mlp(x)[..., 0]


def _inputs(q: rq.RegionQuestions) -> jax.Array:
  return jnp.stack([jnp.asarray(q.images), jnp.asarray(rq.region_maps(q.regions))], -1)


# ----------------------------------------------------------------------------- programs


@functools.cache
def _programs(cfg_items: tuple) -> dict:
  """The jitted programs of one configuration, shared by every seed."""
  cfg = dict(cfg_items)
  canvas = dl.CANVAS

  def train_bce(module_fn):
    """A jitted fit of ``module_fn(rngs)``'s logits to binary targets (the last input)."""
    @jax.jit
    def train(key, *data):
      k_init, k_fit = jax.random.split(key)
      net = Net.create(module_fn(nnx.Rngs(k_init)))

      def loss(p, batch, _):
        *inputs, target = batch
        return optax.sigmoid_binary_cross_entropy(net(*inputs, params=p), target).mean()

      res = fit(loss, optax.adam(cfg["lr"]), net.params, k_fit, num_steps=cfg["steps"],
                sample=minibatch_sampler(data, cfg["batch"]))
      return res.state.params, res.losses
    return train

  # the segmenter fits the digit's box mask; the end-to-end QA net the yes/no answer
  train_segmenter = train_bce(lambda rngs: Segmenter(cfg["seg_width"], canvas, rngs=rngs))
  train_qa = train_bce(lambda rngs: QANet(cfg["qa_width"], canvas, rngs=rngs))

  seg_graph = Net.create(Segmenter(cfg["seg_width"], canvas, rngs=nnx.Rngs(0))).graphdef
  qa_graph = Net.create(QANet(cfg["qa_width"], canvas, rngs=nnx.Rngs(0))).graphdef

  @jax.jit
  def masks_and_global(seg_params, qa_params, x, attributes):
    m = jax.nn.sigmoid(Net(seg_graph, seg_params)(x))
    glob = (Net(qa_graph, qa_params)(x, attributes) > 0).astype(jnp.int32)
    crop, masked = care.evidence_views(x[..., 0], m, dl.DIGIT)
    return m, care.mask_confidence(m), glob, crop, masked

  @jax.jit
  def vote(view_answers, confidence, tau):
    keep = confidence >= tau
    valid = jnp.stack([keep, keep, jnp.ones_like(keep)], -1)  # crop, masked, global
    return care.majority_vote(view_answers, valid, 2)

  programs = {"train_segmenter": train_segmenter, "train_qa": train_qa,
              "masks_and_global": masks_and_global, "vote": vote}
  programs.update(_rl_programs(cfg))
  return programs


def _rl_programs(cfg: dict) -> dict:
  slots, group = cfg["slots"], cfg["group"]

  def policy(in_dim, rngs):  # the policy reads the 9 cells' Yardstick class probabilities
    return Net.create(MLP(in_dim, (cfg["rl_hidden"],) * 2, slots * (NONE + 1), rngs=rngs))

  def logits_of(params, x):
    graph = policy(x.shape[-1], nnx.Rngs(0)).graphdef  # trace-time only: shapes, no values
    return Net(graph, params)(x).reshape(x.shape[0], slots, NONE + 1)

  def entities(tokens):
    """Non-none slots are the entities; the format is a prefix of entities, then nones."""
    valid = tokens != NONE
    after_none = jnp.cumsum(~valid, -1) > 0
    return valid, ~jnp.any(valid & after_none, -1)

  def rewards(tokens, ref_ids, ref_valid, emb):
    """``(3, ...)``: entity reward (Hungarian), entity reward (greedy), binary."""
    valid, fmt = entities(tokens)
    pe = emb[jnp.where(valid, tokens, 0)]
    re = emb[ref_ids]
    hung = care.entity_reward(pe, valid, re, ref_valid, format_ok=fmt).total
    greedy = care.entity_reward(pe, valid, re, ref_valid, format_ok=fmt,
                                matching="greedy").total
    binary = care.binary_set_reward(tokens, valid, ref_ids, ref_valid, 10) * fmt
    return jnp.stack([hung, greedy, binary])

  @jax.jit
  def train_arms(key, x, ref_ids, ref_valid, emb):
    k_init, k_fit = jax.random.split(key)
    init = policy(x.shape[-1], nnx.Rngs(k_init)).params

    def one(arm):
      def loss(p, _batch, k):
        k_idx, k_samp = jax.random.split(k)
        idx = jax.random.randint(k_idx, (cfg["rl_batch"],), 0, x.shape[0])
        logits = logits_of(p, x[idx])  # (B, slots, 11)
        tokens = jax.random.categorical(k_samp, logits[:, None], axis=-1,
                                        shape=(cfg["rl_batch"], group, slots))
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits)[:, None], tokens[..., None],
                                   -1)[..., 0].sum(-1)  # (B, G)
        shape = (cfg["rl_batch"], group, ref_ids.shape[1])
        r = rewards(tokens, jnp.broadcast_to(ref_ids[idx][:, None], shape),
                    jnp.broadcast_to(ref_valid[idx][:, None], shape), emb)[arm]
        adv = jax.lax.stop_gradient(pg.group_advantages(r))
        # an entropy bonus per slot, the same in every arm: without it a slot's policy
        # collapses early onto one class (seen with the shaped rewards) and stops exploring
        ent = -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), -1).mean()
        return -(adv * logp).mean() - cfg["entropy"] * ent, r.mean()

      res = fit(loss, optax.adam(cfg["rl_lr"]), init, k_fit, num_steps=cfg["rl_steps"],
                has_aux=True)
      return res.state.params, res.metrics.aux

    return jax.vmap(one)(jnp.arange(len(ARMS)))

  @jax.jit
  def evaluate_arms(key, params, x, ref_ids, ref_valid, emb):
    def one(p):
      logits = logits_of(p, x)
      tokens = jnp.argmax(logits, -1)
      valid, fmt = entities(tokens)
      exact = care.binary_set_reward(tokens, valid, ref_ids, ref_valid, 10) * fmt
      hits = jnp.sum(jax.nn.one_hot(jnp.where(valid, tokens, 10), 11)[..., :10], -2)
      refs = jnp.sum(jax.nn.one_hot(ref_ids, 10) * ref_valid[..., None], -2)
      tp = jnp.minimum(hits, refs).sum(-1)
      f1 = 2 * tp / jnp.maximum(valid.sum(-1) + ref_valid.sum(-1), 1)
      sim = care.similarity_reward(emb[jnp.where(valid, tokens, 0)], valid, emb[ref_ids],
                                   ref_valid)
      # sampled sets: how often the greedy matching's similarity is below the exact one
      samp = jax.random.categorical(key, logits, axis=-1)
      sv, _ = entities(samp)
      s = care.cosine_similarity(emb[jnp.where(sv, samp, 0)], emb[ref_ids])
      gap = (care.matched_similarity(s, care.hungarian_match(s, sv, ref_valid))
             - care.matched_similarity(s, care.greedy_match(s, sv, ref_valid)))
      return {"exact": exact.mean(), "f1": f1.mean(), "sim": sim.mean(),
              "format": fmt.mean(), "greedy_below": (gap > 1e-5).mean(),
              "greedy_gap": gap.mean()}

    return jax.vmap(one)(params)

  return {"train_arms": train_arms, "evaluate_arms": evaluate_arms}


# ----------------------------------------------------------------------------- one seed


def _set_task(key: jax.Array, n: int, ys: Yardstick):
  """One- or two-digit canvases on the 3 x 3 grid of 8 x 8 cells (different classes), as
  the Yardstick's class probabilities of each cell ``(n, 9 * 10)``, and their digit sets."""
  k_lay, k_names, k_render = jax.random.split(key, 3)
  lay = dl.random_layouts(k_lay, n, two_prob=0.5, step=dl.DIGIT)
  shift = np.asarray(jax.random.randint(k_names, (n,), 1, 10))
  names = lay.names.copy()
  names[:, 1] = np.where(lay.valid[:, 1], (names[:, 0] + shift) % 10, 0)
  lay = dl.Layout(lay.boxes, names.astype(np.int32), lay.valid)
  side = dl.CANVAS // dl.DIGIT
  cells = dl.render(k_render, lay).reshape(n, side, dl.DIGIT, side, dl.DIGIT)
  cells = cells.transpose(0, 1, 3, 2, 4).reshape(n * side * side, dl.DIGIT * dl.DIGIT)
  probs = _class_probs(ys.net, jnp.asarray(cells))  # the Yardstick's class probabilities
  return np.asarray(probs).reshape(n, -1), lay.names, lay.valid


@jax.jit
def _class_probs(net: Net, x: jax.Array) -> jax.Array:
  return jax.nn.softmax(net(x), -1)


def class_embeddings(ys: Yardstick) -> np.ndarray:
  """``(10, F)`` centred class means of the Yardstick's features of its held-out digits."""
  f = ys.features(ys.reference)
  means = np.stack([f[ys.reference_labels == c].mean(0) for c in range(10)])
  return (means - means.mean(0)).astype(np.float32)


def run_seed(seed: int, cfg: dict) -> dict:
  prog = _programs(tuple(sorted(cfg.items())))
  keys = jax.random.split(jax.random.key(seed), 8)
  ys = Yardstick.create(seed, YardstickConfig(steps=cfg["yardstick_steps"]))
  train = rq.make_questions(keys[0], cfg["train"], noise=cfg["noise"])
  test = rq.make_questions(keys[1], cfg["test"], noise=cfg["noise"])
  x_train, x_test = _inputs(train), _inputs(test)
  seg_params, seg_loss = prog["train_segmenter"](keys[2], x_train, jnp.asarray(train.masks))
  qa_params, qa_loss = prog["train_qa"](keys[3], x_train, jnp.asarray(train.attributes),
                                        jnp.asarray(train.answers, jnp.float32))
  m, conf, glob, crop, masked = prog["masks_and_global"](seg_params, qa_params, x_test,
                                                         jnp.asarray(test.attributes))
  digits = {v: ys.predict(np.asarray(c).reshape(len(test), -1))
            for v, c in (("crop", crop), ("masked", masked))}
  answers = np.stack([rq.answer_of(digits["crop"], test.attributes),
                      rq.answer_of(digits["masked"], test.attributes), np.asarray(glob)], -1)
  conf = np.asarray(conf)
  correct = answers == test.answers[:, None]
  acc_tau = [float(np.mean(np.asarray(prog["vote"](answers, conf, t)) == test.answers))
             for t in TAUS]
  keep = conf >= care.TAU
  high = conf >= np.median(conf)  # the more confident half of the masks
  mask_iou = (np.asarray(m > 0.5) & (test.masks > 0)).sum((1, 2)) / np.maximum(
      (np.asarray(m > 0.5) | (test.masks > 0)).sum((1, 2)), 1)

  def split_acc(view: int, sel: np.ndarray) -> float | None:
    return float(correct[sel, view].mean()) if sel.any() else None

  pipeline = {
      "acc_tau": acc_tau, "kept_tau": [float(np.mean(conf >= t)) for t in TAUS],
      "view_acc": {v: float(correct[:, i].mean()) for i, v in enumerate(VIEWS)},
      "view_acc_kept": {v: split_acc(i, keep) for i, v in enumerate(VIEWS)},
      "view_acc_dropped": {v: split_acc(i, ~keep) for i, v in enumerate(VIEWS)},
      "view_acc_high": {v: split_acc(i, high) for i, v in enumerate(VIEWS)},
      "view_acc_low": {v: split_acc(i, ~high) for i, v in enumerate(VIEWS)},
      "digit_acc": {v: float(np.mean(d == test.digits)) for v, d in digits.items()},
      "confidence_quartiles": [float(x) for x in np.quantile(conf, [0, 0.25, 0.5, 0.75, 1])],
      "confidence_noise_corr": float(np.corrcoef(conf, test.noise)[0, 1]),
      "mask_iou_kept": float(mask_iou[keep].mean()) if keep.any() else None,
      "mask_iou_dropped": float(mask_iou[~keep].mean()) if (~keep).any() else None,
      "seg_final_loss": float(np.mean(seg_loss[-20:])),
      "qa_final_loss": float(np.mean(qa_loss[-20:]))}

  emb = jnp.asarray(class_embeddings(ys))
  x_rl, ids_rl, valid_rl = _set_task(keys[4], cfg["rl_train"], ys)
  x_ev, ids_ev, valid_ev = _set_task(keys[5], cfg["rl_test"], ys)
  params, train_reward = prog["train_arms"](keys[6], jnp.asarray(x_rl), jnp.asarray(ids_rl),
                                            jnp.asarray(valid_rl), emb)
  ev = jax.device_get(prog["evaluate_arms"](keys[7], params, jnp.asarray(x_ev),
                                            jnp.asarray(ids_ev), jnp.asarray(valid_ev), emb))
  train_reward = np.asarray(train_reward)
  tail = max(1, cfg["rl_steps"] // 10)
  rl = {arm: {**{k: float(v[i]) for k, v in ev.items()},
              "train_reward_final": float(train_reward[i, -tail:].mean())}
        for i, arm in enumerate(ARMS)}
  return {"seed": seed, "yardstick_test_accuracy": ys.test_accuracy, "pipeline": pipeline,
          "rl": rl, "rl_reward_curve": train_reward.tolist()}


# ----------------------------------------------------------------------------- report


def _tau_index(tau: float) -> int:
  return TAUS.index(tau)


def _acc(result: dict, tau: float) -> np.ndarray:
  i = _tau_index(tau)
  return np.array([r["pipeline"]["acc_tau"][i] for r in result["runs"]])


def _rl(result: dict, arm: str, metric: str) -> np.ndarray:
  return np.array([r["rl"][arm][metric] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. The evidence pipeline at ``tau = 0.7`` beats the end-to-end network (every mask dropped):
     higher mean accuracy and higher in every seed.
  2. The confidence filter helps: accuracy at ``tau = 0.7`` at least that with every mask kept
     (``tau = 0``) in every seed and higher on average; not tested (``None``) where the filter
     drops no mask in some seed.
  3. The effect the filter exploits occurs: the crop view is more accurate on the more
     confident half of the masks than on the less confident half, in every seed.
  4. Hungarian >= greedy: exact-set accuracy of the Hungarian-rewarded policy at least the
     greedy-rewarded one's (mean over seeds).
  5. Greedy > binary: the greedy-matched entity reward trains a better policy than the
     binary reward (mean exact-set accuracy higher, and in every seed).
  6. The effect the exact matching fixes occurs: the greedy matching's similarity is below
     the Hungarian one on some sampled sets (share > 0 in every seed).
  """
  runs = result["runs"]
  if not runs:
    return []
  n = len(runs)
  rows = []
  pipe, e2e, nofilter = _acc(result, care.TAU), _acc(result, TAUS[-1]), _acc(result, 0.0)
  rows.append(Claim(
      "The confidence-filtered evidence pipeline answers better than the end-to-end network",
      f"accuracy {pm(pipe)} at tau = {care.TAU} vs {pm(e2e)} (end-to-end); higher in "
      f"{int(np.sum(pipe > e2e))}/{n} seeds", bool(pipe.mean() > e2e.mean() and
                                                   np.all(pipe > e2e))))
  dropped = np.array([1 - r["pipeline"]["kept_tau"][_tau_index(care.TAU)] for r in runs])
  active = bool(np.all(dropped > 0))
  rows.append(Claim(
      f"Dropping masks with confidence below {care.TAU} helps",
      f"accuracy {pm(pipe)} at tau = {care.TAU} vs {pm(nofilter)} with every mask kept; "
      f"{pm(dropped, '.3f')} of the masks dropped"
      + ("" if active else " (the filter is idle in some seed: not tested)"),
      bool(np.all(pipe >= nofilter) and pipe.mean() > nofilter.mean()) if active else None))
  high = np.array([r["pipeline"]["view_acc_high"]["crop"] for r in runs])
  low = np.array([r["pipeline"]["view_acc_low"]["crop"] for r in runs])
  rows.append(Claim(
      "Low mask confidence flags wrong evidence (the effect the filter needs)",
      f"crop-view accuracy {pm(high)} on the more confident half of the masks vs {pm(low)} on "
      f"the less confident half; higher in {int(np.sum(high > low))}/{n} seeds",
      bool(np.all(high > low))))
  ex = {a: _rl(result, a, "exact") for a in ARMS}
  rows.append(Claim(
      "The Hungarian-matched entity reward trains at least as well as the greedy-matched one",
      f"exact-set accuracy {pm(ex['hungarian'])} vs {pm(ex['greedy'])} (greedy); at least as "
      f"high in {int(np.sum(ex['hungarian'] >= ex['greedy']))}/{n} seeds",
      bool(ex["hungarian"].mean() >= ex["greedy"].mean())))
  rows.append(Claim(
      "The matched entity reward trains better than the binary exact-set reward",
      f"exact-set accuracy {pm(ex['greedy'])} (greedy-matched) vs {pm(ex['binary'])} "
      f"(binary); higher in {int(np.sum(ex['greedy'] > ex['binary']))}/{n} seeds",
      bool(ex["greedy"].mean() > ex["binary"].mean() and np.all(ex["greedy"] > ex["binary"]))))
  below = _rl(result, "hungarian", "greedy_below")
  rows.append(Claim(
      "Greedy matching under-scores some sampled sets (the effect the exact matching fixes)",
      f"share of sampled sets with greedy similarity below the optimum {pm(below)} "
      f"(mean gap {pm(_rl(result, 'hungarian', 'greedy_gap'), '.4f')})",
      bool(np.all(below > 0))))
  return rows


TAU_HEAD = ["tau", "accuracy", "masks kept"]
RL_HEAD = ["reward", "exact-set accuracy", "set F1", "R_sim (Hungarian)", "well-formed"]


def tau_rows(result: dict) -> list[list[str]]:
  """One row per threshold: pipeline accuracy and the share of masks kept."""
  rows = []
  for i, t in enumerate(TAUS):
    label = "> 1 (end-to-end network)" if t > 1 else f"{t:g}"
    rows.append([label, pm([r["pipeline"]["acc_tau"][i] for r in result["runs"]]),
                 pm([r["pipeline"]["kept_tau"][i] for r in result["runs"]], ".2f")])
  return rows


def rl_rows(result: dict) -> list[list[str]]:
  """One row per reward arm."""
  return [[arm, pm(_rl(result, arm, "exact")), pm(_rl(result, arm, "f1")),
           pm(_rl(result, arm, "sim")), pm(_rl(result, arm, "format"), ".2f")] for arm in ARMS]


VIEW_HEAD = ["view", "accuracy", "more confident half of the masks",
             "less confident half", f"kept at tau = {care.TAU}", "dropped"]


def view_rows(result: dict) -> list[list[str]]:
  """One row per evidence view: accuracy overall, on the more / less confident half of the
  masks and on the masks kept / dropped at tau = 0.7."""
  def vals(v, field):
    xs = [r["pipeline"][field][v] for r in result["runs"]]
    xs = [x for x in xs if x is not None]
    return pm(xs) if xs else "-"
  return [[v, vals(v, "view_acc"), vals(v, "view_acc_high"), vals(v, "view_acc_low"),
           vals(v, "view_acc_kept"), vals(v, "view_acc_dropped")] for v in VIEWS]


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  taus = np.array(TAUS[:-1])
  acc = np.array([r["pipeline"]["acc_tau"] for r in result["runs"]])
  kept = np.array([r["pipeline"]["kept_tau"] for r in result["runs"]])
  ax = axes[0]
  ax.errorbar(taus, acc[:, :-1].mean(0), acc[:, :-1].std(0), marker="o", label="pipeline")
  ax.axhline(acc[:, -1].mean(), color="C3", ls="--", label="end-to-end network")
  ax.axvline(care.TAU, color="k", lw=0.5)
  ax.set(xlabel="confidence threshold tau", ylabel="question accuracy")
  ax2 = ax.twinx()
  ax2.plot(taus, kept[:, :-1].mean(0), "C2:", label="masks kept")
  ax2.set(ylabel="share of masks kept", ylim=(0, 1.05))
  ax.legend(loc="lower left", fontsize=8)
  ax = axes[1]
  for i, arm in enumerate(ARMS):
    curves = np.array([np.asarray(r["rl_reward_curve"][i]) for r in result["runs"]])
    k = max(1, curves.shape[1] // 50)
    sm = curves[:, : curves.shape[1] // k * k].reshape(curves.shape[0], -1, k).mean(-1)
    # the binary reward has another scale: plot each arm's curve over its own maximum (4 or 1)
    ax.plot(np.arange(sm.shape[1]) * k, sm.mean(0) / (1.0 if arm == "binary" else 4.0),
            label=arm)
  ax.set(xlabel="REINFORCE step", ylabel="training reward / max reward")
  ax.legend(fontsize=8)
  fig.suptitle(f"CARE, {len(result['runs'])} seed(s)")
  save_figure(fig, out, "care.png")
  return ["care.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/care",
                       quick_help="1 seed, small training sets: the whole pipeline in about "
                                  "a minute",
                       helps={"train": "training questions (segmenter and end-to-end network)",
                              "test": "test questions", "noise": "largest per-scene noise std",
                              "steps": "Adam steps of the segmenter and the end-to-end network",
                              "slots": "entity slots of the REINFORCE policy",
                              "group": "samples per canvas (GRPO group)",
                              "rl_steps": "REINFORCE steps per reward arm",
                              "entropy": "entropy bonus per slot (every arm)"})


def _table(result: dict) -> str:
  return (markdown_table(TAU_HEAD, tau_rows(result)) + "\n\n"
          + markdown_table(VIEW_HEAD, view_rows(result)) + "\n\n"
          + table_and_claims(RL_HEAD, rl_rows(result), claims(result)))


def main(argv=None) -> dict:
  def run(cfg, args):
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg), "care")
    return {"taus": list(TAUS), "arms": list(ARMS), "runs": runs}

  return run_experiment(
      argv, cli(), "care", run, plot, _table,
      lambda r: f"{r['config']['seeds']} seed(s), mean ± std over seeds.",
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/care.md


def _report(record: dict) -> str:
  runs, c = record["runs"], record["config"]
  ys_acc = np.array([r["yardstick_test_accuracy"] for r in runs])
  q = np.array([r["pipeline"]["confidence_quartiles"] for r in runs])
  corr = np.array([r["pipeline"]["confidence_noise_corr"] for r in runs])
  digit = {v: np.array([r["pipeline"]["digit_acc"][v] for r in runs]) for v in ("crop", "masked")}
  spread = f"mean ± std over {c['seeds']} seeds" if c["seeds"] > 1 else "one seed"
  return ("\n" + f"{P.thousands(c['train'])} training and {P.thousands(c['test'])} test questions, "
          f"noise std up to {c['noise']}, segmenter and end-to-end MLPs of width "
          f"{c['seg_width']} / {c['qa_width']} ({P.thousands(c['steps'])} steps each); REINFORCE "
          f"with {c['slots']} slots, groups of {c['group']}, {P.thousands(c['rl_steps'])} steps "
          f"per arm; {P.seconds(record['wall_time_s'])}; {spread}.\n\n"
          + "Accuracy of the pipeline against the confidence threshold (above 1 every mask is "
          "dropped: the end-to-end network alone):\n\n"
          + P.table(TAU_HEAD, tau_rows(record)) + "\n\n"
          + "Each view's answer accuracy:\n\n"
          + P.table(VIEW_HEAD, view_rows(record)) + "\n\n"
          + f"Mask confidence quartiles (min, 25%, median, 75%, max): "
          f"{', '.join(P.f(x) for x in q.mean(0))}; correlation with the scene's noise "
          f"{P.pm(corr)}. Digit accuracy of the Yardstick on the crop view {P.pm(digit['crop'])}, "
          f"on the masked view {P.pm(digit['masked'])} (on clean held-out digits "
          f"{P.pm(ys_acc)}).\n\n"
          + "REINFORCE set prediction (argmax decoding on held-out canvases):\n\n"
          + P.table(RL_HEAD, rl_rows(record)) + "\n\n"
          + P.claims_table("care", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("care", _report)


if __name__ == "__main__":
  main()
