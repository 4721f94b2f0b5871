"""experiments.timing: self times read from a profiler trace."""

from experiments import timing


def test_self_times_subtract_nested_events_per_thread():
  ev = lambda name, ts, dur, tid=1: {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 0,
                                     "tid": tid}
  events = [ev("loop", 0, 10), ev("a", 1, 3), ev("b", 5, 2), ev("inner", 5.5, 1),
            ev("a", 20, 4), ev("a", 0, 7, tid=2), {"ph": "M", "name": "meta"}]
  self_us, count = timing.trace_self_times(events)
  assert self_us == {"loop": 5, "a": 14, "b": 1, "inner": 1}
  assert count == {"loop": 1, "a": 3, "b": 1, "inner": 1}
  only_a, _ = timing.trace_self_times(events, key=lambda e: e["name"] if e["name"] == "a" else None)
  assert only_a == {"a": 14}  # a key of None skips the event (not its nesting)
