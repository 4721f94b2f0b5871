"""experiments.bench_matching's section against the official C++ code (issue 16)."""

import json

import numpy as np
import pytest

from experiments import bench_matching, cpp
from experiments.reporting import Ratio


def _cpp_row(n, seed, ours_s, ours_c_s, cpp_s):
  return {"n": n, "seed": seed, "ours_default_s": ours_s, "ours_cpp_options_s": ours_c_s,
          "cpp_official_s": cpp_s, "ours_default_ratio": 1.02, "ours_cpp_options_ratio": 1.1,
          "cpp_ratio": 1.1}


def test_ratios_of_the_cpp_section_are_means_of_per_seed_ratios():
  result = {"cpp": {"rows": [_cpp_row(500, 0, 2.0, 4.0, 1.0), _cpp_row(500, 1, 1.0, 3.0, 2.0)]}}
  rows = bench_matching.ratios(result)  # no anchors section: only the C++ ratios
  assert all(isinstance(r, Ratio) for r in rows)
  got = {r.name: r.ratio for r in rows}
  assert got == {"push_relabel (insert_many) vs the official C++ push-relabel, n = 500": 1.25,
                 "push_relabel, C++ options (insert_many) vs the official C++ push-relabel, "
                 "n = 500": 2.75}
  assert "2 seeds, 0.50-2.00" in rows[0].note and "1.020 vs 1.100" in rows[0].note
  assert bench_matching.ratios({"cpp": {"skipped": "no compiler"}}) == []


def test_section_is_skipped_with_a_reason_without_a_compiler(monkeypatch):
  monkeypatch.setattr(cpp, "find_compiler", lambda: None)
  section = bench_matching.run_cpp_section(bench_matching.CONFIGS["quick"])
  assert section.keys() == {"skipped"} and "no C++ compiler" in section["skipped"]
  bench_matching.print_cpp(section)


def test_hlo_shapes_and_bytes():
  text = ("  %copy.3 = s32[7,500]{1,0} copy(s32[7,500]{1,0} %p)\n"
          "  ROOT fusion.1 = f64[] fusion(%a), kind=kLoop\n  %c = pred[500]{0} compare(%a, %b)")
  ops = bench_matching._hlo_ops(text)
  assert ops == {"copy.3": ("s32[7x500]", "copy"), "fusion.1": ("f64[]", "fusion"),
                 "c": ("pred[500]", "compare")}
  assert [bench_matching._shape_bytes(s) for s, _ in ops.values()] == [14000, 8, 500]
  assert bench_matching._category("copy.3", *ops["copy.3"], 500) == "copies"
  assert bench_matching._category("wrapped_reduce.2", "f32[]", "fusion", 500) == "reductions"


def test_step_fit_recovers_a_line():
  fit = bench_matching._fit_step([10, 100, 1000], [1e-6 + 5e-9 * n for n in (10, 100, 1000)])
  assert fit["fixed_us"] == pytest.approx(1.0) and fit["per_server_ns"] == pytest.approx(5.0)
  assert bench_matching._fit_step([24, 24], [1e-6, 2e-6])["fixed_us"] is None


