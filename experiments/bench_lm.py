"""Timing of the transformer toolkit: our training step against a plain nnx transformer of the
same size, and cached decoding against recomputing the prefix.

    python -m experiments.bench_lm [--d-model D ...] [--repeats R] [--out DIR]

1. Training: tokens per second of one AdamW step (forward, backward, update; jitted) of
   :class:`jaxlab.models.transformer.Transformer` (RoPE, the default) against
   :class:`PlainTransformer`, written here without any hook (no masks, cache, hidden states,
   head scales, MoE or cross-attention): the same layers, widths and initialization. Target:
   ours at most 1.1x slower.
2. Decoding: greedy generation of ``new_tokens`` tokens that end at ``context`` tokens, with
   the KV cache (:func:`jaxlab.models.decoding.generate`) against recomputing the whole prefix
   at every step (one forward over the fixed ``context``-long buffer per new token, read at
   the current position: one compile). Target: the cache at least 10x faster at 512 tokens.

Both are timed in interleaved rounds after compiling (the median and the rounds' min-max are
reported), in one run, on whatever backend JAX has.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from experiments.cli import ExperimentCLI
from experiments.pages import f, load, span, table, thousands
from experiments.records import machine, write_results
from experiments.reporting import Ratio
from experiments.timing import time_interleaved
from jaxlab.core.checks import check_int
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net


class PlainTransformer(nnx.Module):
  """The anchor: a pre-LN RoPE decoder as one writes it first, nothing configurable."""

  def __init__(self, cfg: tfm.TransformerConfig, *, rngs: nnx.Rngs):
    init = nnx.initializers.normal(tfm.INIT_STD)
    lin = lambda a, b: nnx.Linear(a, b, kernel_init=init, rngs=rngs)
    d, h = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    self.heads = cfg.num_heads
    self.embed = nnx.Embed(cfg.vocab_size, d, embedding_init=init, rngs=rngs)
    self.ln1 = nnx.List([nnx.LayerNorm(d, rngs=rngs) for _ in range(cfg.num_layers)])
    self.qkv = nnx.List([lin(d, 3 * d) for _ in range(cfg.num_layers)])
    self.out = nnx.List([lin(d, d) for _ in range(cfg.num_layers)])
    self.ln2 = nnx.List([nnx.LayerNorm(d, rngs=rngs) for _ in range(cfg.num_layers)])
    self.fc = nnx.List([lin(d, h) for _ in range(cfg.num_layers)])
    self.proj = nnx.List([lin(h, d) for _ in range(cfg.num_layers)])
    self.ln_f = nnx.LayerNorm(d, rngs=rngs)
    self.head = lin(d, cfg.vocab_size)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    b, t = tokens.shape
    x = self.embed(tokens)
    d = x.shape[-1]
    hd = d // self.heads
    freq = 10_000.0 ** (-jnp.arange(0, hd, 2) / hd)
    angle = jnp.arange(t)[:, None] * freq
    cos, sin = jnp.cos(angle)[:, None], jnp.sin(angle)[:, None]

    def rot(u):
      u1, u2 = u[..., : hd // 2], u[..., hd // 2:]
      return jnp.concatenate([u1 * cos - u2 * sin, u2 * cos + u1 * sin], -1)

    for i in range(len(self.qkv)):
      q, k, v = jnp.split(self.qkv[i](self.ln1[i](x)).reshape(b, t, 3, self.heads, hd), 3, 2)
      y = jax.nn.dot_product_attention(rot(q[:, :, 0]), rot(k[:, :, 0]), v[:, :, 0],
                                       is_causal=True)
      x = x + self.out[i](y.reshape(b, t, d))
      x = x + self.proj[i](jax.nn.gelu(self.fc[i](self.ln2[i](x))))
    return self.head(self.ln_f(x))


def _train_step(net: Net, opt: optax.GradientTransformation):
  step = tfm.make_train_step(net, opt)
  return jax.jit(lambda p, s, x: step(p, s, x)[:2] + (x,))  # (params, state, tokens) -> same


def _recompute(net: Net, prompt: jax.Array, new_tokens: int) -> jax.Array:
  """Greedy decoding by a full forward over the fixed-length buffer at every step."""
  b, t = prompt.shape
  buf = jnp.concatenate([prompt, jnp.zeros((b, new_tokens), prompt.dtype)], 1)

  def step(buf, i):
    logits = jax.lax.dynamic_index_in_dim(net(buf), t + i - 1, 1, keepdims=False)
    tok = jnp.argmax(logits, -1).astype(buf.dtype)
    return jax.lax.dynamic_update_index_in_dim(buf, tok, t + i, 1), tok

  return jax.lax.scan(step, buf, jnp.arange(new_tokens))[1].T


def ratios(result: dict) -> list[Ratio]:
  """Our training step's time over the plain transformer's, and the KV cache's decoding time
  over recomputation's (medians over interleaved rounds; < 1: ours faster)."""
  t, d = result["train"], result["decode"]
  return [
      Ratio(f"training step, ours vs plain nnx transformer ({t['shape']})",
            t["ratio_median"], f"{t['ours_tokens_per_s']:.0f} vs {t['plain_tokens_per_s']:.0f} "
            "tokens/s"),
      Ratio(f"greedy decoding to {d['context']} tokens, KV cache vs recomputing the prefix",
            d["ratio_median"], f"cache {1 / d['ratio_median']:.1f}x faster")]


