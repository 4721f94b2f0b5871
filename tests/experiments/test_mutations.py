"""The mutation runner on a tiny project: a caught mutation, a surviving one, a bad list."""

import os

import pytest

from experiments import mutations as M

SOURCE = "def double(x):\n  return 2 * x\n"
TEST = "from pkg import double\n\ndef test_double():\n  assert double(3) == 6\n"


@pytest.fixture
def scratch(tmp_path):
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "__init__.py").write_text(SOURCE)
  (tmp_path / "test_pkg.py").write_text(TEST)
  return str(tmp_path)


def test_a_caught_mutation_is_killed_and_the_file_restored(scratch):
  m = M.Mutation("pkg/__init__.py", "2 * x", "3 * x", "wrong factor")
  out = M.run_one(scratch, ["test_pkg.py"], m, timeout=120)
  assert out.status == "killed" and "test_double" in out.detail
  assert open(os.path.join(scratch, "pkg", "__init__.py")).read() == SOURCE


def test_a_mutation_no_test_sees_survives(scratch):
  m = M.Mutation("pkg/__init__.py", "2 * x", "x + x", "the same function")
  assert M.run_one(scratch, ["test_pkg.py"], m, timeout=120).status == "survived"
  gone = M.Mutation("pkg/__init__.py", "4 * x", "3 * x", "text not in the file")
  assert M.run_one(scratch, ["test_pkg.py"], gone, timeout=120).status == "not applicable"


def test_lists_are_checked(tmp_path):
  bad = tmp_path / "mutations_x.toml"
  bad.write_text('tests = ["t.py"]\n[[mutation]]\nfile = "a.py"\nfind = "x"\nreplace = "x"\n'
                 'why = "same"\n')
  with pytest.raises(ValueError, match="replaces its text by itself"):
    M.load_list(str(bad))
  bad.write_text('tests = []\n')
  with pytest.raises(ValueError, match="tests"):
    M.load_list(str(bad))


def test_committed_lists_apply_to_the_tree():
  for name, path in M.find_lists().items():
    _, mutations = M.load_list(path)
    for m in mutations:
      text = open(os.path.join(M.ROOT, m.file)).read()
      assert text.count(m.find) == 1, f"{name}: {m.find!r} occurs {text.count(m.find)} times"
