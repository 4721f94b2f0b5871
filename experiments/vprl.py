"""VPRL: visual planning on held-out grid maps, GRPO after random-trajectory SFT vs VPFT.

    python -m experiments.vprl [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. ``train_maps`` training layouts and ``test_maps`` held-out layouts of
   :class:`jaxlab.envs.GridWorld` (frozen lakes and mazes, 4-6 cells a side, each
   solvable), from disjoint keys;
2. data: a ``walk``-move random trajectory from each training map's start (stage 1) and a
   shortest path from it (VPFT), both resampled to the same ``train_maps * walk`` rows;
3. three arms from one initialization, each a transformer predicting the next image's 36
   tokens from the current image's (``jaxlab.agents.vprl``):
   *stage 1* (SFT on the random transitions), *VPFT* (SFT on the optimal transitions, the
   same steps), *VPRL* (stage 1, then ``grpo_iters`` GRPO iterations on the progress
   reward over the shortest paths' states: G = ``group``, temperature 1.1, KL 0.001 to
   stage 1);
4. on the held-out maps: greedy multi-step plans (the model's own images fed back,
   ``horizon`` steps): exact match (goal reached with no invalid step) and progress rate;
   and from each held-out start, ``group`` next images sampled at temperature 1.1: the share
   that is valid, that makes progress, and the share of starts whose group has a reward
   spread (what GRPO can learn from: the exploration stage 1 is for).

The paper (LVM-3B on FrozenLake / Maze / MiniBehavior) finds VPRL > VPFT > stage 1 in exact
match and progress rate; stage 1 alone gives valid but undirected moves.

Spec-scale flags for a GPU run: ``--d-model 128 --layers 4 --heads 4 --train-maps 2048
--sft-steps 4000 --grpo-iters 1000 --prompts 32 --minibatch 80`` (the paper's G = 10; its
10 GRPO epochs over the training states are about 1000 iterations of 32 states here).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from experiments import pages as P
from experiments.cli import ExperimentCLI
from experiments.records import clear_seed_runs, run_experiment, seed_runs
from experiments.reporting import Claim, pm, save_figure, table_and_claims
from jaxlab.agents import vprl
from jaxlab.envs import grid_world as gw
from jaxlab.models import transformer as tfm

ARMS = ("stage1", "vpft", "vprl")
LABELS = {"stage1": "stage 1 only (random SFT)", "vpft": "VPFT (optimal SFT)",
          "vprl": "VPRL (stage 1 + GRPO)"}
SAMPLE_TEMPERATURE = 1.1  # the paper's GRPO sampling temperature

CONFIGS = {
    "smoke": dict(seeds=1, train_maps=16, test_maps=8, walk=8, d_model=16, layers=1, heads=2,
                  sft_steps=10, batch=8, sft_lr=3e-3, grpo_iters=2, prompts=4, group=4,
                  minibatch=16, grpo_lr=3e-4, horizon=4),
    "quick": dict(seeds=1, train_maps=128, test_maps=64, walk=8, d_model=64, layers=2,
                  heads=4, sft_steps=400, batch=32, sft_lr=3e-3, grpo_iters=30, prompts=8,
                  group=10, minibatch=40, grpo_lr=3e-4, horizon=10),
    "full": dict(seeds=3, train_maps=256, test_maps=128, walk=12, d_model=64, layers=2,
                 heads=4, sft_steps=500, batch=32, sft_lr=3e-3, grpo_iters=200, prompts=16,
                 group=10, minibatch=40, grpo_lr=5e-4, horizon=12),
}


def make_programs(cfg: dict) -> dict:
  """The jitted programs of one scale, compiled once and shared by every seed."""
  params = gw.GridParams()
  model_cfg = tfm.TransformerConfig(vprl.VOCAB_SIZE, cfg["d_model"], cfg["heads"],
                                    cfg["layers"], vprl.SEQ_LEN)
  net = tfm.graph(model_cfg)
  rows = cfg["train_maps"] * cfg["walk"]
  max_len = 2 * gw.NUM_CELLS  # longer than any shortest path

  @functools.partial(jax.jit, static_argnums=1)
  def layouts(key, n):
    return jax.vmap(lambda k: gw.make_layout(k, params))(jax.random.split(key, n))

  @jax.jit
  def data(key, cells, start, dist):
    k_walk, k_opt = jax.random.split(key)
    m = cells.shape[0]
    walk = jax.vmap(lambda k, c, s: vprl.random_walk(k, c, s, cfg["walk"]))(
        jax.random.split(k_walk, m), cells, start)
    opt = jax.vmap(lambda k, c, s, d: vprl.optimal_path(k, c, s, d, max_len))(
        jax.random.split(k_opt, m), cells, start, dist)
    return walk, opt

  sft = jax.jit(functools.partial(
      tfm.fit_next_token, cfg=model_cfg, optimizer=_optimizer(cfg["sft_lr"], cfg["sft_steps"]),
      num_steps=cfg["sft_steps"], batch_size=cfg["batch"]))

  grpo_config = vprl.GRPOConfig(group_size=cfg["group"], temperature=SAMPLE_TEMPERATURE,
                                prompts_per_step=cfg["prompts"],
                                minibatch_size=cfg["minibatch"])
  grpo_steps = cfg["grpo_iters"] * cfg["prompts"] * cfg["group"] // cfg["minibatch"]
  optimizer = _optimizer(cfg["grpo_lr"], grpo_steps)

  @jax.jit
  def grpo(key, stage1_params, states):
    stage1 = net.replace(params=stage1_params)
    iteration = vprl.make_grpo_iteration(stage1, optimizer, states, grpo_config)
    init = vprl.GRPOState(stage1_params, optimizer.init(stage1_params))
    final, metrics = jax.lax.scan(iteration, init, jax.random.split(key, cfg["grpo_iters"]))
    return final.params, metrics

  @jax.jit
  def evaluate(key, arm_params, cells, start):
    """Every arm's greedy plans and sampled first steps (arm_params: stacked over arms)."""
    images = gw.render(cells, start)
    rep = jnp.repeat(images, cfg["group"], axis=0)

    def one(p):
      model = net.replace(params=p)
      plan = vprl.rollout(model, cells, start, cfg["horizon"])
      gen = vprl.next_image(model, rep, key, SAMPLE_TEMPERATURE)
      r, parse = vprl.progress_reward(rep, gen)
      grouped = r.reshape(-1, cfg["group"])
      return {"exact_match": plan.success.mean(), "progress_rate": plan.progress_rate.mean(),
              "plan_steps": plan.alive.sum(1).mean(),
              "sample_valid": jnp.mean(r > vprl.REWARD_INVALID),
              "sample_progress": jnp.mean(r == vprl.REWARD_PROGRESS),
              "sample_parsed": jnp.mean(parse.action != vprl.INVALID),
              "live_groups": jnp.mean(grouped.std(-1) > 0),
              "action_entropy": _action_entropy(parse.action.reshape(-1, cfg["group"]))}

    return jax.vmap(one)(arm_params)

  return {"layouts": layouts, "data": data, "sft": sft, "grpo": grpo, "evaluate": evaluate,
          "rows": rows}


