"""Lumos-1 on moving digits: tube vs random masking, MM-RoPE vs 1-D vs contiguous 3-D RoPE.

    python -m experiments.lumos [--quick] [--out DIR]    (rerun with the same --out to resume)

Data (``jaxlab.data.moving_digits``): 4-frame videos of a binarized 8 x 8 digit rolled by
1 pixel per frame (right / left / down / up, wrapping), cut into 2 x 2 pixel patches
quantized to the 16 binary patterns (lossless), so each frame is 4 x 4 tokens and the
tokenizer's strides are ``(1, 2, 2)``; caption ``[BOS, class, direction]``. Training videos
use digits 0..1399 of scikit-learn's set, test captions and frames digits 1400..1796.

Per seed, four arms trained from the same initialization on the same batches (one program,
``jax.vmap`` over the arms):

* ``lumos``: tube masking, MM-RoPE (``jaxlab.generative.lumos``, the paper's recipe);
* ``random_mask``: masks drawn independently per frame (same ratio), MM-RoPE;
* ``rope_1d``: tube masking, 1-D RoPE over the flat sequence;
* ``rope_3d``: tube masking, contiguous 3-D RoPE (t:h:w = 2:3:3 pairs, as
  ``rope_sections``), the same scaled positions as MM-RoPE;
* ``no_positions``: tube masking, every RoPE angle 0 (a control, ours: does the position
  encoding matter at all at this scale?).

The four RoPE layouts share one program through ``lumos.pair_positions`` (the transformer
gets one position per rotary pair; exact, tested). The model is the toolkit transformer
(``d_model 32``, one head of dim 32 = 16 rotary pairs = one MM-RoPE block, ``rope_base``
below), AR-DF attention, Adam with cosine decay.

Metrics on held-out videos:

1. masked CE on frames 2-4: each frame fully masked, the earlier frames masked as at
   inference (70% of tokens, evenly spaced), ``lumos.frame_cross_entropy``;
2. pixel accuracy of generated videos (``lumos.generate_video``: text to video, per-frame
   MaskGIT with partially masked history) on frames 2-4 against the deterministic ground
   truth given the generated first frame and the caption's direction (frame ``f`` = the
   generated frame 1 rolled by ``f - 1`` pixels); the "static" baseline copies frame 1;
3. the same with the caption's first frame given (image to video): against the real
   video's frames;
4. ink share of generated first frames vs the data's (a blank video would be trivially
   "consistent").

Ours: the spec gives no model sizes or steps; ``rope_base`` is 100 (positions here stay
below about 70; the paper's base 10,000 serves sequences of thousands of tokens). Sized
for one CPU core. A GPU run could raise ``--d-model``, ``--layers``, ``--steps``,
``--batch`` and ``--scale 2`` (16 x 16 frames, 8 x 8 tokens: the spec's size).
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
from jaxlab.data import moving_digits as md
from jaxlab.generative import lumos
from jaxlab.models.transformer import TransformerConfig, create
from jaxlab.training.fit import fit, minibatch_sampler

NUM_CODES = 16
MASK_ID, BOS = 16, 17
CLASS0, DIR0 = 18, 28  # caption tokens: BOS, 18 + class, 28 + direction
VOCAB = 32
TRAIN_DIGITS = np.arange(1400)
TEST_DIGITS = np.arange(1400, 1797)
ARMS = ("lumos", "random_mask", "rope_1d", "rope_3d", "no_positions")
ARM_SPEC = {"lumos": ("tube", "mm"), "random_mask": ("random", "mm"),
            "rope_1d": ("tube", "1d"), "rope_3d": ("tube", "3d"),
            "no_positions": ("tube", "none")}
LABELS = {"lumos": "Lumos-1 (tube, MM-RoPE)", "random_mask": "random per-frame mask, MM-RoPE",
          "rope_1d": "tube, 1-D RoPE", "rope_3d": "tube, contiguous 3-D RoPE",
          "no_positions": "tube, no positions (control)"}

CONFIGS = {
    "smoke": dict(seeds=1, d_model=32, layers=1, steps=20, batch=8, lr=3e-3, train_videos=256,
                  test_videos=8, maskgit_steps=4, rope_base=100.0, scale=1, frames=4, shift=1),
    "quick": dict(seeds=1, d_model=32, layers=2, steps=1000, batch=16, lr=3e-3,
                  train_videos=4000, test_videos=64, maskgit_steps=8, rope_base=100.0, scale=1,
                  frames=4, shift=1),
    "full": dict(seeds=3, d_model=32, layers=2, steps=4000, batch=16, lr=3e-3,
                 train_videos=8000, test_videos=128, maskgit_steps=8, rope_base=100.0,
                 scale=1, frames=4, shift=1),
}


def layout(cfg: dict) -> lumos.VideoLayout:
  side = 8 * cfg["scale"] // md.PATCH
  return lumos.VideoLayout(3, cfg["frames"], side, side, md.STRIDES)


def captions(labels: np.ndarray, directions: np.ndarray) -> np.ndarray:
  return np.stack([np.full(len(labels), BOS), CLASS0 + labels, DIR0 + directions],
                  1).astype(np.int32)


def videos(seed: int, n: int, cfg: dict, digits: np.ndarray):
  v = md.make_videos(seed, n, cfg["frames"], cfg["shift"], digits, cfg["scale"])
  tok = md.tokenize(v.frames).reshape(n, cfg["frames"], -1)
  return v, captions(v.labels, v.directions), tok


def arm_positions(cfg: dict) -> np.ndarray:
  """``(arms, length, 16)``: each arm's position per rotary pair."""
  lay = layout(cfg)
  pairs = cfg["d_model"] // 2
  mm = lumos.mm_position_ids(lay)
  out = []
  for arm in ARMS:
    rope = ARM_SPEC[arm][1]
    if rope == "1d":
      out.append(lumos.pair_positions(lumos.flat_position_ids(lay), None, pairs))
    elif rope == "none":  # every angle 0: RoPE is the identity
      out.append(np.zeros((lay.length, pairs), np.int32))
    elif rope == "mm":
      out.append(lumos.pair_positions(mm, lumos.mm_rope_axes(pairs), pairs))
    else:
      sec = lumos.contiguous_sections(pairs)
      out.append(lumos.pair_positions(mm, tuple(np.repeat(np.arange(3), sec)), pairs))
  return np.stack([np.asarray(p) for p in out])


