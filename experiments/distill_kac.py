"""DistillKac: a class-conditional Kac-flow teacher on digits and its distilled students.

    python -m experiments.distill_kac [--quick] [--out DIR]    (rerun with the same --out to resume)

Per seed:

1. the teacher: a class-conditional Kac flow on scikit-learn's digits in ``[-1, 1]``
   (``a = 9, c = 3, T = 1``): an MLP ``64 + time embedding (32) + one-hot label (10) ->
   hidden -> 64`` (``jaxlab.nn.MLP``, ``jaxlab.models.ddpm.timestep_embedding`` of
   ``1000 t``) trained with ``jaxlab.generative.distill_kac.kac_loss`` (label dropout 0.1)
   by ``jaxlab.training.fit`` (Adam with cosine decay, gradient clip 1.0; no EMA: ours);
2. endpoint-only distillation in stages ``100 -> 20 -> 4 -> 2 -> 1``: each student starts
   as a copy of the previous model and matches ``prev / M`` of its Euler substeps with
   one Euler step (``distill_kac.distill_loss``, ``distill_steps`` Adam steps per stage);
3. the shared yardstick (``jaxlab.models.sample_quality``, trained from the same seed):
   class accuracy of samples for their intended labels and Frechet distance (FD) to its
   held-out real digits, on ``samples`` draws (labels cycling 0..9) from the same Kac
   noise ``x_T ~ K_T`` for every sampler; samples are clipped to ``[-1, 1]`` (the data
   range) before scoring;
4. the teacher with Euler at NFE 100 / 20 / 4 / 2 / 1 (and AB-2 at 100, the paper's
   teacher sampler) against the students at their own NFE;
5. speed: the largest ``|v_K|`` per coordinate of the exact target on forward-process
   samples (bound ``c``), and the largest ``|u|`` per coordinate of the teacher's field
   along its 100-step path (bound ``c + max|x0| / T = c + 1``: ``u = -x0/T + v_K``).

Guidance: ``--guidance w`` samples the teacher with velocity-space CFG and distils the
guided teacher into the first student (the default ``w = 0``: plain conditional, so that
NFE = network evaluations for every sampler).

Sized for one CPU core (our sizes: the spec gives none). A GPU run could raise
``--hidden``, ``--train-steps``, ``--distill-steps``, ``--batch`` and ``--samples``.
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
from experiments.reporting import Claim, pm, save_digit_grid, save_figure, table_and_claims
from experiments.timing import time_interleaved
from jaxlab.data.digits import load_digits
from jaxlab.generative import distill_kac as dk
from jaxlab.generative.nets import velocity_field, velocity_mlp
from jaxlab.models.sample_quality import Yardstick, YardstickConfig
from jaxlab.nn import Net
from jaxlab.training.fit import fit, minibatch_sampler

A, C, T = 9.0, 3.0, 1.0
EMB = 32
FAR = 0.5      # "far better": FD at most half the teacher's at the same NFE
LITTLE = 2.0   # "a little worse": FD at most 2x the 100-step teacher's ...
ACC_DROP = 0.10  # ... and class accuracy at most 0.10 below it

CONFIGS = {
    "smoke": dict(seeds=1, hidden=(32,), train_steps=30, distill_steps=10, yardstick_steps=50,
                  lr=1e-3, distill_lr=1e-4, batch=16, samples=50, guidance=0.0,
                  stages=(2, 1), timing_repeats=0),
    "quick": dict(seeds=1, hidden=(256, 256), train_steps=1500, distill_steps=200,
                  yardstick_steps=800, lr=1e-3, distill_lr=3e-4, batch=128, samples=500,
                  guidance=0.0, stages=dk.STAGES, timing_repeats=5),
    "full": dict(seeds=3, hidden=(256, 256), train_steps=3000, distill_steps=500,
                 yardstick_steps=1500, lr=1e-3, distill_lr=3e-4, batch=128, samples=1000,
                 guidance=0.0, stages=dk.STAGES, timing_repeats=5),
}


def make_net(cfg: dict, seed: int) -> Net:
  return velocity_mlp(64, tuple(cfg["hidden"]), cond_dim=10, emb_dim=EMB, seed=seed)


def velocity(net: Net, params):
  """The field ``u(obs, x, t)``: ``obs`` the one-hot label (zeros: unconditional)."""
  return velocity_field(net, params, emb_dim=EMB, time_scale=1000.0 / T)


def check_stages(stages) -> tuple[int, ...]:
  """Student step counts must decrease, each dividing the previous (``N = prev / M``)."""
  stages = tuple(int(m) for m in stages)
  pairs = zip(stages[:-1], stages[1:], strict=True)
  if len(stages) < 2 or any(m < 1 or p % m or p <= m for p, m in pairs):
    raise ValueError(f"stages must decrease, each dividing the previous, got {stages}")
  return stages


def make_programs(cfg: dict) -> dict:
  check_stages(cfg["stages"])
  net = make_net(cfg, 0)
  digits = load_digits("signed")
  data = (jnp.asarray(digits.x), jax.nn.one_hot(jnp.asarray(digits.y), 10))
  b = cfg["batch"]
  w = cfg["guidance"]

  def opt(lr, steps):
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adam(optax.cosine_decay_schedule(lr, steps, 0.1)))

  @jax.jit
  def train(params, key):
    def loss(p, batch, k):
      x0, obs = batch
      return dk.kac_loss(velocity(net, p), obs, x0, k, a=A, c=C, T=T, label_dropout=0.1)
    res = fit(loss, opt(cfg["lr"], cfg["train_steps"]), params, key,
              num_steps=cfg["train_steps"], sample=minibatch_sampler(data, b))
    return res.state.params, res.losses

  @functools.partial(jax.jit, static_argnums=(3, 4, 5))
  def distill(student, teacher, key, m, n_sub, guided):
    teacher_fn = velocity(net, teacher)
    if guided:
      teacher_fn = dk.cfg_velocity(teacher_fn, w)

    def loss(p, batch, k):
      x0, obs = batch
      return dk.distill_loss(velocity(net, p), teacher_fn, obs, x0, k, student_steps=m,
                             teacher_substeps=n_sub, a=A, c=C, T=T)
    res = fit(loss, opt(cfg["distill_lr"], cfg["distill_steps"]), student, key,
              num_steps=cfg["distill_steps"], sample=minibatch_sampler(data, b))
    return res.state.params, res.losses

  @functools.partial(jax.jit, static_argnums=(3, 4, 5))
  def sample(params, obs, x_T, steps, method, guided):
    field = velocity(net, params)
    if guided:
      field = dk.cfg_velocity(field, w)
    return dk.kac_sample(field, obs, x_T, steps, T=T, method=method)

  @jax.jit
  def target_speed(key):
    k_t, k_x, k_f = jax.random.split(key, 3)
    x0 = data[0][jax.random.randint(k_x, (512,), 0, data[0].shape[0])]
    t = jax.random.uniform(k_t, (512, 1), maxval=T)
    _, y = dk.forward_process(k_f, x0, t, a=A, c=C, T=T)
    return jnp.max(jnp.abs(dk.kac_velocity(y, t, a=A, c=C)))

  def timing(repeats: int = 5, inner: int = 20) -> dict:
    """Seconds per call: the Kac draws of one training batch vs one whole training step."""
    params = make_net(cfg, 0).params
    tx = opt(cfg["lr"], cfg["train_steps"])
    t = jnp.linspace(0.0, T, b)[:, None]

    @jax.jit
    def kac(key, _):
      k1, k2 = jax.random.split(key)
      return k1, dk.sample_kac(k2, t, (b, 64), a=A, c=C)

    @jax.jit
    def step(p, state, key):
      k1, k2, k3 = jax.random.split(key, 3)
      idx = jax.random.randint(k2, (b,), 0, data[0].shape[0])
      g = jax.grad(lambda q: dk.kac_loss(velocity(net, q), data[1][idx], data[0][idx], k3,
                                         a=A, c=C, T=T, label_dropout=0.1))(p)
      upd, state = tx.update(g, state, p)
      return optax.apply_updates(p, upd), state, k1

    key = jax.random.key(0)
    times = time_interleaved({"kac_simulation": (kac, (key, jnp.zeros((b, 64)))),
                              "train_step": (step, (params, tx.init(params), key))},
                             repeats, inner)
    return {k: float(np.median(v)) for k, v in times.items()}

  return {"net": net, "train": train, "distill": distill, "sample": sample,
          "target_speed": target_speed, "timing": timing}


def run_seed(seed: int, cfg: dict, prog: dict) -> dict:
  k_init, k_train, k_dist, k_noise, k_speed = jax.random.split(jax.random.key(seed), 5)
  params0 = make_net(cfg, int(jax.random.randint(k_init, (), 0, 2**31 - 1))).params
  teacher, losses = prog["train"](params0, k_train)
  ys = Yardstick.create(seed, YardstickConfig(steps=cfg["yardstick_steps"]))
  n = cfg["samples"]
  labels = np.arange(n) % 10
  obs = jax.nn.one_hot(jnp.asarray(labels), 10)
  x_T = dk.sample_kac(k_noise, T, (n, 64), a=A, c=C)
  guided = cfg["guidance"] != 0.0

  def score(x):
    x = np.clip(np.asarray(x), -1.0, 1.0)
    return {"accuracy": ys.class_accuracy(x, labels), "fd": ys.frechet_distance(x)}

  out = {"seed": seed, "final_loss": float(np.mean(np.asarray(losses)[-100:])),
         "yardstick_test_accuracy": ys.test_accuracy,
         "fd_real_halves": ys.frechet_distance(ys.reference[::2], ys.reference[1::2]),
         "target_speed_max": float(prog["target_speed"](k_speed)),
         "teacher": [], "students": [], "distill_loss": []}
  grid = {}
  stages = tuple(cfg["stages"])
  for m in stages:
    x, speed = prog["sample"](teacher, obs, x_T, m, "euler", guided)
    out["teacher"].append({"nfe": m, **score(x)})
    grid[f"teacher Euler NFE {m}"] = x
    if m == stages[0]:
      out["teacher_speed_per_step"] = np.round(np.asarray(speed), 4).tolist()
  x, _ = prog["sample"](teacher, obs, x_T, stages[0], "ab2", guided)
  out["teacher_ab2"] = {"nfe": stages[0], **score(x)}
  prev, prev_m = teacher, stages[0]
  for i, m in enumerate(stages[1:]):
    student, dl = prog["distill"](prev, prev, jax.random.fold_in(k_dist, m), m, prev_m // m,
                                  guided and i == 0)
    out["distill_loss"].append([float(np.mean(np.asarray(dl)[:10])),
                                float(np.mean(np.asarray(dl)[-10:]))])
    x, _ = prog["sample"](student, obs, x_T, m, "euler", False)
    out["students"].append({"nfe": m, **score(x)})
    grid[f"student NFE {m}"] = x
    prev, prev_m = student, m
  if seed == 0:
    out["grid"] = {k: np.clip(np.asarray(v)[:10], -1, 1).round(3).tolist()
                   for k, v in grid.items()}
  return out


def _by_nfe(run: dict, kind: str, nfe: int) -> dict:
  return next(p for p in run[kind] if p["nfe"] == nfe)


def claims(result: dict) -> list[Claim]:
  """The paper's claims, from a ``results.json`` dict of any scale.

  1. The 1-4 step students are far better than the teacher at equal NFE: at each NFE in
     (4, 2, 1) the student's FD is at most ``FAR`` (half) the teacher's Euler FD, on
     average over seeds and in every seed.
  2. ... and a little worse than the 100-step teacher: each of those students' FD is at
     most ``LITTLE`` (2x) the 100-step teacher's and its class accuracy at most
     ``ACC_DROP`` (0.10) below it, on average over seeds.
  3. The speed bound: ``|v_K| <= c`` for the exact target on forward samples, and the
     teacher's ``|u| <= c + 1`` (``u = -x0/T + v_K``, ``|x0| <= 1``) along its 100-step path,
     in every seed.
  """
  runs = result["runs"]
  if not runs or not runs[0]["students"]:
    return []
  few = [m for m in (4, 2, 1) if any(p["nfe"] == m for p in runs[0]["students"])]
  st = {m: np.array([_by_nfe(r, "students", m)["fd"] for r in runs]) for m in few}
  te = {m: np.array([_by_nfe(r, "teacher", m)["fd"] for r in runs]) for m in few}
  acc = {m: np.array([_by_nfe(r, "students", m)["accuracy"] for r in runs]) for m in few}
  top = max(p["nfe"] for p in runs[0]["teacher"])
  fd100 = np.array([_by_nfe(r, "teacher", top)["fd"] for r in runs])
  acc100 = np.array([_by_nfe(r, "teacher", top)["accuracy"] for r in runs])
  far = all(st[m].mean() <= FAR * te[m].mean() and np.all(st[m] <= FAR * te[m]) for m in few)
  little = all(st[m].mean() <= LITTLE * fd100.mean()
               and acc[m].mean() >= acc100.mean() - ACC_DROP for m in few)
  v_target = np.array([r["target_speed_max"] for r in runs])
  v_model = np.array([max(r["teacher_speed_per_step"]) for r in runs])
  return [
      Claim(f"The 1-4 step students are far better than the teacher at equal NFE (FD at most "
            f"{FAR:g}x the teacher's Euler FD, mean and every seed)",
            "; ".join(f"NFE {m}: student {pm(st[m], '.1f')} vs teacher {pm(te[m], '.1f')}"
                      for m in few), bool(far)),
      Claim(f"... and a little worse than the {top}-step teacher (FD at most {LITTLE:g}x "
            f"its FD, class accuracy at most {ACC_DROP:g} below it)",
            f"teacher {top}: FD {pm(fd100, '.1f')}, accuracy {pm(acc100)}; "
            + "; ".join(f"student {m}: FD {pm(st[m], '.1f')}, accuracy {pm(acc[m])}"
                        for m in few), bool(little)),
      Claim(f"Speed bound: |v_K| <= c = {C:g} on forward samples; the teacher's |u| <= c + 1 "
            f"along its {top}-step path",
            f"max |v_K| {pm(v_target, '.4f')}; max |u| {pm(v_model, '.3f')}",
            bool(np.all(v_target <= C + 1e-5) and np.all(v_model <= C + 1.0))),
  ]


TABLE_HEAD = ["NFE", "teacher Euler accuracy", "teacher Euler FD", "student accuracy",
              "student FD"]


def table_rows(result: dict) -> list[list[str]]:
  runs = result["runs"]
  rows = []
  stages = [p["nfe"] for p in runs[0]["teacher"]]
  for m in stages:
    te = [_by_nfe(r, "teacher", m) for r in runs]
    st = [_by_nfe(r, "students", m) for r in runs] if m != stages[0] else None
    rows.append([str(m), pm([p["accuracy"] for p in te]), pm([p["fd"] for p in te], ".1f"),
                 pm([p["accuracy"] for p in st]) if st else "(the teacher)",
                 pm([p["fd"] for p in st], ".1f") if st else "(the teacher)"])
  ab = [r["teacher_ab2"] for r in runs]
  rows.append([f"{stages[0]} (teacher AB-2)", pm([p["accuracy"] for p in ab]),
               pm([p["fd"] for p in ab], ".1f"), "", ""])
  return rows


def plot(result: dict, out: str) -> list[str]:
  runs = result["runs"]
  fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
  for ax, key in zip(axes[:2], ("fd", "accuracy"), strict=True):
    for kind, label, style in (("teacher", "teacher (Euler)", "k-o"),
                               ("students", "distilled students", "C3-s")):
      xs = [p["nfe"] for p in runs[0][kind]]
      ys = np.mean([[p[key] for p in r[kind]] for r in runs], axis=0)
      ax.plot(xs, ys, style, label=label, ms=4)
    ax.set(xscale="log", xlabel="NFE", ylabel="Frechet distance" if key == "fd"
           else "class accuracy")
    ax.legend(fontsize=7)
  top = runs[0]["teacher"][0]["nfe"]
  t = 1.0 - np.arange(top) / top
  for r in runs:
    axes[2].plot(t * T, r["teacher_speed_per_step"], lw=0.8)
  axes[2].axhline(C, color="k", ls=":", label="c")
  axes[2].axhline(C + 1, color="k", ls="--", lw=0.8, label="c + 1")
  axes[2].set(xlabel="t", ylabel=f"max |u| per coordinate ({top}-step teacher path)")
  axes[2].legend(fontsize=7)
  fig.suptitle(f"DistillKac on digits, {len(runs)} seed(s) (means)")
  save_figure(fig, out, "distill_kac_curves.png")
  save_digit_grid(runs[0].get("grid", {}), out, "distill_kac_samples.png",
                  "labels 0..9 per column, the same Kac noise per column")
  return ["distill_kac_curves.png", "distill_kac_samples.png"]


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``."""
  return ExperimentCLI(__doc__, CONFIGS, out="results/distill_kac",
                       quick_help="1 seed, smaller nets: the pipeline in about a minute",
                       helps={"hidden": "hidden widths of the velocity MLP",
                              "train_steps": "teacher Adam steps",
                              "distill_steps": "Adam steps per distillation stage",
                              "yardstick_steps": "training steps of the yardstick classifier",
                              "lr": "teacher learning rate", "distill_lr": "student learning rate",
                              "batch": "training batch",
                              "samples": "samples per sampler (labels 0..9 cycling)",
                              "guidance": "CFG weight w of the teacher (0: none)",
                              "stages": "the teacher's steps, then each student's",
                              "timing_repeats": "rounds of the Kac-simulation vs training-step "
                                                "timing (0: skip)"})


