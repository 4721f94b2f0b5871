"""Training re-evaluation curves, re-exported from their home :mod:`jaxlab.dynamics.trec`."""

from jaxlab.dynamics.trec import *  # noqa: F403
from jaxlab.dynamics.trec import __all__  # noqa: F401
