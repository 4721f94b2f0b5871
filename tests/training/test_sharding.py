"""The transformer's training step on a 4-device mesh (data parallel and FSDP) against one
device, in a fresh process with 4 forced host devices (the count is fixed at JAX start)."""

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
