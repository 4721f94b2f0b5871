"""OGBench pointmaze data: generated files in OGBench's format, loaded through OGBench's loader."""

import numpy as np
import pytest

from jaxlab.rl import ogbench_data

ENV = "pointmaze-medium-navigate-v0"
EPISODES, STEPS = 2, 50


def _ogbench():
  return pytest.importorskip("ogbench")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  _ogbench()
  data, stats = ogbench_data.generate(ENV, EPISODES, STEPS, seed=0, return_stats=True)
  path = tmp_path_factory.mktemp("ogb") / f"{ENV}.npz"
  ogbench_data.save(path, data)
  return str(path), data, stats


# ---------------------------------------------------------------- no ogbench needed


def test_missing_file_raises_value_error(tmp_path):
  with pytest.raises(ValueError, match="not found"):
    ogbench_data.load_dataset(tmp_path / f"{ENV}.npz")


def test_wrong_keys_raise_value_error(tmp_path):
  path = tmp_path / f"{ENV}.npz"
  np.savez(path, observations=np.zeros((4, 2)), actions=np.zeros((4, 2)))
  with pytest.raises(ValueError, match="missing keys"):
    ogbench_data.load_dataset(path)
  bad = tmp_path / "junk.npz"
  bad.write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="readable"):
    ogbench_data.load_dataset(bad)


def test_unparsable_name_raises_value_error(tmp_path):
  path = tmp_path / "mydata.npz"
  ogbench_data.save(path, {k: np.zeros((4, 2)) if k != "terminals" else np.zeros(4)
                           for k in ogbench_data.FILE_KEYS})
  with pytest.raises(ValueError, match="dataset name"):
    ogbench_data.load_dataset(path)
  assert ogbench_data.singletask_env_name(ENV, 3) == "pointmaze-medium-singletask-task3-v0"
  assert ogbench_data.dataset_name_from_path(f"/x/{ENV}-val.npz") == ENV


# ---------------------------------------------------------------- with ogbench


def test_generated_file_has_ogbench_format(tiny):
  path, data, stats = tiny
  rows = EPISODES * (STEPS + 1)
  with np.load(path) as f:
    assert sorted(f.files) == sorted(ogbench_data.FILE_KEYS)
    assert f["observations"].shape == (rows, 2) and f["observations"].dtype == np.float32
    assert f["actions"].shape == (rows, 2) and f["actions"].dtype == np.float32
    assert f["qpos"].shape == (rows, 2) and f["qvel"].shape == (rows, 2)
    assert f["terminals"].dtype == np.bool_
    np.testing.assert_array_equal(np.flatnonzero(f["terminals"]),
                                  np.arange(1, EPISODES + 1) * (STEPS + 1) - 1)
    # pointmaze observations are the position, recorded before the step (= prev_qpos).
    np.testing.assert_array_equal(f["observations"], f["qpos"])
    assert np.abs(f["actions"]).max() <= 1.0
  assert stats["steps"] == rows and stats["goals_reached"].shape == (EPISODES,)


def test_loads_through_ogbench_and_matches_make_env_and_datasets(tiny, tmp_path):
  ogbench = _ogbench()
  path, data, _ = tiny
  raw = ogbench.utils.load_dataset(path)  # OGBench's own reader accepts the file
  assert raw["observations"].shape == (EPISODES * STEPS, 2)

  ds = ogbench_data.load_dataset(path, task_id=1)
  assert set(ds) == set(ogbench_data.RL_KEYS)
  n = EPISODES * STEPS
  for k, v in ds.items():
    assert v.dtype == np.float32 and v.shape[0] == n, k
  assert ds["observations"].shape == ds["next_observations"].shape == (n, 2)
  assert ds["actions"].min() >= -1.0 and ds["actions"].max() <= 1.0
  assert set(np.unique(ds["rewards"])) <= {-1.0, 0.0}
  np.testing.assert_array_equal(ds["masks"], -ds["rewards"])  # mask 0 exactly at success (r=0)
  np.testing.assert_array_equal(np.flatnonzero(ds["terminals"]),
                                np.arange(1, EPISODES + 1) * STEPS - 1)
  # next_observations shift within each episode, never across the boundary.
  obs = data["observations"].reshape(EPISODES, STEPS + 1, 2)
  np.testing.assert_array_equal(ds["observations"], obs[:, :-1].reshape(-1, 2))
  np.testing.assert_array_equal(ds["next_observations"], obs[:, 1:].reshape(-1, 2))

  # Same arrays as OGBench's full single-task entry point (which also wants the -val file).
  ogbench_data.save(path.replace(".npz", "-val.npz"), data)
  env, train, _ = ogbench.make_env_and_datasets(
    "pointmaze-medium-navigate-singletask-task1-v0", dataset_path=path)
  env.close()
  for k in ogbench_data.RL_KEYS:
    np.testing.assert_array_equal(ds[k], train[k].astype(np.float32), err_msg=k)


