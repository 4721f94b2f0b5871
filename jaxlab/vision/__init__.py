"""Vision mechanisms (issues 21 and 22), each shown on synthetic or bundled data.

The papers build large vision systems; each module here implements the core mechanism as
importable JAX functions on small models trained from scratch, and its docstring says what
is the paper's and what is our stand-in.

* :mod:`~jaxlab.vision.satdreamer`: SatDreamer360's ray-based triplane retrieval (triplane
  lookup along panorama rays with learned offsets and weights) and panoramic epipolar
  attention (candidates near the epipolar curve on the sphere).
"""

from jaxlab.vision import satdreamer

__all__: list[str] = ["satdreamer"]
