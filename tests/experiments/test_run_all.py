"""run_all at its smallest setting: subprocess per experiment, claims, ratios, REPORT.md."""

import json

import pytest

from experiments import run_all


def _table(text: str) -> dict[str, list[str]]:
  """The summary table of REPORT.md as {method: cells}."""
  head = text.split("\n## ")[0]
  rows = [line for line in head.splitlines() if line.startswith("| ")][1:]
  return {cells[0]: cells[1:] for cells in
          ([c.strip() for c in row.strip("|").split("|")] for row in rows)}


def test_run_all_smoke_reports_each_experiment_and_survives_a_failure(tmp_path, monkeypatch):
  broken = run_all.Method("Broken method", "does_not_exist", "nowhere", "nowhere", (),
                          repair_issue=41)
  monkeypatch.setattr(run_all, "ENTRIES", [broken, *run_all.ENTRIES])
  # a failing entry first, then one that runs (the smoke runs themselves are the notebooks')
  report = run_all.main(["--smoke", "--only", "does_not_exist", "fractal_gd",
                         "--out", str(tmp_path)])
  text = (tmp_path / "REPORT.md").read_text()
  table = _table(text)
  assert list(table) == ["Broken method", "Fractal convergence of GD"]
  assert table["Broken method"][0].startswith("failed")
  for record in report["entries"][1:]:
    status, wall, primary, counts, _ = table[record["name"]]
    assert status == "ok" and wall.endswith(" s")
    # read from the results.json through the protocol: an unported method cannot tell
    verdicts = [c["verdict"] for c in record["claims"]]
    assert verdicts and record["claims"][0]["primary"] and primary == verdicts[0]
    assert counts == " / ".join(str(verdicts.count(v)) for v in
                                ("held", "refuted", "inconclusive", "cannot tell"))
    assert all("test bed under repair" in c["reason"] for c in record["claims"])
  assert "No module named experiments.does_not_exist" in text  # its log tail
  fractal = next(r for r in report["entries"] if r["experiment"]["module"] == "fractal_gd")
  assert fractal["bench"]["status"] == "ok" and fractal["ratios"]  # benchmark ratios read
  assert table["Fractal convergence of GD"][4] == f"{len(fractal['ratios'])} ratios"
  assert all(x["ratio"] > 0 for x in fractal["ratios"])
  assert any(f.endswith(".png") for f in fractal["figures"])
  assert json.loads((tmp_path / "report.json").read_text())["scale"] == "smoke"
  assert "jax" in report["machine"] and report["machine"]["cpus"] >= 1


def test_format_report_marks_verdicts_and_failures():
  report = {"scale": "quick", "argv": ["--quick"], "date": "today", "wall_time_s": 12.0,
            "machine": {"backend": "cpu"}, "entries": [
                {"name": "A", "paper": "p", "figures": ["a/x.png"], "claims_error": None,
                 "experiment": {"command": "experiments.a --quick", "status": "ok",
                                "wall_time_s": 5.0, "log": "a/log.txt"},
                 "claims": [
                     {"claim": "x | y", "measured": "1 ± 0", "verdict": "held", "primary": True,
                      "text": "held (L > 0 and U ≥ δ)"},
                     {"claim": "z", "measured": "2", "verdict": "refuted", "primary": False,
                      "text": "refuted (reversed)"},
                     {"claim": "w", "measured": "-", "verdict": "cannot tell", "primary": False,
                      "text": "cannot tell (positive control failed: oracle)"}]},
                {"name": "B", "paper": "q", "figures": [], "claims": [], "claims_error": None,
                 "experiment": {"command": "experiments.b", "status": "timed out after 9 s",
                                "wall_time_s": 9.0, "log": "b/log.txt", "error_tail": "boom"}}]}
  text = run_all.format_report(report)
  table = _table(text)
  assert table["A"][:4] == ["ok", "5 s", "held", "1 / 1 / 0 / 1"]
  assert table["B"][:4] == ["timed out after 9 s", "9 s", "-", "-"]
  assert "x \\| y (primary)" in text and "refuted (reversed)" in text
  assert "cannot tell (positive control failed: oracle)" in text and "![x.png](a/x.png)" in text
  assert "boom" in text


