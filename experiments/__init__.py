"""Experiments: `python -m experiments.<name> [--quick]`."""