def make_programs(cfg: dict) -> dict:
  lay = layout(cfg)
  pairs = cfg["d_model"] // 2
  tcfg = TransformerConfig(vocab_size=VOCAB, d_model=cfg["d_model"], num_heads=1,
                           num_layers=cfg["layers"], seq_len=lay.length,
                           rope_base=cfg["rope_base"], rope_axes=tuple(range(pairs)))
  net = create(tcfg, jax.random.key(0))
  positions = jnp.asarray(arm_positions(cfg))
  tube = jnp.asarray([ARM_SPEC[a][0] == "tube" for a in ARMS])
  kw = dict(num_codes=NUM_CODES, mask_id=MASK_ID)

  def one_arm_train(params, pos, use_tube, data, key):
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adam(optax.cosine_decay_schedule(cfg["lr"], cfg["steps"], 0.05)))

    def loss(p, batch, k):
      text, video = batch
      keys = jax.random.split(k, video.shape[0])
      m_t = jax.vmap(lambda q: lumos.tube_mask(q, lay))(keys)
      m_r = jax.vmap(lambda q: lumos.frame_random_mask(q, lay))(keys)
      m = jnp.where(use_tube, m_t, m_r)  # the same ratio draw for both maskings
      return lumos.video_loss(net.replace(params=p), text, video, k, lay, pos, mask=m, **kw)

    res = fit(loss, tx, params, key, num_steps=cfg["steps"],
              sample=minibatch_sampler(data, cfg["batch"]), has_aux=True)
    return res.state.params, res.losses

  @jax.jit
  def train(params, data, key):
    return jax.vmap(one_arm_train, in_axes=(None, 0, 0, None, None))(
        params, positions, tube, data, key)

  @jax.jit
  def frame_ce(params, text, video):
    def one(p, pos):
      return lumos.later_frames_cross_entropy(net.replace(params=p), text, video, lay, pos,
                                              **kw)  # (B, F - 1)
    return jax.vmap(one)(params, positions)

  @jax.jit
  def generate(params, text, key, first):
    """Text to video and image to video in one batch: ``first`` rows of [MASK] are text to
    video; ``(arms, 2B, frames, n)``."""
    text2 = jnp.concatenate([text, text])
    first2 = jnp.concatenate([jnp.full_like(first, MASK_ID), first])

    def one(p, pos):
      return lumos.generate_video(net.replace(params=p), text2, key, lay, pos,
                                  steps=cfg["maskgit_steps"], first_frame=first2, **kw)
    return jax.vmap(one)(params, positions)

  return {"net": net, "train": train, "frame_ce": frame_ce, "generate": generate,
          "layout": lay}


