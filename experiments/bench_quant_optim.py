"""Step time and state memory of quantized Adam against optax.adam, in one run.

    python -m experiments.bench_quant_optim [--quick] [--configs NAME ...] [--out DIR]

On one ~1M-parameter MLP (784-1024-256-10, minibatch 128; ``--sizes``) it times

* the optimizer step alone (``opt.update`` + ``optax.apply_updates`` on fixed
  gradients), and
* the whole training step (forward, backward, optimizer),

for ``optax.adam`` and ``quantized_adam`` without quantization, with simulated
G+M+V+W (nearest and stochastic) and with each ``moment_storage``; prints
ratios to ``optax.adam`` and the optimizer-state bytes as ratios. On GPU/TPU
it also times the fused Pallas kernel (``kernels_pallas.quantized_adam``) on
the flattened parameters. Targets (issue 2): no-quantization path within 1.1x
of ``optax.adam``; G+M+V+W simulation at most 2x (aim 1.5x).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.cli import ExperimentCLI
from experiments.records import save_json
from experiments.reporting import Ratio
from experiments.timing import time_interleaved
from jaxlab.optim import quantized_adam
from jaxlab.optim.problems import mlp_net
from jaxlab.quant import FloatFormat

SIZES = (784, 1024, 256, 10)
BF16 = FloatFormat.BF16
SIM = dict(grads=BF16, weights=BF16, mu=FloatFormat(8, 3), nu=FloatFormat(8, 3))
CONFIGS = {
    "optax.adam": lambda: optax.adam(1e-3),
    "quantized_adam (none)": lambda: quantized_adam(1e-3),
    "G+M+V+W nearest": lambda: quantized_adam(1e-3, **SIM),
    "G+M+V+W stochastic": lambda: quantized_adam(1e-3, rounding="stochastic", **SIM),
    "storage bfloat16": lambda: quantized_adam(1e-3, moment_storage="bfloat16"),
    "storage float8_e4m3fn": lambda: quantized_adam(1e-3, moment_storage="float8_e4m3fn"),
    "storage int8": lambda: quantized_adam(1e-3, moment_storage="int8"),
}


def state_bytes(state) -> int:
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


# The timing settings by scale (CONFIGS above names the optimizers).
SETTINGS = {"full": dict(repeats=10, inner=20, configs=list(CONFIGS), sizes=list(SIZES)),
            "quick": dict(repeats=5, inner=3, configs=list(CONFIGS), sizes=list(SIZES)),
            # the tests' setting (the notebook at its tiny scale): every code path (compile,
            # interleaved timing rounds, ratios, state bytes) once, on one compact storage
            # and a small MLP
            "smoke": dict(repeats=2, inner=1, configs=["storage int8"], sizes=[784, 64, 10])}


def cli() -> ExperimentCLI:
  """The command line: every field of ``SETTINGS``."""
  return ExperimentCLI(__doc__, SETTINGS, out="results/bench_quant_optim",
                       quick_help="fewer repeats", choices={"configs": list(CONFIGS)},
                       helps={"repeats": "interleaved timing rounds (medians are reported)",
                              "sizes": "the MLP's layer widths, input to output",
                              "inner": "steps per timed repeat",
                              "configs": "optimizers to time (optax.adam, the anchor, is always "
                                         "included)"})


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  args.configs = cfg["configs"]
  repeats, inner = cfg["repeats"], cfg["inner"]
  names = ["optax.adam", *(n for n in args.configs if n != "optax.adam")]

  sizes = tuple(cfg["sizes"])
  net = mlp_net(sizes, 0)
  params = net.params
  num_params = sum(p.size for p in jax.tree.leaves(params))
  k1, k2 = jax.random.split(jax.random.key(0))
  x = jax.random.normal(k1, (128, sizes[0]))
  y = jax.random.randint(k2, (128,), 0, sizes[-1])
  loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(net(x, params=p), y).mean()
  grads = jax.jit(jax.grad(loss))(params)  # one program, not one per eager operation

  rows, cases = {}, {}
  for name in names:
    opt = CONFIGS[name]()

    @jax.jit
    def opt_step(p, s, opt=opt):
      u, s = opt.update(grads, s, p)
      return optax.apply_updates(p, u), s

    @jax.jit
    def train_step(p, s, opt=opt):
      u, s = opt.update(jax.grad(loss)(p), s, p)
      return optax.apply_updates(p, u), s

    state = opt.init(params)
    cases[(name, "opt_step_s")] = (opt_step, (params, state))
    cases[(name, "train_step_s")] = (train_step, (params, state))
    rows[name] = {"state_bytes": state_bytes(state)}
  for (name, field), seconds in time_interleaved(cases, repeats, inner).items():
    rows[name][field + "_rounds"] = seconds
    rows[name][field] = float(np.median(seconds))

  if jax.default_backend() in ("gpu", "tpu"):
    rows.update(_bench_kernel(params, grads, repeats, inner))

  ref = rows["optax.adam"]
  for r in rows.values():
    for field in ("opt_step", "train_step"):
      # the median over rounds of the ratio within each round, and its min-max
      per_round = (np.asarray(r.get(f"{field}_s_rounds", [np.nan]))
                   / np.asarray(ref[f"{field}_s_rounds"]))
      r[f"{field}_ratio"] = float(np.median(per_round))
      r[f"{field}_ratio_range"] = [float(per_round.min()), float(per_round.max())]
    r["state_bytes_ratio"] = r["state_bytes"] / ref["state_bytes"]

  header = (f"{'optimizer':26s} {'opt step':>10s} {'ratio':>6s} {'train step':>11s} "
            f"{'ratio':>6s} {'state MB':>9s} {'ratio':>6s}")
  print(f"backend={jax.default_backend()} params={num_params:,}")
  print(header)
  for name, r in rows.items():
    print(f"{name:26s} {r['opt_step_s'] * 1e3:8.3f}ms {r['opt_step_ratio']:6.2f} "
          f"{r['train_step_s'] * 1e3:9.3f}ms {r['train_step_ratio']:6.2f} "
          f"{r['state_bytes'] / 2**20:9.2f} {r['state_bytes_ratio']:6.3f}")
  result = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
            "jax": jax.__version__, "sizes": list(sizes), "num_params": num_params, "rows": rows}
  os.makedirs(args.out, exist_ok=True)
  result = save_json(os.path.join(args.out, "results.json"), result, "bench_quant_optim", argv)
  return result


def ratios(result: dict) -> list[Ratio]:
  """Each configuration's optimizer-step time over ``optax.adam``'s, same run.

  One row per configuration (the anchor itself omitted); the note gives the
  whole-training-step ratio and the optimizer-state bytes ratio (the Pallas rows,
  on GPU/TPU only, have no training step).
  """
  out = []
  for name, r in result["rows"].items():
    if name == "optax.adam":
      continue
    train = r.get("train_step_ratio")
    train = "n/a" if train is None or not math.isfinite(train) else f"{train:.2f}x"
    lo, hi = r.get("train_step_ratio_range", (math.nan, math.nan))
    spread = f" ({lo:.2f}-{hi:.2f}x over rounds)" if math.isfinite(lo) else ""
    out.append(Ratio(f"{name}: optimizer step vs optax.adam", float(r["opt_step_ratio"]),
                     f"whole training step {train}{spread}; state bytes "
                     f"{r['state_bytes_ratio']:.3f}x"))
  return out


def _bench_kernel(params, grads, repeats, inner) -> dict:
  """The fused Pallas step on the flattened parameters (GPU/TPU only)."""
  from kernels_pallas.quantized_adam import QuantFormats, quantized_adam_step

  p = jnp.concatenate([x.ravel() for x in jax.tree.leaves(params)])
  g = jnp.concatenate([x.ravel() for x in jax.tree.leaves(grads)])
  out = {}
  for name, fmts, rounding in (
      ("pallas fused (none)", QuantFormats(), "nearest"),
      ("pallas fused G+M+V+W", QuantFormats(**SIM), "nearest"),
      ("pallas fused G+M+V+W stoch.", QuantFormats(**SIM), "stochastic"),
  ):
    def step(p, m, v, t, fmts=fmts, rounding=rounding):
      p, m, v = quantized_adam_step(p, g, m, v, step=t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8,
                                    weight_decay=0.0, formats=fmts, rounding=rounding,
                                    key=jax.random.key(0), use_kernel=True)
      return p, m, v, t + 1

    args = (p, jnp.zeros_like(p), jnp.zeros_like(p), jnp.int32(1))
    t = time_interleaved({name: (jax.jit(step), args)}, repeats, inner)[name]
    out[name] = {"opt_step_s": float(np.median(t)), "opt_step_s_rounds": t,
                 "train_step_s": float("nan"), "state_bytes": 2 * p.nbytes}
  return out


if __name__ == "__main__":
  main()