CONFIGS = {
    "full": dict(vocab=256, d_model=128, heads=4, layers=4, batch=32, seq=64, context=512,
                 new_tokens=64, decode_batch=8, repeats=5, inner=3),
    "smoke": dict(vocab=32, d_model=32, heads=2, layers=1, batch=4, seq=16, context=32,
                  new_tokens=4, decode_batch=2, repeats=2, inner=1),
}


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/bench_lm",
                       helps={"batch": "training sequences per step", "seq": "training tokens",
                              "context": "decoded context length (prompt + new tokens)",
                              "repeats": "interleaved timing rounds", "inner": "calls per round"})


def main(argv=None) -> dict:
  args, scale, cfg = cli().parse(argv)
  args = argparse.Namespace(**{**vars(args), **cfg})
  for name in ("vocab", "d_model", "heads", "layers", "batch", "seq", "new_tokens",
               "decode_batch", "repeats", "inner"):
    check_int(getattr(args, name), name, lo=1)
  check_int(args.context, "context", lo=args.new_tokens + 1)
  start = time.time()
  model_cfg = tfm.TransformerConfig(args.vocab, args.d_model, args.heads, args.layers,
                                    max(args.seq, args.context))
  ours = tfm.create(model_cfg, jax.random.key(0))
  plain = Net.create(PlainTransformer(model_cfg, rngs=nnx.Rngs(params=jax.random.key(0))))
  opt = optax.adamw(1e-3)
  tokens = jax.random.randint(jax.random.key(1), (args.batch, args.seq + 1), 0, args.vocab)
  cases = {name: (_train_step(net, opt), (net.params, opt.init(net.params), tokens))
           for name, net in (("ours", ours), ("plain", plain))}
  train_t = time_interleaved(cases, args.repeats, args.inner)
  r_train = np.array(train_t["ours"]) / np.array(train_t["plain"])
  n_tok = args.batch * args.seq

  prompt = jax.random.randint(jax.random.key(2), (args.decode_batch,
                                                  args.context - args.new_tokens), 0, args.vocab)
  cached = jax.jit(lambda net, p: decoding.generate(net, p, jax.random.key(0), args.new_tokens,
                                                    temperature=0.0).tokens)
  recompute = jax.jit(lambda net, p: _recompute(net, p, args.new_tokens))
  first = cached(ours, prompt)
  same = bool(jnp.array_equal(first, recompute(ours, prompt)))
  # each call returns its tokens into the state, so the timer waits for the decoding itself
  dec_t = time_interleaved({"cache": (lambda n, p, _: (n, p, cached(n, p)), (ours, prompt, first)),
                            "recompute": (lambda n, p, _: (n, p, recompute(n, p)),
                                          (ours, prompt, first))}, args.repeats, args.inner)
  r_dec = np.array(dec_t["cache"]) / np.array(dec_t["recompute"])
  result = {
      "scale": scale, "config": cfg, "machine": machine(), "wall_time_s": time.time() - start,
      "train": {"shape": f"{args.layers} layers, d={args.d_model}, {args.batch} x {args.seq} "
                         "tokens, AdamW",
                "ours_s": train_t["ours"], "plain_s": train_t["plain"],
                "ours_tokens_per_s": n_tok / float(np.median(train_t["ours"])),
                "plain_tokens_per_s": n_tok / float(np.median(train_t["plain"])),
                "ratio_median": float(np.median(r_train)),
                "ratio_range": [float(r_train.min()), float(r_train.max())]},
      "decode": {"context": args.context, "new_tokens": args.new_tokens,
                 "batch": args.decode_batch, "cache_s": dec_t["cache"],
                 "recompute_s": dec_t["recompute"], "same_tokens": same,
                 "ratio_median": float(np.median(r_dec)),
                 "ratio_range": [float(r_dec.min()), float(r_dec.max())]},
  }
  tr, de = result["train"], result["decode"]
  table = "\n".join([
      "| timing | ours | anchor | ours / anchor (median, min-max) |", "|---|---|---|---|",
      f"| training step ({tr['shape']}) | {tr['ours_tokens_per_s']:.0f} tokens/s | "
      f"{tr['plain_tokens_per_s']:.0f} tokens/s (plain nnx) | {tr['ratio_median']:.3f} "
      f"({tr['ratio_range'][0]:.3f}-{tr['ratio_range'][1]:.3f}) |",
      f"| greedy decoding of {de['new_tokens']} tokens to {de['context']} (batch "
      f"{de['batch']}) | {np.median(de['cache_s']):.3f} s (KV cache) | "
      f"{np.median(de['recompute_s']):.3f} s (recompute prefix) | {de['ratio_median']:.3f} "
      f"({de['ratio_range'][0]:.3f}-{de['ratio_range'][1]:.3f}) |"])
  write_results(args.out, "bench_lm", result, table,
                f"{args.repeats} interleaved rounds of {args.inner} calls after compiling; "
                f"cached and recomputed greedy decoding give the same tokens: {same}.",
                argv=argv)
  return result