def test_rewards_are_zero_exactly_at_the_task_goal(tmp_path):
  ogbench = _ogbench()
  import gymnasium

  env = gymnasium.make("pointmaze-medium-singletask-task2-v0")
  goal = np.asarray(env.unwrapped.task_infos[1]["goal_xy"], np.float32)
  env.close()
  offsets = np.array([[0, 0], [0.6, 0.6], [0.99, 0], [1.01, 0], [3, 0], [0, -5], [0, 0]],
                     np.float32)
  qpos = goal + offsets
  rows = len(qpos)
  path = tmp_path / f"{ENV}.npz"
  ogbench_data.save(path, {
    "observations": qpos, "qpos": qpos, "qvel": np.zeros_like(qpos),
    "actions": np.zeros((rows, 2)), "terminals": np.eye(rows)[-1],
  })
  ds = ogbench_data.load_dataset(path, task_id=2)
  assert ogbench is not None
  # Reward of (s, a, s') depends on s: 0 within the goal tolerance (1.0) of the task goal.
  np.testing.assert_array_equal(ds["rewards"], [0, 0, 0, -1, -1, -1])
  np.testing.assert_array_equal(ds["masks"], [0, 0, 0, 1, 1, 1])
  np.testing.assert_array_equal(ds["terminals"], [0, 0, 0, 0, 0, 1])
  with pytest.raises(ValueError, match="no environment"):
    ogbench_data.load_dataset(path, task_id=9)


def test_generate_is_seeded_and_oracle_moves_toward_goals(tiny):
  _ogbench()
  _, data, _ = tiny
  again = ogbench_data.generate(ENV, EPISODES, STEPS, seed=0)
  for k in ogbench_data.FILE_KEYS:
    np.testing.assert_array_equal(data[k], again[k], err_msg=k)
  other = ogbench_data.generate(ENV, 1, 5, seed=1)
  assert not np.array_equal(other["observations"], data["observations"][:6])
  # Point mass: next position = position + 0.2 * action unless a wall stops it.
  step = np.diff(data["qpos"].reshape(EPISODES, STEPS + 1, 2), axis=1).reshape(-1, 2)
  moves = data["actions"].reshape(EPISODES, STEPS + 1, 2)[:, :-1].reshape(-1, 2) * 0.2
  assert np.mean(np.all(np.abs(step - moves) < 1e-4, axis=1)) > 0.5


def test_cli_writes_train_and_val_files(tmp_path, capsys):
  _ogbench()
  from experiments import make_ogbench_data

  out = tmp_path / "d" / f"{ENV}.npz"
  res = make_ogbench_data.main(["--num-episodes", "2", "--max-steps", "20", "--out", str(out),
                                "--no-progress"])
  assert out.exists() and (tmp_path / "d" / f"{ENV}-val.npz").exists()
  assert res["rows"] == 2 * 21 and res["transitions"] == 2 * 20
  assert 0.0 <= res["first_goal_success_frac"] <= 1.0
  assert "steps/s" in capsys.readouterr().out