def decode(tokens: np.ndarray, lay: lumos.VideoLayout) -> np.ndarray:
  """``(..., frames, n)`` codes -> ``(..., frames, H, W)`` binary pixels."""
  t = np.asarray(tokens)
  return md.detokenize(t.reshape(*t.shape[:-1], lay.rows, lay.cols))


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  lay = prog["layout"]
  k_init, k_train, k_gen = jax.random.split(jax.random.key(seed), 3)
  _, text, tok = videos(1000 + seed, cfg["train_videos"], cfg, TRAIN_DIGITS)
  test_v, test_text, test_tok = videos(2000 + seed, cfg["test_videos"], cfg, TEST_DIGITS)
  params0 = create(prog["net"].module().cfg, k_init).params
  params, losses = prog["train"](params0, (jnp.asarray(text), jnp.asarray(tok)), k_train)
  ce = np.asarray(prog["frame_ce"](params, jnp.asarray(test_text), jnp.asarray(test_tok)))
  both = np.asarray(prog["generate"](params, jnp.asarray(test_text), k_gen,
                                     jnp.asarray(test_tok[:, 0])))
  b = test_tok.shape[0]
  gen, i2v = both[:, :b], both[:, b:]
  px = decode(gen, lay)  # (arms, B, F, H, W)
  px_i2v = decode(i2v, lay)
  out = {"seed": seed, "arms": {}}
  for a, arm in enumerate(ARMS):
    truth = md.roll_frames(px[a][:, 0], test_v.directions, lay.frames, cfg["shift"])
    later = slice(1, lay.frames)
    acc = float(np.mean(px[a][:, later] == truth[:, later]))
    static = float(np.mean(px[a][:, :1] == truth[:, later]))
    acc_i2v = float(np.mean(px_i2v[a][:, later] == test_v.frames[:, later]))
    out["arms"][arm] = {
        "final_loss": float(np.mean(np.asarray(losses[a])[-50:])),
        "ce_later_frames": float(ce[a].mean()),
        "ce_per_frame": ce[a].mean(0).round(4).tolist(),
        "pixel_acc_t2v": acc, "static_acc_t2v": static,
        "pixel_acc_i2v": acc_i2v,
        "ink_first_frame": float(px[a][:, 0].mean()),
    }
  out["ink_data"] = float(test_v.frames[:, 0].mean())
  out["static_acc_i2v"] = float(np.mean(test_v.frames[:, :1] == test_v.frames[:, 1:]))
  if seed == 0:
    out["grid"] = {"truth": test_v.frames[:4].astype(int).tolist(),
                   **{arm: px[a][:4].astype(int).tolist() for a, arm in enumerate(ARMS)},
                   **{f"{arm} (i2v)": px_i2v[a][:4].astype(int).tolist()
                      for a, arm in enumerate(ARMS)}}
    out["grid_captions"] = [f"{int(y)} {md.DIRECTIONS[int(d)]}" for y, d in
                            zip(test_v.labels[:4], test_v.directions[:4], strict=True)]
  return out


def _arm(result: dict, arm: str, key: str) -> np.ndarray:
  return np.array([r["arms"][arm][key] for r in result["runs"]])


def claims(result: dict) -> list[Claim]:
  """The paper's expectations, from a ``results.json`` dict of any scale (means over seeds).

  1. Tube masking beats random per-frame masking (both with MM-RoPE): lower masked CE on
     frames 2-4 and higher pixel accuracy of generated frames 2-4 (text to video).
  2. MM-RoPE beats 1-D RoPE and contiguous 3-D RoPE (both with tube masking), on the same
     two metrics.
  3. The model learned the motion: Lumos-1's text-to-video pixel accuracy on frames 2-4
     beats copying its first frame, in every seed.
  4. (Ours, a control) the position encoding matters at this scale: every RoPE arm's masked
     CE is below the no-positions arm's, in every seed.
  """
  runs = result.get("runs") or []
  if not runs:
    return []
  if any(a not in runs[0]["arms"] for a in ARMS):
    return []
  ce = {a: _arm(result, a, "ce_later_frames") for a in ARMS}
  acc = {a: _arm(result, a, "pixel_acc_t2v") for a in ARMS}
  static = _arm(result, "lumos", "static_acc_t2v")

  def beats(a, b):
    return bool(ce[a].mean() < ce[b].mean() and acc[a].mean() > acc[b].mean())

  def says(a):
    return f"{a}: CE {pm(ce[a])}, pixel accuracy {pm(acc[a])}"

  return [
      Claim("Tube masking beats random per-frame masking (MM-RoPE): lower masked CE on "
            "frames 2-4 and higher pixel accuracy of generated frames 2-4",
            f"{says('lumos')}; {says('random_mask')}", beats("lumos", "random_mask")),
      Claim("MM-RoPE beats 1-D RoPE and contiguous 3-D RoPE (tube masking) on both metrics",
            f"{says('lumos')}; {says('rope_1d')}; {says('rope_3d')}",
            beats("lumos", "rope_1d") and beats("lumos", "rope_3d")),
      Claim("The motion is learned: Lumos-1's pixel accuracy on frames 2-4 beats copying "
            "its first frame, every seed",
            f"generated {pm(acc['lumos'])} vs static copy {pm(static)}",
            bool(np.all(acc["lumos"] > static))),
      Claim("(Control, ours) positions matter at this scale: every RoPE arm's masked CE is "
            "below the no-positions arm's, every seed",
            f"no positions: CE {pm(ce['no_positions'])}, pixel accuracy "
            f"{pm(acc['no_positions'])}",
            bool(all(np.all(ce[a] < ce["no_positions"]) for a in ARMS[:4]))),
  ]


