"""Optimization test problems: objectives by hand, and the classification loaders."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import PIL.Image
import tensorflow_datasets as tfds
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab.data.optim_problems import load_classification, make_least_squares, rosenbrock


def test_rosenbrock_values():
  assert float(rosenbrock(jnp.ones((3, 3)))) == 0.0
  # Hand value at (0, 0): (1 - 0)^2 = 1; at (-1.2, 1): 100 * (1 - 1.44)^2 + 2.2^2 = 24.2.
  assert float(rosenbrock(jnp.zeros(2))) == 1.0
  np.testing.assert_allclose(float(rosenbrock(jnp.array([-1.2, 1.0]))), 24.2, rtol=1e-6)


def test_noiseless_least_squares_has_zero_loss_at_solution():
  p = make_least_squares(jax.random.key(0), num_rows=64, dim_in=8, dim_out=3)
  w = jnp.linalg.lstsq(p.a, p.b)[0]
  assert float(p.loss(w)) < 1e-8
  assert p.loss(w, jnp.arange(5)).shape == ()


def test_tfds_data_source_path_with_mock_data():
  # mock_data replaces the ArrayRecord reader behind tfds.data_source with random examples
  # of MNIST's features (no files, no TensorFlow): the loader's calls and decoding.
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    data = load_classification("mnist")
  assert data.x_train.shape == (12, 784) and data.x_test.shape == (12, 784)
  assert data.y_train.dtype == np.int32


def test_digits_classification_split_and_standardization():
  from sklearn.model_selection import train_test_split

  data = load_classification("digits", test_fraction=0.25, seed=0)
  raw = sk_load_digits()
  assert data.x_train.shape == (1347, 64) and data.x_test.shape == (450, 64)
  assert data.num_classes == 10 and data.y_train.dtype == np.int32
  # stratified: each class's share of the test split is its share of the data (+-1 example)
  counts = np.bincount(raw.target)
  assert np.all(np.abs(np.bincount(data.y_test, minlength=10) - 0.25 * counts) <= 1)
  # reference: the same split of row indices, standardized with the train rows' statistics
  # in float64 (the loader's are float32: relative round-off up to ~1e-5 on the rare pixels
  # whose std is small, hence rtol 1e-4)
  tr, te = train_test_split(np.arange(len(raw.target)), test_size=0.25, random_state=0,
                            stratify=raw.target)
  mean, std = raw.data[tr].mean(0), raw.data[tr].std(0) + 1e-6
  np.testing.assert_array_equal(data.y_train, raw.target[tr])
  np.testing.assert_allclose(data.x_train, (raw.data[tr] - mean) / std, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(data.x_test, (raw.data[te] - mean) / std, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(data.x_train.mean(0), 0.0, atol=1e-5)


def _png(pixels: np.ndarray) -> io.BytesIO:
  out = io.BytesIO()
  PIL.Image.fromarray(pixels).save(out, format="PNG")
  out.seek(0)
  return out


def test_tfds_data_source_reads_array_record_files_prepared_as_documented(tmp_path):
  # The documented preparation, download_and_prepare(file_format="array_record"), run on
  # MNIST's own builder with synthetic images instead of the download. TFDS encodes images
  # with TensorFlow, so the images are handed over as PNG files (encoded with PIL), and
  # then nothing here needs TensorFlow: writing and reading ArrayRecord do not.
  from tensorflow_datasets.core import registered
  from tensorflow_datasets.image_classification import mnist

  rng = np.random.default_rng(0)
  pixels = {"train": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
            "test": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)}
  labels = {"train": rng.integers(0, 10, 10), "test": rng.integers(0, 10, 4)}

  with registered.skip_registration():
    class SyntheticMnist(mnist.MNIST):
      name = "mnist"  # files land where tfds.data_source("mnist") looks

      def _split_generators(self, dl_manager):
        return {s: self._generate_examples(s) for s in ("train", "test")}

      def _generate_examples(self, split):
        for i, (x, y) in enumerate(zip(pixels[split], labels[split], strict=True)):
          yield i, {"image": _png(x), "label": int(y)}

  # offline: a builder with nothing prepared yet would ask GCS for MNIST's metadata
  with tfds.testing.disable_gcs_access():
    SyntheticMnist(data_dir=str(tmp_path)).download_and_prepare(file_format="array_record")
  assert list(tmp_path.glob("mnist/*/mnist-train.array_record-*"))
  data = load_classification("mnist", data_dir=str(tmp_path))
  # the writer shuffles, so undo the standardization and compare (image, label) sets
  x_train = pixels["train"].reshape(10, -1) / 255.0
  mean, std = x_train.mean(0), x_train.std(0) + 1e-6  # order-free: what the loader used
  for split, x, y in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test)):
    assert y.dtype == np.int32
    back = np.rint((x * std + mean) * 255.0).astype(np.uint8)
    got = sorted((row.tobytes(), int(label)) for row, label in zip(back, y, strict=True))
    want = sorted((img.tobytes(), int(label))
                  for img, label in zip(pixels[split], labels[split], strict=True))
    assert got == want, split
  assert data.num_classes == max(labels["train"].max(), labels["test"].max()) + 1
  assert load_classification("mnist", data_dir=str(tmp_path), max_examples=3).x_train.shape[0] == 3
