"""The transformer's training step on a 4-device mesh (data parallel and FSDP) against one
device, and seeds sharded over 4 devices (:func:`jaxlab.training.shard_seeds`) giving the
single-device result, each in a fresh process with 4 forced host devices (the count is fixed
at JAX start)."""

import json
import os
import subprocess
import sys

import numpy as np

SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np, optax
from jaxlab.models import transformer as tfm
from jaxlab.training import sharding

cfg = tfm.TransformerConfig(vocab_size=64, d_model=32, num_heads=2, num_layers=2, seq_len=16)
net = tfm.create(cfg, jax.random.key(0))
opt = optax.sgd(0.5)
step = jax.jit(tfm.make_train_step(net, opt))
tokens = jax.random.randint(jax.random.key(1), (8, 17), 0, 64)  # one batch, fitted
out = {"devices": jax.device_count()}
for name, n, fsdp in (("one", 1, False), ("dp", 4, False), ("fsdp", 4, True)):
  mesh = sharding.data_mesh(n)
  params, opt_state = sharding.place_train_state(mesh, net.params, opt, fsdp=fsdp)
  losses = []
  for t in range(6):
    batch = sharding.shard_batch(mesh, tokens)
    params, opt_state, loss = step(params, opt_state, batch)
    losses.append(float(loss))
  split = [len(x.sharding.device_set) == n and not x.sharding.is_fully_replicated
           for x in jax.tree.leaves(params)]
  out[name] = {"losses": losses, "batch_devices": len(batch.sharding.device_set),
               "split_leaves": int(sum(split)), "leaves": len(split),
               "params": [np.asarray(x).ravel().tolist() for x in jax.tree.leaves(params)]}
print("RESULT", json.dumps(out))
"""


def test_train_step_on_four_devices_matches_one():
  env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "")
                                    + " --xla_force_host_platform_device_count=4").strip())
  proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
  out = json.loads(line[len("RESULT "):])
  assert out["devices"] == 4
  one, dp, fsdp = out["one"], out["dp"], out["fsdp"]
  assert dp["batch_devices"] == 4 and dp["split_leaves"] == 0  # replicated parameters
  assert fsdp["split_leaves"] >= 8  # every large matrix stored in slices
  # Another partition of the same sums (per-device partial gradients, then an all-reduce)
  # changes float32 round-off only: each of the 6 SGD steps adds a few eps32 relative to
  # the parameters and loss (lr 0.5, gradients O(1e-2)), so 6 * 100 * eps32 bounds it.
  tol = 6 * 100 * float(np.finfo(np.float32).eps)
  for run in (dp, fsdp):
    np.testing.assert_allclose(run["losses"], one["losses"], rtol=tol)
    for a, b in zip(run["params"], one["params"], strict=True):
      np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
  assert one["losses"][-1] < one["losses"][0] - 0.05  # the steps train


# Seeds sharded over 4 (forced host) devices give the single-device result: both runs in
# fresh processes, because the device count is fixed when JAX starts.
SEEDS_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp
from experiments import alpha_dpo
from jaxlab.training import shard_seeds

keys = shard_seeds(jax.random.split(jax.random.key(0), 8))
out = jax.jit(jax.vmap(lambda k: jax.random.normal(k, (16,)).sum()))(keys)
uneven = shard_seeds(jnp.ones((3, 2)))
print("PLACEMENT", json.dumps({"devices": jax.device_count(),
                               "keys": len(keys.sharding.device_set),
                               "out": len(out.sharding.device_set),
                               "out_values": out.tolist(),
                               "uneven_replicated": uneven.sharding.is_fully_replicated}))
alpha_dpo.main(["--smoke", "--seeds", "4", "--out", sys.argv[1]])
"""

# the machine and provenance (its command names the output folder), the device count, every
# timing (keys ending in "time_s") and the plotted samples, which are stored rounded to 3
# decimals (a 1e-7 difference can flip their last digit)
SKIP = {"machine", "provenance", "devices", "samples", "samples_seed0"}