def _optimizer(lr: float, steps: int) -> optax.GradientTransformation:
  """Adam with the paper's schedule shape (10% linear warmup, then cosine to 2% of ``lr``)
  and global-norm clipping at 1."""
  schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(steps // 10, 1), steps,
                                                0.02 * lr)
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))


def _action_entropy(actions: jax.Array) -> jax.Array:
  """Mean over starts of the entropy (nats) of the parsed moves among a group's valid ones."""
  counts = jnp.stack([jnp.sum(actions == a, -1) for a in range(4)], -1).astype(jnp.float32)
  total = counts.sum(-1, keepdims=True)
  prob = counts / jnp.maximum(total, 1.0)
  ent = -jnp.sum(jnp.where(prob > 0, prob * jnp.log(prob), 0.0), -1)
  return jnp.sum(jnp.where(total[:, 0] > 0, ent, 0.0)) / jnp.maximum(jnp.sum(total > 0), 1)


def _resample(rng: np.random.Generator, idx: np.ndarray, n: int) -> np.ndarray:
  """``n`` row indices covering ``idx`` evenly (each row ``n / len(idx)`` times, +-1)."""
  reps = np.tile(idx, -(-n // len(idx)))[:n]
  return rng.permutation(reps)


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  key = jax.random.key(seed)
  k_train, k_test, k_data, k_init, k_grpo, k_eval = jax.random.split(key, 6)
  cells, start, dist = prog["layouts"](k_train, cfg["train_maps"])
  t_cells, t_start, t_dist = prog["layouts"](k_test, cfg["test_maps"])
  cells_np, start_np = np.asarray(cells), np.asarray(start)
  train_keys = {c.tobytes() + s.tobytes() for c, s in zip(cells_np, start_np, strict=True)}
  overlap = sum(c.tobytes() + s.tobytes() in train_keys
                for c, s in zip(np.asarray(t_cells), np.asarray(t_start), strict=True))
  walk, opt = prog["data"](k_data, cells, start, dist)
  rng = np.random.default_rng(seed)
  n = prog["rows"]
  w_prev, w_nxt = np.asarray(walk.prev).reshape(-1, 36), np.asarray(walk.nxt).reshape(-1, 36)
  mask = np.asarray(opt.mask).reshape(-1)
  o_prev = np.asarray(opt.prev).reshape(-1, 36)[mask]
  o_nxt = np.asarray(opt.nxt).reshape(-1, 36)[mask]
  w_idx = _resample(rng, np.arange(len(w_prev)), n)
  o_idx = _resample(rng, np.arange(len(o_prev)), n)
  arms, losses = {}, {}
  for arm, (prev, nxt) in (("stage1", (w_prev[w_idx], w_nxt[w_idx])),
                           ("vpft", (o_prev[o_idx], o_nxt[o_idx]))):
    seq, loss_mask = vprl.sft_data(jnp.asarray(prev), jnp.asarray(nxt))
    arms[arm], losses[arm] = prog["sft"](k_init, tokens=seq, loss_mask=loss_mask)
  arms["vprl"], grpo_metrics = prog["grpo"](k_grpo, arms["stage1"], jnp.asarray(o_prev))
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *(arms[a] for a in ARMS))
  metrics = jax.device_get(prog["evaluate"](k_eval, stacked, t_cells, t_start))
  grpo_metrics = jax.device_get(grpo_metrics)
  optimal = np.asarray(t_dist)[np.arange(cfg["test_maps"]), np.asarray(t_start)[:, 0],
                               np.asarray(t_start)[:, 1]]
  return {"seed": seed,
          "arms": {a: {k: float(v[i]) for k, v in metrics.items()} for i, a in enumerate(ARMS)},
          "sft_final_loss": {a: float(np.mean(np.asarray(losses[a])[-20:]))
                             for a in ("stage1", "vpft")},
          "grpo": {k: np.asarray(v).tolist() for k, v in grpo_metrics.items()},
          "test_optimal_length": float(optimal.mean()), "test_overlap": int(overlap),
          "optimal_transitions": int(len(o_prev))}


def _per_seed(result: dict, arm: str, metric: str) -> np.ndarray:
  return np.array([r["arms"][arm][metric] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's claims as report rows, from a ``results.json`` dict of any scale.

  1. VPRL beats VPFT in exact match on held-out maps (mean over seeds higher).
  2. VPFT beats stage 1 alone in exact match.
  3. VPRL beats VPFT in progress rate.
  4. The effect stage 1 exists for occurs: sampled at temperature 1.1, stage 1's next images
     vary in reward within a group (GRPO's signal) on more held-out starts than VPFT's.
  5. GRPO on the progress reward makes stage 1's sampled next images valid more often
     (the paper reports fewer invalid moves after RL).
  """
  if not result["runs"]:
    return []
  em = {a: _per_seed(result, a, "exact_match") for a in ARMS}
  pr = {a: _per_seed(result, a, "progress_rate") for a in ARMS}
  live = {a: _per_seed(result, a, "live_groups") for a in ARMS}
  ent = {a: _per_seed(result, a, "action_entropy") for a in ARMS}
  valid = {a: _per_seed(result, a, "sample_valid") for a in ARMS}
  n = len(result["runs"])

  def wins(a, b, m):
    return int(np.sum(m[a] > m[b]))

  return [
      Claim("VPRL plans better than VPFT on held-out maps (exact match)",
            f"EM {pm(em['vprl'])} vs {pm(em['vpft'])}; higher in {wins('vprl', 'vpft', em)}/{n} "
            "seeds", bool(em["vprl"].mean() > em["vpft"].mean())),
      Claim("VPFT plans better than stage 1 alone (exact match)",
            f"EM {pm(em['vpft'])} vs {pm(em['stage1'])}; higher in "
            f"{wins('vpft', 'stage1', em)}/{n} seeds",
            bool(em["vpft"].mean() > em["stage1"].mean())),
      Claim("VPRL makes more progress than VPFT (progress rate)",
            f"PR {pm(pr['vprl'])} vs {pm(pr['vpft'])}; higher in {wins('vprl', 'vpft', pr)}/{n} "
            "seeds", bool(pr["vprl"].mean() > pr["vpft"].mean())),
      Claim("Random-trajectory SFT gives GRPO exploration: more groups with a reward spread "
            "than VPFT",
            f"groups with spread {pm(live['stage1'])} vs {pm(live['vpft'])}; entropy of the "
            f"valid moves {pm(ent['stage1'])} vs {pm(ent['vpft'])} nats",
            bool(live["stage1"].mean() > live["vpft"].mean())),
      Claim("GRPO on the progress reward makes the sampled next images valid more often",
            f"valid share at temperature {SAMPLE_TEMPERATURE}: VPRL {pm(valid['vprl'])} vs stage "
            f"1 {pm(valid['stage1'])}; higher in {wins('vprl', 'stage1', valid)}/{n} seeds",
            bool(valid["vprl"].mean() > valid["stage1"].mean())),
  ]


METRICS = (("exact_match", "exact match"), ("progress_rate", "progress rate"),
           ("sample_valid", "valid @T=1.1"), ("sample_progress", "progress @T=1.1"),
           ("live_groups", "groups with spread"), ("action_entropy", "move entropy (nats)"))
TABLE_HEAD = ["arm", *[label for _, label in METRICS]]


def table_rows(result: dict) -> list[list[str]]:
  """One row per arm: mean ± std over seeds of each held-out metric."""
  return [[LABELS[a], *[pm(_per_seed(result, a, m)) for m, _ in METRICS]] for a in ARMS]


def plot(result: dict, out: str) -> list[str]:
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
  x = np.arange(len(ARMS))
  for ax, metric in zip(axes[:2], ("exact_match", "progress_rate"), strict=True):
    vals = np.array([_per_seed(result, a, metric) for a in ARMS])
    ax.bar(x, vals.mean(1), color=["C7", "C1", "C0"], alpha=0.7)
    for s in range(vals.shape[1]):
      ax.plot(x, vals[:, s], "k.", ms=4)
    ax.set_xticks(x, ["stage 1", "VPFT", "VPRL"])
    ax.set(ylabel=metric.replace("_", " "), ylim=(0, 1))
  for r in result["runs"]:
    g = r["grpo"]
    axes[2].plot(g["reward"], color="C0", alpha=0.7)
    axes[2].plot(g["invalid"], color="C3", alpha=0.7)
  axes[2].set(xlabel="GRPO iteration", ylabel="mean reward (blue), invalid share (red)")
  fig.suptitle(f"held-out maps, {len(result['runs'])} seeds (bars: mean, dots: seeds)")
  save_figure(fig, out, "vprl.png")
  return ["vprl.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/vprl",
                       quick_help="1 seed, small model: the pipeline in about a minute and a "
                                  "half on one core",
                       helps={"train_maps": "training layouts", "test_maps": "held-out layouts",
                              "walk": "random-walk moves per training map (stage 1 rows)",
                              "sft_steps": "SFT steps of stage 1 and of VPFT",
                              "grpo_iters": "GRPO iterations (stage 2)",
                              "prompts": "states per GRPO iteration",
                              "group": "G: generations per state",
                              "minibatch": "rows per GRPO optimizer step",
                              "horizon": "steps of a held-out plan"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "vprl")
    return {"arms": list(ARMS), "runs": runs}

  return run_experiment(
      argv, cli(), "vprl", run, plot, _table,
      lambda r: (f"{r['config']['seeds']} seeds, mean ± std over seeds; held-out maps, greedy "
                 f"plans of {r['config']['horizon']} steps; samples at temperature "
                 f"{SAMPLE_TEMPERATURE}, G = {r['config']['group']}."),
      after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/vprl.md


def _report(record: dict) -> str:
  c, runs = record["config"], record["runs"]
  opt_len = np.array([r["test_optimal_length"] for r in runs])
  overlap = sum(r["test_overlap"] for r in runs)
  loss = {a: np.array([r["sft_final_loss"][a] for r in runs]) for a in ("stage1", "vpft")}
  return ("\n" + f"{c['train_maps']} training and {c['test_maps']} held-out maps, "
          f"transformer {c['layers']} layers d = {c['d_model']}, {P.thousands(c['sft_steps'])} SFT "
          f"steps per arm, {c['grpo_iters']} GRPO iterations of {c['prompts']} states x G = "
          f"{c['group']}, {c['seeds']} seeds, {P.seconds(record['wall_time_s'])}; mean ± std over "
          f"seeds on the held-out maps (optimal plan length {P.pm(opt_len)}; "
          f"{overlap} held-out maps equal to a training map):\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + "Final SFT loss per next-image token: stage 1 "
          f"{P.pm(loss['stage1'], lambda x: P.f(x, 3))}, VPFT "
          f"{P.pm(loss['vpft'], lambda x: P.f(x, 3))}.\n\n"
          + P.claims_table("vprl", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("vprl", _report)


if __name__ == "__main__":
  main()