# ---------------------------------------------------------------------------
# Page text: the generated regions of docs/methods/lm_toolkit.md


def page() -> dict[str, str]:
  """``{name: text}`` for the ``<!-- gen:lm_toolkit.<name> -->`` regions of
  ``docs/methods/lm_toolkit.md``, from the committed records."""
  bench = load("lm_toolkit", "bench")
  tr, de = bench["train"], bench["decode"]
  m = bench["machine"]
  rows = [[f"training step ({tr['shape']})", f"{thousands(tr['ours_tokens_per_s'])} tokens/s",
           f"{thousands(tr['plain_tokens_per_s'])} tokens/s (plain nnx)",
           f"{f(tr['ratio_median'], 3)} ({span(tr['ratio_range'], lambda v: f(v, 3))})"],
          [f"greedy decoding of {de['new_tokens']} tokens to {de['context']} (batch "
           f"{de['batch']})", f"{f(float(np.median(de['cache_s'])), 3)} s (KV cache)",
           f"{f(float(np.median(de['recompute_s'])), 3)} s (recompute prefix)",
           f"{f(de['ratio_median'], 3)} ({span(de['ratio_range'], lambda v: f(v, 3))}); "
           f"cache {f(1 / de['ratio_median'], 1)}x faster"]]
  cfg = bench["config"]
  return {"bench_table": "\n" + table(["timing", "ours", "anchor",
                                       "ours / anchor: median (min-max)"], rows)
          + f"\n\n{cfg['repeats']} interleaved rounds of {cfg['inner']} calls after "
            f"compiling, backend {m['backend']}; the cached "
            f"and recomputed decodings gave the same tokens: {de['same_tokens']}. Record: "
            "`docs/results/lm_toolkit/bench/`.\n"}


if __name__ == "__main__":
  main()