@pytest.mark.skipif(cpp.find_compiler() is None, reason="no C++ compiler")
def test_cpp_section_end_to_end_at_a_tiny_size(tmp_path):
  result = bench_matching.main(["--section", "cpp", "--cpp-n", "24", "--cpp-seeds", "1",
                                "--cpp-repeats", "1", "--cpp-probe-n", "24", "--trace-steps",
                                "50", "--out", str(tmp_path)])
  row = result["cpp"]["rows"][0]
  assert row["cpp_options_same_matching"] and row["cpp_options_same_steps"]
  assert row["ours_default_inserted"] == row["ours_cpp_options_inserted"] == 24
  assert row["cpp_ratio"] >= 1 - 1e-9 and row["ours_default_ratio"] >= 1 - 1e-6
  assert row["cpp_steps"] == row["cpp_scans"] + row["cpp_moves_up"]
  model = result["cpp"]["step_model"]
  assert set(model) == {"cpp_official", "cpp_flat", "ours_default", "ours_cpp_options"}
  assert all(m["n"] == [24, 24] and m["fixed_us"] is None for m in model.values())
  trace = result["cpp"]["trace"]["default"]
  assert trace["steps"] > 0 and trace["ops_per_step"] > 1, trace
  assert trace["categories"]["copies"]["per_step"] > 0
  saved = json.loads((tmp_path / "results.json").read_text())
  assert "rows" not in saved and saved["cpp"]["rows"][0]["n"] == 24
  header = (tmp_path / "cpp.csv").read_text().splitlines()[0].split(",")
  assert "cpp_official_s" in header and "ours_default_s" in header
  assert np.isfinite(bench_matching.ratios(saved)[0].ratio)


def test_batch_section_end_to_end_at_a_tiny_size(tmp_path):
  result = bench_matching.main(["--section", "batch", "--batch-n", "40", "--batch-seeds", "1",
                                "--batch-repeats", "1", "--batch-families", "clustered",
                                "--batch-widths", "2", "--out", str(tmp_path)])
  row = result["batch"]["rows"][0]
  # the sweep over batch widths (on in the full config) at the default width 40 / 20 = 2:
  # the same instance and chunks, so the same rounds and matching
  (swept,) = result["batch"]["sweep"]
  same = ("family", "n", "seed", "chunk", "rounds", "batch_ratio", "sequential_steps",
          "rows_read")
  assert {k: swept[k] for k in same} == {k: row[k] for k in same}
  assert (row["family"], row["n"], row["chunk"]) == ("clustered", 40, 2)
  assert row["batch_inserted"] == row["sequential_inserted"] == 40
  assert row["rounds"] > 0 and row["fallbacks"] == 0  # no exact tail: every request by rounds
  # every round gathers at least one request; the record divides by the sequential steps
  assert row["rows_read"] * 2 >= row["rounds"] > 0
  assert row["rows_per_step"] == row["rows_read"] / row["sequential_steps"]
  assert row["batch_ratio"] >= 1 - 1e-6 and row["sequential_ratio"] >= 1 - 1e-6
  assert row["batch_vs_sequential"] == row["batch_s"] / row["sequential_s"] > 0
  # the full config also times the section in a child with one XLA thread: the same runs
  if result["batch"]["xla_threads"] > 1:
    assert result["batch"]["one_thread_xla_threads"] == 1  # PJRT_NPROC=1 reached the child
    (one,) = result["batch"]["one_thread_rows"]
    assert {k: one[k] for k in ("rounds", "batch_ratio", "sequential_steps", "rows_read")} == {
        k: row[k] for k in ("rounds", "batch_ratio", "sequential_steps", "rows_read")}
    (one,) = result["batch"]["one_thread_sweep"]
    assert {k: one[k] for k in same} == {k: swept[k] for k in same}
  saved = json.loads((tmp_path / "results.json").read_text())
  assert "rows" not in saved and "cpp" not in saved
  assert saved["batch"]["config"]["batch_families"] == ["clustered"]
  header = (tmp_path / "batch.csv").read_text().splitlines()[0].split(",")
  assert "batch_vs_sequential" in header and "batch_runs_s" not in header
  (ratio,) = bench_matching.ratios(saved)
  assert ratio.name.endswith("clustered n = 40") and ratio.ratio == row["batch_vs_sequential"]
  assert "1 seeds" in ratio.note and "target: <= 2" in ratio.note
  with pytest.raises(ValueError, match="multiples of 20"):
    bench_matching.run_batch_section(dict(result["batch"]["config"], batch_n=[50]))
  with pytest.raises(ValueError, match=r"batch_widths must divide the first batch_n \(40\)"):
    bench_matching.run_batch_section(dict(result["batch"]["config"], batch_widths=[2, 3]))
