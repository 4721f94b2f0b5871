"""Vision mechanisms (issues 21 and 22), each shown on synthetic or bundled data.

The papers build large vision systems; each module here implements the core mechanism as
importable JAX functions on small models trained from scratch, and its docstring says what
is the paper's and what is our stand-in.

* :mod:`~jaxlab.vision.care`: CARE's entity reward (Hungarian-matched cosine similarity,
  count, repetition and format terms), the mask-confidence filter, and crop / masked /
  global evidence views with a majority vote (issue 22).
"""

from jaxlab.vision import care

__all__: list[str] = ["care"]