# The sharded run is not the same XLA program as the single-device one (each device runs the
# vmapped program on its share of the seeds, and XLA's CPU kernels may sum in another order
# for another batch size), so numbers are compared within float32 round-off grown through the
# computation, not bit for bit. A seed's numbers pass through 130 sequential float32 steps
# at the smoke scale (100 pretraining and 20 fine-tuning Adam steps, 10 sampling steps); each
# adds a few eps32 of relative round-off that training then carries and amplifies. Tolerance:
# eps32 * 130 * 100 (growth factor) = 1.5e-3, absolute and relative. Measured: 1e-6 on this
# project's machine, 5e-5 on an AMD EPYC; a lane fed another seed's inputs moves the same
# numbers by their spread across seeds (0.09 for reward, 0.27 for alpha, 0.66 for the loss).
EPS32 = float(np.finfo(np.float32).eps)
TOL = EPS32 * 130 * 100
# Outcomes that count samples jump when one sample crosses a boundary (the manifold's edge, a
# histogram bin, which of a pair ranks first), which round-off of any size can cause: allow two
# samples to cross. off_manifold: fraction of 128 evaluated samples; implicit_acc: of 16 pairs
# x 2 logged steps; mode_kl: KL of a 128-sample mode histogram (one sample moves it < 0.05);
# seeds_less: a count of seeds.
COUNTED = {"off_manifold": 2 / 128, "implicit_acc": 2 / 32, "mode_kl": 0.1, "seeds_less": 2}


def _run_seeds(devices: int, out) -> dict:
  env = dict(os.environ)
  if devices > 1:  # one device: the suite's own environment, so the compile cache is shared
    flag = f"--xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
  proc = subprocess.run([sys.executable, "-c", SEEDS_SCRIPT, str(out)], env=env, text=True,
                        capture_output=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = next(x for x in proc.stdout.splitlines() if x.startswith("PLACEMENT"))
  placement = json.loads(line.split(" ", 1)[1])
  with open(out / "results.json") as f:
    return placement, json.load(f)


def _assert_close(a, b, path="results", atol=TOL):
  if isinstance(a, dict):
    assert a.keys() == b.keys(), path
    for k in a.keys() - SKIP:
      if k.endswith("time_s"):
        continue
      counted = COUNTED.get(k.removesuffix("_std"))
      _assert_close(a[k], b[k], f"{path}.{k}", atol if counted is None else counted)
  elif isinstance(a, list) and a and not all(isinstance(x, (int, float)) for x in a):
    assert len(a) == len(b), path
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
      _assert_close(x, y, f"{path}[{i}]", atol)
  elif isinstance(a, (int, float, list)) and not isinstance(a, bool):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=TOL,
                               atol=atol, err_msg=path)
  else:
    assert a == b, path


def test_seeds_sharded_over_four_devices_match_one_device(tmp_path):
  (tmp_path / "four").mkdir()
  (tmp_path / "one").mkdir()
  placed4, sharded = _run_seeds(4, tmp_path / "four")
  placed1, single = _run_seeds(1, tmp_path / "one")
  # Before any training, each key's lane computes the same 16-term sum on either layout:
  # round-off of 16 normals (|x| < 6) is below 16 * 6 * eps32; another key's lane is O(1) off.
  np.testing.assert_allclose(placed4.pop("out_values"), placed1.pop("out_values"), rtol=0,
                             atol=16 * 6 * EPS32)
  assert placed4 == {"devices": 4, "keys": 4, "out": 4, "uneven_replicated": True}
  assert placed1["devices"] == 1
  # the experiment's own vmapped fine-tuning lanes ran on all 4 devices, not one
  assert sharded["tasks"]["mixture"]["devices"] == 4
  assert single["tasks"]["mixture"]["devices"] == 1
  _assert_close(sharded, single)
