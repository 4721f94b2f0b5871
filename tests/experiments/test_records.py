"""experiments.records' writers: curves downsampled to fit 1 MB, provenance recorded, per-seed
records resumed."""

import json
import subprocess

from experiments import records


def test_downsample_keeps_ends_and_leaves_summaries_alone():
  result = {"history": {"loss": [float(i) for i in range(1000)],
                        "per_seed": [[i, -i] for i in range(300)]},
            "final": {"mean": 0.123456789, "per_seed": [1.0, 2.0, 3.0]}, "name": "x"}
  small = records.downsample_curves(result, 100)
  loss = small["history"]["loss"]
  assert len(loss) == 100 and loss[0] == 0.0 and loss[-1] == 999.0
  assert loss == sorted(loss)  # evenly spaced, in order
  assert len(small["history"]["per_seed"]) == 100
  assert small["history"]["per_seed"][-1] == [299, -299]
  assert small["final"] == result["final"] and small["name"] == "x"


def test_compact_results_fits_the_budget_and_says_so():
  big = {"curve": [i * 1.000001 for i in range(20000)], "summary": {"r": 0.5}}
  assert len(records.dumps(big)) > 100_000
  small = records.compact_results(big, max_bytes=20_000)
  assert len(records.dumps(small)) <= 20_000
  assert small["summary"] == {"r": 0.5}
  assert small["downsampled"]["curve_points"] < 20000
  fits = {"curve": [1.0, 2.0], "summary": {"r": 0.5}}
  assert records.compact_results(fits) == fits  # already small: unchanged


def test_save_json_records_provenance(tmp_path):
  path = tmp_path / "results.json"
  records.save_json(str(path), {"x": [1, 2, 3]}, "dipper", ["--quick", "--seeds", "2"])
  saved = json.loads(path.read_text())
  prov = saved["provenance"]
  assert prov["command"] == "python -m experiments.dipper --quick --seeds 2"
  assert set(prov["versions"]) == {"jax", "jaxlib", "flax", "optax", "numpy"}
  assert prov["versions"]["jax"] and prov["device"] and prov["backend"]
  assert "git_commit" in prov
  assert '"x": [1, 2, 3]' in path.read_text()  # number lists on one line


def test_provenance_is_dirty_for_code_changes_not_for_the_runs_own_output(tmp_path, monkeypatch):
  git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
  out = tmp_path / "docs" / "results" / "m"
  out.mkdir(parents=True)
  (out / "results.json").write_text("{}")
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (elsewhere / "results.json").write_text("{}")
  (tmp_path / "code.py").write_text("x = 1\n")
  git("init", "-q")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
  monkeypatch.setattr(records, "_ROOT", str(tmp_path))
  (out / "results.json").write_text('{"new": 1}')  # a re-recorded result
  assert records.provenance("m", [], str(out))["git_dirty"] is False
  # another method's committed record, re-recorded earlier in the same run_all --update
  assert records.provenance("other", [], str(elsewhere))["git_dirty"] is False
  (elsewhere / "results.json").write_text('{"new": 1}')  # a run's output outside docs/results
  assert records.provenance("m", [], str(out))["git_dirty"] is True
  assert records.provenance("m", [], str(elsewhere))["git_dirty"] is False
  (elsewhere / "results.json").write_text("{}")
  (tmp_path / "code.py").write_text("x = 2\n")  # a change to the code
  assert records.provenance("m", [], str(out))["git_dirty"] is True


def test_seed_runs_resume_reuses_finished_seeds_of_the_same_config(tmp_path):
  calls = []

  def run_seed(seed):
    calls.append(seed)
    return {"seed": seed, "value": 10 * seed}

  cfg = {"seeds": 3, "sizes": (2, 4)}
  first = records.seed_runs(str(tmp_path), cfg, run_seed, "test")
  assert first == [{"seed": s, "value": 10 * s} for s in range(3)] and calls == [0, 1, 2]
  (tmp_path / "seed2.json").unlink()  # as if the run stopped during seed 2
  assert records.seed_runs(str(tmp_path), cfg, run_seed, "test") == first
  assert calls == [0, 1, 2, 2]  # only the missing seed ran again
  other = {"seeds": 3, "sizes": (2, 8)}  # another configuration: every seed runs again
  records.seed_runs(str(tmp_path), other, run_seed, "test")
  assert calls == [0, 1, 2, 2, 0, 1, 2]
  (tmp_path / "seed1.json").write_text('{"config": {"seeds": 3')  # killed mid-write
  records.seed_runs(str(tmp_path), other, run_seed, "test")
  assert calls == [0, 1, 2, 2, 0, 1, 2, 1]  # the unreadable record runs again
  records.clear_seed_runs(str(tmp_path), 3)
  assert not list(tmp_path.glob("seed*.json"))
