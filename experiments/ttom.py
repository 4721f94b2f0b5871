"""TTOM: test-time LoRA optimisation toward a layout, with a memory, on layout-conditioned digits.

    python -m experiments.ttom [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. a tiny diffusion transformer (``jaxlab.generative.ttom.DiT``: 4 x 4 patches of a 24 x 24
   canvas, the shared transformer with cross-attention to ``[null, digit tokens]``) trained
   with ``jaxlab.models.ddpm.eps_loss`` on ``jaxlab.data.digit_layouts`` scenes (1-2 digits
   at random positions; the caption names the digits, not where they are);
2. the probe (the spec's risk): real scenes noised to the timesteps of the optimised
   sampling steps, each layer's instance attention maps vs the true boxes (attention-box
   IoU, top-``|box|`` pixels), against the IoU of a map that ignores the image
   (uniform over the canvas: its top pixels are arbitrary; we report the expected IoU of
   ``|box|`` random pixels, ``64 / (2 * 576 - 64)``); the adapters go on the layer with the
   best IoU (the paper picked its layer by such probing [P]) unless ``--layer`` is given;
3. the shared yardstick (``jaxlab.models.sample_quality``, trained from the same seed);
4. a stream of ``prompts`` prompts drawn from ``types`` layout types (boxes jittered by up
   to ``jitter`` pixels), ``per_prompt`` samples each, the same noise for every arm:
   base (the sampler unchanged), latent guidance, test-time LoRA (fresh adapters per
   prompt) and LoRA with memory (read by layout key; load only / load + update /
   optimise and insert by similarity thresholds; LFU eviction at ``capacity``);
5. per arm: classifier accuracy of the 8 x 8 crop in each box for the digit it should
   hold, attention-box IoU of the loss layer's maps after the last optimised step,
   iterations per prompt (optimiser or guidance), Frechet distance of the box crops to
   real digits (yardstick features).

Sized for one CPU core (our sizes; the spec's model is a tiny DiT with 20-30 sampling steps,
200 prompts from 10 layout types). A GPU run: ``--d-model 128 --layers 6 --train-steps 20000
--prompts 200 --types 10 --per-prompt 8``.
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
from experiments.reporting import Claim, pm, save_digit_grid, save_figure, table_and_claims
from jaxlab.data import digit_layouts as dl
from jaxlab.generative import ttom
from jaxlab.models import ddpm
from jaxlab.models.sample_quality import Yardstick, YardstickConfig
from jaxlab.training.fit import fit, minibatch_sampler

ARMS = ("base", "guidance", "lora", "memory")
ARM_NAMES = {"base": "base", "guidance": "latent guidance", "lora": "test-time LoRA",
             "memory": "LoRA + memory"}
BETTER = 0.05  # "improves": box accuracy at least 0.05 above
FEWER = 0.5  # memory: at most half the iterations per prompt ...
SAME = 0.05  # ... at box accuracy at most 0.05 below test-time LoRA
CHANCE_IOU = 64 / (2 * 576 - 64)

CONFIGS = {
    "smoke": dict(step=4, seeds=1, d_model=16, heads=1, layers=2, train_steps=20, batch=16,
                  train_scenes=64, sample_steps=6, max_beta=0.5, yardstick_steps=30, layer=-1,
                  rank=4,
                  alpha=4.0, lr=0.03, iters=2, opt_steps=2, threshold=0.25,
                  guidance_step=30.0, types=3, prompts=4, per_prompt=2, jitter=1, capacity=2,
                  load_sim=0.9, update_sim=0.5, probe_scenes=16),
    "quick": dict(step=4, seeds=1, d_model=32, heads=2, layers=3, train_steps=1500, batch=32,
                  train_scenes=3000, sample_steps=20, max_beta=0.5, yardstick_steps=800,
                  layer=-1, rank=32,
                  alpha=32.0, lr=0.03, iters=8, opt_steps=5, threshold=0.25,
                  guidance_step=30.0, types=6, prompts=24, per_prompt=4, jitter=0, capacity=4,
                  load_sim=0.9, update_sim=0.5, probe_scenes=128),
    "full": dict(step=4, seeds=3, d_model=64, heads=2, layers=3, train_steps=2500, batch=32,
                 train_scenes=4000, sample_steps=20, max_beta=0.5, yardstick_steps=1500,
                 layer=-1, rank=32,
                 alpha=32.0, lr=0.03, iters=8, opt_steps=5, threshold=0.25,
                 guidance_step=30.0, types=8, prompts=32, per_prompt=4, jitter=0, capacity=6,
                 load_sim=0.9, update_sim=0.5, probe_scenes=256),
}


def dit_config(cfg: dict) -> ttom.DiTConfig:
  return ttom.DiTConfig(d_model=cfg["d_model"], num_heads=cfg["heads"], num_layers=cfg["layers"])


def make_schedule(cfg: dict):
  """Cosine betas capped at ``max_beta``: uncapped (0.999) the first reverse step of a
  20-step chain divides by ``sqrt(alpha) ~ 0.03`` and the samples are noise."""
  return ddpm.make_schedule(cfg["sample_steps"], "cosine", max_beta=cfg["max_beta"])


def tto_config(cfg: dict, layer: int) -> ttom.TTOConfig:
  return ttom.TTOConfig(layer=layer, loss_layers=(layer,), rank=cfg["rank"],
                        alpha=float(cfg["alpha"]), lr=cfg["lr"], opt_steps=cfg["opt_steps"],
                        iters=cfg["iters"], threshold=cfg["threshold"],
                        guidance_step=cfg["guidance_step"])


def train(key, cfg: dict, dcfg: ttom.DiTConfig, schedule) -> tuple:
  k_init, k_lay, k_img, k_fit = jax.random.split(key, 4)
  net = ttom.make_dit(dcfg, int(jax.random.randint(k_init, (), 0, 2**31 - 1)))
  lay = dl.random_layouts(k_lay, cfg["train_scenes"], step=cfg["step"])
  data = (jnp.asarray(dl.render(k_img, lay)), jnp.asarray(dl.caption_tokens(lay)))
  steps = cfg["train_steps"]

  def loss(p, batch, k):
    x, cap = batch
    return ddpm.eps_loss(k, net, schedule, x, params=p, cond=cap)

  opt = optax.chain(optax.clip_by_global_norm(1.0),
                    optax.adam(optax.cosine_decay_schedule(2e-3, steps, 0.1)))
  res = jax.jit(lambda p, k: fit(loss, opt, p, k, num_steps=steps,
                                 sample=minibatch_sampler(data, cfg["batch"])))(net.params, k_fit)
  return net.replace(params=res.state.params), np.asarray(res.losses)


def probe(key, net, dcfg, schedule, cfg: dict) -> dict:
  """Attention-box IoU per layer on real two-digit scenes noised to the optimised steps'
  timesteps (and a middle one)."""
  k_lay, k_img, k_noise = jax.random.split(key, 3)
  n = cfg["probe_scenes"]
  lay = dl.random_layouts(k_lay, n, two_prob=1.0, step=cfg["step"])
  x0 = jnp.asarray(dl.render(k_img, lay))
  cap, valid, boxes = (jnp.asarray(a) for a in (dl.caption_tokens(lay), lay.valid, lay.boxes))
  T = schedule.num_steps
  ts = [T - 1 - i for i in range(cfg["opt_steps"])] + [T // 2]

  @jax.jit
  def iou_at(t):
    xt = ddpm.q_sample(schedule, x0, jnp.full((n,), t),
                       jax.random.normal(jax.random.fold_in(k_noise, t), x0.shape))
    _, cross = net.module().forward(xt, jnp.full((n,), t), cap, return_attention=True)
    maps = jax.vmap(lambda c: ttom.instance_maps(c, cap, valid, dcfg))(cross)
    return jnp.nanmean(ttom.box_iou(maps, boxes[None], valid[None]), axis=(1, 2))

  per_t = np.stack([np.asarray(iou_at(t)) for t in ts])  # (len(ts), L)
  return {"timesteps": ts, "iou": per_t.round(4).tolist(),
          "iou_opt_steps": per_t[:-1].mean(0).round(4).tolist()}


def make_stream(net, dcfg, schedule, tcfg: ttom.TTOConfig, cfg: dict, mode: str):
  """``run(keys, caption, valid, targets, lkeys, load_sim, update_sim, optimise) -> per-prompt
  records``: one jitted scan over the prompt stream with the memory as its carry.

  One program serves three arms (one compile): ``mode="lora"`` with ``optimise=False`` is the
  base sampler (fresh adapters have ``B = 0``, so the merged weights are the base weights;
  the maps are recorded), with infinite similarity thresholds test-time LoRA without memory
  (every prompt optimises from fresh adapters), with finite ones LoRA + memory.
  ``mode="guidance"`` is latent guidance.
  """
  hook = ttom.make_hook(net, tcfg, mode)
  b = cfg["per_prompt"]
  fresh0 = ttom.init_carry(jax.random.key(0), net, tcfg, jnp.zeros((b, 2), jnp.int32),
                           jnp.ones((b, 2), bool), jnp.zeros((b, 2, dcfg.canvas, dcfg.canvas)))
  vec0, unravel = ttom.ravel_lora(fresh0.lora)
  mem0 = ttom.memory_init(cfg["capacity"], 10 * dcfg.grid ** 2, vec0.shape[0])

  def one(mem, inp, load_sim, update_sim, optimise):
    key, cap, valid, targets, lkey = inp
    k_lora, k_sample = jax.random.split(key)
    cap, valid, targets = (jnp.broadcast_to(a, (b, *a.shape)) for a in (cap, valid, targets))
    fresh = ttom.init_carry(k_lora, net, tcfg, cap, valid, targets)
    idx, sim, mem_read = ttom.memory_read(mem, lkey, update_sim)
    strat = ttom.choose_strategy(sim, load_sim, update_sim)
    stored = unravel(mem.values[idx])
    w = jax.tree.map(lambda f, s: jnp.where(strat == ttom.OPTIMISE, f, s), fresh.lora, stored)
    carry = ttom.init_carry(k_lora, net, tcfg, cap, valid, targets, lora_weights=w,
                            optimise=optimise & (strat != ttom.LOAD_ONLY))
    x, c = ddpm.sample(k_sample, net, schedule, (b, dcfg.pixels), cond=cap, hook=hook,
                       hook_carry=carry)
    new = ttom.ravel_lora(c.lora)[0]
    _, inserted = ttom.memory_insert(mem_read, lkey, new)
    updated = ttom.memory_update(mem_read, idx, new, sim)
    pick = lambda a, u, r: jnp.where(strat == ttom.OPTIMISE, a,
                                     jnp.where(strat == ttom.LOAD_UPDATE, u, r))
    mem = jax.tree.map(pick, inserted, updated, mem_read)
    return mem, {"x": x, "maps": c.maps, "iters": c.iters, "first_loss": c.first_loss,
                 "last_loss": c.last_loss, "strategy": strat, "sim": sim}

  @jax.jit
  def run(keys, cap, valid, targets, lkeys, load_sim, update_sim, optimise):
    step = lambda m, inp: one(m, inp, load_sim, update_sim, optimise)
    _, out = jax.lax.scan(step, mem0, (keys, cap, valid, targets, lkeys))
    return out

  return run


def arm_args(arm: str, cfg: dict) -> tuple[str, tuple]:
  """The program (``"lora"`` / ``"guidance"``) and ``(load_sim, update_sim, optimise)`` of an
  arm (see :func:`make_stream`)."""
  never = (jnp.inf, jnp.inf)
  return {"base": ("lora", (*never, False)), "guidance": ("guidance", (*never, True)),
          "lora": ("lora", (*never, True)),
          "memory": ("lora", (cfg["load_sim"], cfg["update_sim"], True))}[arm]


def run_seed(seed: int, cfg: dict) -> dict:
  k_train, k_probe, k_types, k_stream, k_noise = jax.random.split(jax.random.key(seed), 5)
  dcfg = dit_config(cfg)
  schedule = make_schedule(cfg)
  net, losses = train(k_train, cfg, dcfg, schedule)
  pr = probe(k_probe, net, dcfg, schedule, cfg)
  layer = int(np.argmax(pr["iou_opt_steps"])) if cfg["layer"] < 0 else cfg["layer"]
  tcfg = tto_config(cfg, layer)
  ys = Yardstick.create(seed, YardstickConfig(steps=cfg["yardstick_steps"]))
  types = dl.layout_types(k_types, cfg["types"], step=cfg["step"])
  ids, lay = dl.prompt_stream(k_stream, types, cfg["prompts"], jitter=cfg["jitter"],
                              step=cfg["step"])
  cap = jnp.asarray(dl.caption_tokens(lay))
  valid, boxes = jnp.asarray(lay.valid), jnp.asarray(lay.boxes)
  names = jnp.asarray(lay.names)
  targets = ttom.gaussian_targets(boxes, names, valid, dcfg.canvas)
  lkeys = jax.vmap(lambda b, n, v: ttom.layout_key(b, n, v, dcfg))(boxes, names, valid)
  keys = jax.random.split(k_noise, cfg["prompts"])
  out = {"seed": seed, "final_loss": float(losses[-100:].mean()), "probe": pr, "layer": layer,
         "yardstick_test_accuracy": ys.test_accuracy, "type_ids": ids.tolist(), "arms": {}}
  grid = {}
  n_valid = int(lay.valid.sum())
  programs = {m: make_stream(net, dcfg, schedule, tcfg, cfg, m) for m in ("lora", "guidance")}
  for arm in ARMS:
    mode, extra = arm_args(arm, cfg)
    rec = programs[mode](keys, cap, valid, targets, lkeys, *extra)
    x = np.clip(np.asarray(rec["x"]), -1, 1)  # (P, B, 576)
    crops = ttom.crops(x, np.broadcast_to(lay.boxes[:, None], (*x.shape[:2], 2, 4)))
    pred = ys.predict(crops.reshape(-1, 64)).reshape(crops.shape[:3])
    hit = (pred == lay.names[:, None]) & lay.valid[:, None]
    acc_prompt = hit.sum((1, 2)) / (lay.valid.sum(1) * x.shape[1])
    iou = np.asarray(ttom.box_iou(rec["maps"], boxes[:, None], valid[:, None]))
    flat = crops[np.broadcast_to(lay.valid[:, None], crops.shape[:3])]
    ink = (x + 1) / 2  # share of the ink inside the boxes (a box holds 64 / 576 of the canvas)
    inside = np.zeros((x.shape[0], dcfg.canvas, dcfg.canvas), bool)
    for i, (bs, vs) in enumerate(zip(lay.boxes, lay.valid, strict=True)):
      for bb, vv in zip(bs, vs, strict=True):
        inside[i, bb[0]:bb[2], bb[1]:bb[3]] |= bool(vv)
    in_box = (ink * inside.reshape(x.shape[0], 1, -1)).sum(-1) / np.maximum(ink.sum(-1), 1e-9)
    out["arms"][arm] = {
        "box_accuracy": float(hit.sum() / (n_valid * x.shape[1])),
        "iou": float(np.nanmean(iou)),
        "ink_in_boxes": float(in_box.mean()),
        "iters_per_prompt": float(np.mean(rec["iters"])),
        "fd": ys.frechet_distance(flat),
        "loss_first": float(np.mean(rec["first_loss"])),
        "loss_last": float(np.mean(rec["last_loss"])),
        "per_prompt": {"accuracy": np.round(acc_prompt, 4).tolist(),
                       "iters": np.asarray(rec["iters"]).tolist()},
        "strategies": np.bincount(np.asarray(rec["strategy"]), minlength=3).tolist(),
    }
    grid[ARM_NAMES[arm]] = x[:8, 0]
  if seed == 0:
    out["grid"] = {k: v.round(3).tolist() for k, v in grid.items()}
    out["grid_boxes"] = lay.boxes[:8].tolist()
    out["grid_valid"] = lay.valid[:8].tolist()
    out["grid_names"] = lay.names[:8].tolist()
  return out


def _arm(runs, arm, key) -> np.ndarray:
  return np.array([r["arms"][arm][key] for r in runs])


def claims(result: dict) -> list[Claim]:
  """The claims, from a ``results.json`` dict of any scale.

  0. The probe: the tiny DiT's cross-attention localises (the chosen layer's IoU on noised
     real scenes above the random-pixel IoU ``64 / 1088``, in every seed).
  1. Test-time LoRA improves layout control: box accuracy at least ``BETTER`` above base,
     on average and in every seed.
  2. LoRA >= latent guidance: LoRA's box accuracy and attention-box IoU at least
     guidance's (means over seeds).
  3. Memory reduces iterations: LoRA + memory needs at most ``FEWER`` (half) the
     iterations per prompt of test-time LoRA, at box accuracy at most ``SAME`` below it.
  """
  runs = result["runs"]
  if not runs or "arms" not in runs[0]:
    return []
  probe = np.array([max(r["probe"]["iou_opt_steps"]) for r in runs])
  acc = {a: _arm(runs, a, "box_accuracy") for a in ARMS}
  iou = {a: _arm(runs, a, "iou") for a in ("lora", "guidance")}
  it = {a: _arm(runs, a, "iters_per_prompt") for a in ARMS}
  return [
      Claim("Probe: the tiny DiT's cross-attention localises (best layer's attention-box IoU "
            f"on noised real scenes above random pixels, {CHANCE_IOU:.3f})",
            f"IoU {pm(probe)} (layers chosen: {[r['layer'] for r in runs]})",
            bool(np.all(probe > CHANCE_IOU))),
      Claim(f"Test-time LoRA improves box accuracy over base by at least {BETTER:g} (mean and "
            "every seed)", f"LoRA {pm(acc['lora'])} vs base {pm(acc['base'])}",
            bool(acc["lora"].mean() >= acc["base"].mean() + BETTER
                 and np.all(acc["lora"] >= acc["base"] + BETTER))),
      Claim("LoRA >= latent guidance (box accuracy and attention-box IoU, means over seeds)",
            f"box accuracy: LoRA {pm(acc['lora'])} vs guidance {pm(acc['guidance'])}; IoU: "
            f"LoRA {pm(iou['lora'])} vs guidance {pm(iou['guidance'])}",
            bool(acc["lora"].mean() >= acc["guidance"].mean()
                 and iou["lora"].mean() >= iou["guidance"].mean())),
      Claim(f"Memory reduces iterations: at most {FEWER:g}x test-time LoRA's iterations per "
            f"prompt at box accuracy at most {SAME:g} below it (mean over seeds)",
            f"iterations {pm(it['memory'], '.1f')} vs {pm(it['lora'], '.1f')}; accuracy "
            f"{pm(acc['memory'])} vs {pm(acc['lora'])}",
            bool(it["memory"].mean() <= FEWER * it["lora"].mean()
                 and acc["memory"].mean() >= acc["lora"].mean() - SAME)),
  ]


TABLE_HEAD = ["arm", "box accuracy", "ink in the boxes", "attention-box IoU",
              "iterations / prompt",
              "FD of box crops", "layout loss (step 0 -> last optimised)"]


def table_rows(result: dict) -> list[list[str]]:
  runs = result["runs"]
  rows = []
  for arm in ARMS:
    rows.append([ARM_NAMES[arm], pm(_arm(runs, arm, "box_accuracy")),
                 pm(_arm(runs, arm, "ink_in_boxes")), pm(_arm(runs, arm, "iou")),
                 pm(_arm(runs, arm, "iters_per_prompt"), ".1f"),
                 pm(_arm(runs, arm, "fd"), ".1f"),
                 f"{pm(_arm(runs, arm, 'loss_first'))} -> {pm(_arm(runs, arm, 'loss_last'))}"])
  return rows


def plot(result: dict, out: str) -> list[str]:
  runs = result["runs"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
  iou = np.array([r["probe"]["iou"] for r in runs])  # (S, len(ts), L)
  ts = runs[0]["probe"]["timesteps"]
  for layer in range(iou.shape[2]):
    axes[0].plot(ts, iou[:, :, layer].mean(0), "o-", ms=3, label=f"layer {layer}")
  axes[0].axhline(CHANCE_IOU, color="k", ls=":", label="random pixels")
  axes[0].set(xlabel="timestep t of the noised real scene", ylabel="attention-box IoU",
              title="probe")
  axes[0].legend(fontsize=7)
  for arm in ARMS:
    it = np.mean([r["arms"][arm]["per_prompt"]["iters"] for r in runs], axis=0)
    axes[1].plot(np.arange(len(it)), it, lw=1, label=ARM_NAMES[arm])
  axes[1].set(xlabel="prompt in the stream", ylabel="iterations", title="iterations per prompt")
  axes[1].legend(fontsize=7)
  save_figure(fig, out, "ttom_curves.png")
  r0 = runs[0]
  rows = dict(r0.get("grid", {}))
  if rows:
    target = []
    for b, v in zip(r0["grid_boxes"], r0["grid_valid"], strict=True):
      img = np.full((24, 24), -1.0)
      for bb, vv in zip(b, v, strict=True):
        if vv:
          img[bb[0]:bb[2], bb[1]:bb[3]] = -0.6
          img[bb[0], bb[1]:bb[3]] = img[bb[2] - 1, bb[1]:bb[3]] = 0.3
          img[bb[0]:bb[2], bb[1]] = img[bb[0]:bb[2], bb[3] - 1] = 0.3
      target.append(img.ravel())
    title = ("first 8 prompts (columns): the layout (boxes; captions "
             + ", ".join("".join(str(d) for d, vv in zip(n, v, strict=True) if vv)
                         for n, v in zip(r0["grid_names"], r0["grid_valid"], strict=True))
             + "), then one sample per arm, the same noise per column")
    save_digit_grid({"layout": target, **rows}, out, "ttom_samples.png", title, shape=(24, 24),
                    height=1.3)
  return ["ttom_curves.png", "ttom_samples.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/ttom",
                       quick_help="1 seed, a short stream: the pipeline in about a minute",
                       helps={"d_model": "DiT width", "heads": "attention heads",
                              "layers": "DiT layers", "train_steps": "DiT Adam steps",
                              "batch": "training batch", "train_scenes": "rendered scenes",
                              "sample_steps": "DDPM steps (train and sample)",
                              "max_beta": "cap of the cosine betas",
                              "yardstick_steps": "training steps of the yardstick classifier",
                              "layer": "LoRA / loss layer (-1: the probe's best)",
                              "rank": "LoRA rank", "alpha": "LoRA alpha",
                              "lr": "AdamW learning rate of the adapters",
                              "iters": "max iterations per optimised step",
                              "opt_steps": "optimised (first) sampling steps",
                              "threshold": "early-stopping loss threshold",
                              "guidance_step": "latent-guidance step size",
                              "types": "layout types", "prompts": "prompts in the stream",
                              "per_prompt": "samples per prompt",
                              "step": "box offsets are multiples of step px (4: the patch grid)",
                              "jitter": "box jitter (in steps)",
                              "capacity": "memory entries", "load_sim": "similarity to load only",
                              "update_sim": "similarity to load + update",
                              "probe_scenes": "scenes of the attention probe"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def _note(result: dict) -> str:
  runs = result["runs"]
  cfg = result["config"]
  strat = np.sum([r["arms"]["memory"]["strategies"] for r in runs], axis=0)
  return (f"{cfg['seeds']} seed(s), mean ± std over seeds; {cfg['prompts']} prompts from "
          f"{cfg['types']} layout types, {cfg['per_prompt']} samples each; DiT loss "
          f"{pm([r['final_loss'] for r in runs])}; yardstick test accuracy "
          f"{pm([r['yardstick_test_accuracy'] for r in runs])}; LoRA layer(s) "
          f"{[r['layer'] for r in runs]}; memory strategies over all prompts: optimise "
          f"{strat[0]}, load only {strat[1]}, load + update {strat[2]}.")


def main(argv=None) -> dict:
  def run(cfg, args):
    return {"runs": seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg), "ttom")}

  return run_experiment(argv, cli(), "ttom", run, plot, _table, _note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/ttom.md


def _report(record: dict) -> str:
  c = record["config"]
  runs = record["runs"]
  strat = np.sum([r["arms"]["memory"]["strategies"] for r in runs], axis=0)
  probe = np.array([r["probe"]["iou_opt_steps"] for r in runs])  # (S, L)
  mid = np.array([r["probe"]["iou"][-1] for r in runs])  # (S, L) at t = T/2
  return ("\n" + f"DiT width {c['d_model']}, {c['heads']} heads, {c['layers']} layers, "
          f"{P.thousands(c['train_steps'])} training steps ({c['sample_steps']} DDPM steps, cosine "
          f"betas capped at {c['max_beta']:g}); LoRA rank {c['rank']}, alpha {c['alpha']:g}, "
          f"AdamW lr {c['lr']:g}, up to {c['iters']} iterations at each of the first "
          f"{c['opt_steps']} steps, threshold {c['threshold']:g}; latent-guidance step "
          f"{c['guidance_step']:g}; {c['prompts']} prompts from {c['types']} layout types "
          f"(jitter {c['jitter']} patch steps), {c['per_prompt']} samples each; memory of "
          f"{c['capacity']} entries, load only at similarity >= {c['load_sim']:g}, load + "
          f"update at >= {c['update_sim']:g}; {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds. DiT loss "
          f"{pm([r['final_loss'] for r in runs])}; yardstick test accuracy "
          f"{pm([r['yardstick_test_accuracy'] for r in runs])}. Probe (attention-box IoU "
          f"on noised real scenes; random pixels {CHANCE_IOU:.3f}): per layer "
          + ", ".join(f"{pm(probe[:, i])}" for i in range(probe.shape[1]))
          + " at the optimised steps' timesteps, "
          + ", ".join(f"{pm(mid[:, i])}" for i in range(mid.shape[1]))
          + f" at t = {runs[0]['probe']['timesteps'][-1]}; LoRA layer(s) "
          f"{[r['layer'] for r in runs]}. Memory strategies over all prompts: optimise "
          f"{strat[0]}, load only {strat[1]}, load + update {strat[2]}.\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("ttom", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("ttom", _report)


if __name__ == "__main__":
  main()

