"""Vision mechanisms (issues 21 and 22), each shown on synthetic or bundled data.

The papers build large vision systems; each module here implements the core mechanism as
importable JAX functions on small models trained from scratch, and its docstring says what
is the paper's and what is our stand-in.

Modules:

* :mod:`~jaxlab.vision.dl4nd`: DL4ND's noise detection (2-component GMM on per-sample
  losses) and one-shot cross-domain relabelling by per-(class, domain) feature proxies.
* :mod:`~jaxlab.vision.egoworld`: EgoWorld's exocentric-to-egocentric reprojection (median
  depth-scale alignment, back-projection, Umeyama similarity from hand keypoints, a
  scatter-min z-buffered splat into the egocentric camera).
* :mod:`~jaxlab.vision.tvi`: a tiny VLM (digit patch tokens + question tokens on the toolkit
  transformer), the blind pass with a learned null image, the chain-of-embedding distance
  profile, the visual integration point, the TVI score and the TVI regulariser (Long et
  al., arXiv:2509.23050).
* :mod:`~jaxlab.vision.care`: CARE's entity reward (Hungarian-matched cosine similarity,
  count, repetition and format terms), the mask-confidence filter, and crop / masked /
  global evidence views with a majority vote (issue 22).
* :mod:`~jaxlab.vision.satdreamer`: SatDreamer360's ray-based triplane retrieval (triplane
  lookup along panorama rays with learned offsets and weights) and panoramic epipolar
  attention (candidates near the epipolar curve on the sphere).
"""

from jaxlab.vision import care, dl4nd, egoworld, satdreamer, tvi

__all__: list[str] = ["care", "dl4nd", "egoworld", "satdreamer", "tvi"]