def test_bad_timeout_raises_before_running(tmp_path):
  with pytest.raises(ValueError, match="--timeout"):
    run_all.main(["--smoke", "--timeout", "0", "--out", str(tmp_path)])


def test_malformed_claim_rows_are_rejected():
  from experiments.reporting import Claim, check_claims
  good = Claim("c", "1.0 ± 0.1", None)
  assert check_claims([good]) == [good]
  with pytest.raises(TypeError, match="row 1 must be a Claim"):
    check_claims([good, ("c", "m", True)])
  with pytest.raises(TypeError, match="held"):
    check_claims([Claim("c", "m", 1)])
  with pytest.raises(ValueError, match="row 0"):
    check_claims([Claim("c", "", True)])


def test_figures_link_to_the_committed_record_only_when_identical(tmp_path):
  out_dir, record = tmp_path / "run_all" / "quick", tmp_path / "record" / "m" / "quick"
  (out_dir / "m").mkdir(parents=True)
  record.mkdir(parents=True)
  for name, ours, committed in [("same.png", b"a", b"a"), ("other.png", b"b", b"c"),
                                ("removed.png", None, b"d"), ("new.png", b"e", None)]:
    if ours is not None:
      (out_dir / "m" / name).write_bytes(ours)
    if committed is not None:
      (record / name).write_bytes(committed)
  result = {"figures": ["same.png", "other.png", "removed.png", "new.png"]}
  links = run_all._figures(result, str(out_dir / "m"), str(out_dir), str(record))
  assert links == ["../../record/m/quick/same.png", "m/other.png",
                   "../../record/m/quick/removed.png", "m/new.png"]
  assert run_all._figures(result, str(out_dir / "m"), str(out_dir)) == [
      "m/same.png", "m/other.png", "m/new.png"]


def _entry(module: str, seconds: float, bench: float | None = None) -> dict:
  r = {"name": module, "paper": "p", "figures": [], "claims": [], "claims_error": None,
       "experiment": {"module": module, "command": f"experiments.{module}", "status": "ok",
                      "wall_time_s": seconds, "log": f"{module}/log.txt"}}
  if bench is not None:
    r["bench"] = {"command": f"experiments.bench_{module}", "status": "ok",
                  "wall_time_s": bench}
  return r


def test_update_splices_entries_in_registry_order_and_sums_their_times():
  first, last = run_all.ENTRIES[0].module, run_all.ENTRIES[-1].module
  previous = {"scale": "quick", "argv": ["--quick"], "date": "d0", "wall_time_s": 99.0,
              "machine": {"backend": "cpu"},
              "entries": [_entry(first, 10.0, bench=2.0), _entry("gone", 3.0)]}
  update = {"scale": "quick", "argv": ["--quick", "--only", last, first, "--update"],
            "date": "d1", "wall_time_s": 7.0, "machine": {"backend": "cpu"},
            "entries": [_entry(first, 4.0), _entry(last, 5.0)]}
  out = run_all.splice(previous, update)
  # the re-run entry replaces the old one, the new one is added in ENTRIES order, an entry
  # that is no longer registered goes last; the whole run's date and argv stay
  assert [r["experiment"]["module"] for r in out["entries"]] == [first, last, "gone"]
  assert out["entries"][0]["experiment"]["wall_time_s"] == 4.0 and "bench" not in out["entries"][0]
  assert out["wall_time_s"] == 4.0 + 5.0 + 3.0
  assert out["date"] == "d0" and out["updates"][0]["modules"] == [first, last]
  text = run_all.format_report(out)
  assert "(the sum of the entries' wall times)" in text and f"{first}, {last} re-run" in text
  # a second splice keeps the first one's record
  assert len(run_all.splice(out, update)["updates"]) == 2


def test_update_needs_only_and_a_report_of_the_same_scale(tmp_path):
  with pytest.raises(ValueError, match="--update needs --only"):
    run_all.main(["--smoke", "--update", "--out", str(tmp_path)])
  (tmp_path / "report.json").write_text(json.dumps({"scale": "quick", "entries": []}))
  with pytest.raises(ValueError, match="is a 'quick' report, this run is 'smoke'"):
    run_all.main(["--smoke", "--update", "--only", "trec", "--out", str(tmp_path)])