TABLE_HEAD = ["arm", "train loss", "masked CE, frames 2-4", "pixel acc. (text to video)",
              "static copy", "pixel acc. (image to video)", "ink, frame 1"]


def table_rows(result: dict) -> list[list[str]]:
  rows = []
  for arm in ARMS:
    rows.append([LABELS[arm], pm(_arm(result, arm, "final_loss")),
                 pm(_arm(result, arm, "ce_later_frames")),
                 pm(_arm(result, arm, "pixel_acc_t2v")), pm(_arm(result, arm, "static_acc_t2v")),
                 pm(_arm(result, arm, "pixel_acc_i2v")),
                 pm(_arm(result, arm, "ink_first_frame"))])
  runs = result["runs"]
  rows.append(["data (held out)", "", "", "", "", pm([r["static_acc_i2v"] for r in runs]),
               pm([r["ink_data"] for r in runs])])
  return rows


def plot(result: dict, out: str) -> list[str]:
  run = result["runs"][0]
  grid, caps = run.get("grid", {}), run.get("grid_captions", [])
  names = list(grid)
  frames = len(grid[names[0]][0]) if names else 1
  n_vid = len(grid[names[0]]) if names else 0
  fig, axes = plt.subplots(len(names), n_vid * frames, squeeze=False,
                           figsize=(0.55 * n_vid * frames + 1.6, 0.6 * len(names) + 0.6))
  for i, name in enumerate(names):
    for v in range(n_vid):
      for f in range(frames):
        ax = axes[i, v * frames + f]
        ax.imshow(np.asarray(grid[name][v][f]), cmap="gray_r", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
        if i == 0 and f == 0 and v < len(caps):
          ax.set_title(caps[v], fontsize=6, loc="left")
    axes[i, 0].set_ylabel(name, fontsize=6, rotation=0, ha="right", va="center")
  fig.suptitle("Lumos-1 on moving digits: 4 held-out captions x 4 frames per row "
               "(text to video, then image to video)", fontsize=8)
  save_figure(fig, out, "lumos_samples.png")
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for arm in ARMS:
    per = np.mean([r["arms"][arm]["ce_per_frame"] for r in result["runs"]], 0)
    ax.plot(np.arange(2, 2 + len(per)), per, "o-", label=LABELS[arm], ms=4)
  ax.set(xlabel="frame", ylabel="masked CE (frame fully masked)", xticks=range(2, 2 + len(per)))
  ax.legend(fontsize=7)
  save_figure(fig, out, "lumos_ce.png")
  return ["lumos_samples.png", "lumos_ce.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/lumos",
                       quick_help="1 seed, 1,000 steps: the pipeline in about a minute of one core",
                       helps={"d_model": "transformer width (one head of width d_model)",
                              "layers": "transformer blocks", "steps": "Adam steps per arm",
                              "batch": "videos per step", "lr": "peak learning rate",
                              "train_videos": "training videos (digits 0..1399)",
                              "test_videos": "held-out videos (digits 1400..1796)",
                              "maskgit_steps": "MaskGIT rounds per frame",
                              "rope_base": "RoPE frequency base",
                              "scale": "digit upsampling (1: 8 x 8 frames, 2: 16 x 16)",
                              "frames": "frames per video",
                              "shift": "pixels the digit moves per frame"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def _note(result: dict) -> str:
  c = result["config"]
  return (f"{c['seeds']} seed(s), mean ± std over seeds; {c['steps']} Adam steps per arm, "
          f"batch {c['batch']}; {c['test_videos']} held-out videos; {c['maskgit_steps']} "
          f"MaskGIT rounds per frame; history 70% masked in the cache.")


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    return {"runs": seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "lumos")}

  return run_experiment(argv, cli(), "lumos", run, plot, _table, _note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/lumos.md


def _report(record: dict) -> str:
  c = record["config"]
  return ("\n" + f"Transformer d_model {c['d_model']} (one head), {c['layers']} layers, RoPE base "
          f"{P.g(c['rope_base'])}; {P.thousands(c['steps'])} Adam steps per arm, batch "
          f"{c['batch']}, {P.thousands(c['train_videos'])} training videos; {c['test_videos']} "
          f"held-out videos, {c['maskgit_steps']} MaskGIT rounds per frame; {c['seeds']} "
          f"seed{'s' if c['seeds'] > 1 else ''}, {P.seconds(record['wall_time_s'])}; mean ± std "
          "over seeds.\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("lumos", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("lumos", _report)


if __name__ == "__main__":
  main()
