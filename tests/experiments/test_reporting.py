"""experiments.reporting: claims rows rendered as markdown and checked."""

import pytest

from experiments import reporting


def test_claims_markdown_renders_and_checks_rows():
  rows = [reporting.Claim("a", "1.0", True), reporting.Claim("b", "2.0", None)]
  assert reporting.claims_markdown(rows).splitlines() == [
      "| claim | measured | held |", "|---|---|---|", "| a | 1.0 | True |", "| b | 2.0 | None |"]
  assert reporting.claims_markdown(rows, {True: "yes", False: "no", None: "n/a"}).endswith(
      "| b | 2.0 | n/a |")
  with pytest.raises(TypeError, match="row 0"):
    reporting.claims_markdown([("a", "1.0", True)])
