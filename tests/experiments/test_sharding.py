"""Seeds sharded over 4 (forced host) devices give the single-device result.

Both runs happen in fresh processes, because the device count is fixed when JAX
starts (``XLA_FLAGS=--xla_force_host_platform_device_count``).
"""

import json
import os
import subprocess
import sys

import numpy as np

SCRIPT = """
import json, sys
import jax, jax.numpy as jnp
from experiments import alpha_dpo
from experiments.common import shard_seeds

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


def _run(devices: int, out) -> dict:
  env = dict(os.environ)
  if devices > 1:  # one device: the suite's own environment, so the compile cache is shared
    flag = f"--xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
  proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=env, text=True,
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
  placed4, sharded = _run(4, tmp_path / "four")
  placed1, single = _run(1, tmp_path / "one")
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