def _table(result: dict) -> str:
  return table_and_claims(TABLE_HEAD, table_rows(result), claims(result))


def _note(result: dict) -> str:
  runs = result["runs"]
  return (f"{result['config']['seeds']} seed(s), mean ± std over seeds; "
          f"{result['config']['samples']} samples per sampler; teacher loss "
          f"{pm([r['final_loss'] for r in runs])}; yardstick test accuracy "
          f"{pm([r['yardstick_test_accuracy'] for r in runs])}; FD between two halves of the "
          f"real held-out digits {pm([r['fd_real_halves'] for r in runs], '.2f')}.")


def main(argv=None) -> dict:
  def run(cfg, args):
    prog = make_programs(cfg)
    runs = seed_runs(args.out, cfg, lambda seed: run_seed(seed, cfg, prog), "distill_kac")
    reps = cfg["timing_repeats"]
    return {"runs": runs, "timing": prog["timing"](reps) if reps else None}

  return run_experiment(argv, cli(), "distill_kac", run, plot, _table, _note,
                        after=lambda r, args: clear_seed_runs(args.out, r["config"]["seeds"]))


# Page text: the generated regions of docs/methods/distill_kac.md


def _report(record: dict) -> str:
  c = record["config"]
  runs = record["runs"]
  tm = record["timing"]
  return ("\n" + f"Velocity MLP hidden {tuple(c['hidden'])}, {P.thousands(c['train_steps'])} "
          f"teacher steps, {P.thousands(c['distill_steps'])} distillation steps per stage "
          f"(stages {' -> '.join(str(m) for m in c['stages'])}), CFG weight {c['guidance']:g}; "
          f"{c['samples']} samples per sampler from the same Kac noise; "
          f"{c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{P.seconds(record['wall_time_s'])}; mean ± std over seeds. Teacher loss "
          f"{pm([r['final_loss'] for r in runs])}; FD between two halves of the real "
          f"held-out digits {pm([r['fd_real_halves'] for r in runs], '.2f')}; yardstick "
          f"test accuracy {pm([r['yardstick_test_accuracy'] for r in runs])}. Kac draws "
          f"of one training batch ({c['batch']} x 64 coordinates, 40 flips each) take "
          f"{P.g(1e3 * tm['kac_simulation'])} ms against {P.g(1e3 * tm['train_step'])} ms for a "
          f"whole training step ({100 * tm['kac_simulation'] / tm['train_step']:.0f}%).\n\n"
          + P.table(TABLE_HEAD, table_rows(record)) + "\n\n"
          + P.claims_table("distill_kac", record) + "\n")


def page() -> dict[str, str]:
  return P.quick_and_full("distill_kac", _report)


if __name__ == "__main__":
  main()
