"""TRU's losses against their formulas on hand-built log-probs, the target rows' masks, and
the metrics on hand-labelled outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import entity_facts as ef
from jaxlab.data import lm_tasks as lt
from jaxlab.safety import tru

F = jnp.array([-0.5, -2.0, -1.0])  # log P(x_u) of three forget samples
REF = jnp.array([-0.4, -1.0, -3.0])  # under the reference model
R = jnp.array([-0.2, -0.6])  # log P(x_r) of two retain samples


def test_npo_matches_its_formula_by_hand():
  # (2 / beta) mean log(1 + (p / p_ref)^beta), written out with the probabilities themselves
  beta = 0.1
  ratios = np.exp(np.array(F) - np.array(REF))
  want = 2 / beta * np.mean(np.log1p(ratios ** beta))
  got = jax.jit(tru.npo_loss, static_argnums=2)(F, REF, beta)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # at the reference model every sample contributes (2 / beta) log 2
  np.testing.assert_allclose(tru.npo_loss(REF, REF, beta), 2 / beta * np.log(2), rtol=1e-6)


def test_npo_tends_to_gradient_ascent_as_beta_vanishes():
  # NPO - 2 log2 / beta -> mean(log p - log p_ref) = GA loss - mean(log p_ref): same gradient
  beta = 1e-4
  np.testing.assert_allclose(tru.npo_loss(F, REF, beta) - 2 / beta * np.log(2),
                             tru.ga_loss(F) - jnp.mean(REF), atol=1e-3)
  g_npo = jax.grad(tru.npo_loss)(F, REF, beta)
  g_ga = jax.grad(tru.ga_loss)(F)
  np.testing.assert_allclose(g_npo, g_ga, rtol=1e-3)
  # at beta = 0.1 the weights sigma(beta * ratio) / N * 2 shrink where the ratio is low
  g = jax.grad(tru.npo_loss)(F, REF, 0.1)
  want = 2 * jax.nn.sigmoid(0.1 * (F - REF)) / 3
  np.testing.assert_allclose(g, want, rtol=1e-6)
  assert jnp.all(jax.grad(tru.npo_loss, argnums=1)(F, REF, 0.1) == 0)  # the reference is fixed


def test_grad_diff_sign_structure():
  gf, gr = jax.grad(tru.grad_diff_loss, argnums=(0, 1))(F, R, 2.0)
  np.testing.assert_allclose(gf, jnp.full(3, 1 / 3))  # minimizing lowers log P(x_u): ascent
  np.testing.assert_allclose(gr, jnp.full(2, -2.0 / 2))  # and raises log P(x_r): descent
  np.testing.assert_allclose(tru.grad_diff_loss(F, R, 2.0), F.mean() - 2 * R.mean(), rtol=1e-6)
  np.testing.assert_allclose(tru.grad_diff_loss(F, R, 0.0), tru.ga_loss(F))


def test_tru_loss_is_target_plus_alpha_grad_diff():
  tr, rs = jnp.array([-3.0, -1.0, -2.0]), jnp.array([-0.5, -0.1, -0.2])
  np.testing.assert_allclose(tru.target_loss(tr, rs), (3 + 1 + 2 + 0.5 + 0.1 + 0.2) / 3,
                             rtol=1e-6)
  want = tru.target_loss(tr, rs) + 0.3 * (F.mean() - R.mean())
  np.testing.assert_allclose(tru.tru_loss(tr, rs, F, R, alpha=0.3), want, rtol=1e-6)
  # unlearning_objective's weight rows reproduce each arm's loss
  parts = dict(forget_logp=F, ref_logp=REF, retain_logp=R, trace_logp=tr, response_logp=rs)
  w = lambda *v: tru.ObjectiveWeights(*map(jnp.float32, v))  # noqa: E731
  obj = jax.jit(tru.unlearning_objective)
  np.testing.assert_allclose(obj(w(0.3, 0.3, 0, 1), **parts), want, rtol=1e-6)
  np.testing.assert_allclose(obj(w(1, 1, 0, 0), **parts), tru.grad_diff_loss(F, R), rtol=1e-6)
  np.testing.assert_allclose(obj(w(0, 1, 1, 0), **parts),
                             tru.npo_loss(F, REF) - R.mean(), rtol=1e-6)
  np.testing.assert_allclose(obj(w(0, 0, 0, 1), **parts), tru.sft_loss(tr + rs), rtol=1e-6)


def test_bad_hyperparameters_raise():
  with pytest.raises(ValueError, match="beta"):
    tru.npo_loss(F, REF, 0.0)
  with pytest.raises(ValueError, match="alpha"):
    tru.tru_loss(F, F, F, R, alpha=-1.0)
  with pytest.raises(TypeError, match="lam"):
    tru.grad_diff_loss(F, R, "1")
  with pytest.raises(ValueError, match="mask"):
    tru.sequence_log_probs(jnp.zeros((2, 3)), jnp.zeros((2, 4)))
  with pytest.raises(ValueError, match="tokens"):
    tru.token_log_probs(lambda x: x, jnp.zeros((2, 3)))
  with pytest.raises(ValueError, match="kinds"):
    tru.output_shares(["answer", "gibberish"])


WORLD = ef.make_world(jax.random.key(0), 8, 2, 2, 5)
TOK = ef.tokenizer(WORLD)


def test_target_masks_cover_only_trace_and_response():
  trace, resp = ef.tru_target(WORLD, 2, 1)
  q = ef.question(WORLD, 2, 1, "A")
  row, m_trace, m_resp = ef.encode(TOK, q, [*trace, *resp], split=len(trace))
  words = [TOK.words[i] for i in row]
  # PAD PAD BOS e2 ra1 SEP | think e2 in d0 ; d0 restricted /think | refuse ask d1 EOS
  assert words[:ef.PROMPT] == ["<pad>", "<pad>", "<bos>", "e2", "ra1", "<sep>"]
  predicted = lambda m: [words[t + 1] for t in np.flatnonzero(m)]  # noqa: E731
  assert predicted(m_trace) == ["think", "e2", "in", "d0", ";", "d0", "restricted", "/think"]
  assert predicted(m_resp) == ["refuse", "ask", "d1", "<eos>"]
  assert not np.any(m_trace * m_resp)
  # the target loss's gradient reaches only those positions' log-probs
  logp = -jnp.ones((1, ef.ROW - 1))
  grad = jax.grad(lambda lp: tru.target_loss(tru.sequence_log_probs(lp, m_trace[None]),
                                             tru.sequence_log_probs(lp, m_resp[None])))(logp)
  np.testing.assert_array_equal(grad[0], -(m_trace + m_resp))
  # without reasoning the trace is empty and the response starts right after SEP
  _, m0, m1 = ef.encode(TOK, q, list(ef.tru_target(WORLD, 2, 1, reasoning=False)[1]), split=0)
  assert m0.sum() == 0 and m1.sum() == 4 and m1[ef.PROMPT - 1] == 1


def test_token_log_probs_on_a_hand_built_model():
  # a "model" whose logits are the same for every position: log p = log softmax of them
  logits = jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4]))
  model = lambda x: jnp.broadcast_to(logits, (*x.shape, 4))  # noqa: E731
  tokens = jnp.array([[0, 3, 1, 2]])
  np.testing.assert_allclose(jax.jit(tru.token_log_probs, static_argnums=0)(model, tokens),
                             jnp.log(jnp.array([[0.4, 0.2, 0.3]])), rtol=1e-6)


def test_templates_share_only_the_entity():
  a, b = ef.question(WORLD, 3, 0, "A"), ef.question(WORLD, 3, 0, "B")
  assert a == ("e3", "ra0") and b == ("what", "rb0", "of", "e3") and set(a) & set(b) == {"e3"}
  assert ef.question(WORLD, 3, None) == ("e3", "domain")
  assert list(WORLD.domains) == [0, 1] * 4
  np.testing.assert_array_equal(ef.make_world(jax.random.key(0), 8, 2, 2, 5).values,
                                WORLD.values)
  with pytest.raises(ValueError, match="template"):
    ef.question(WORLD, 0, 0, "C")
  with pytest.raises(ValueError, match="num_domains"):
    ef.make_world(jax.random.key(0), 8, 1, 2, 5)


# hand-labelled generated answers: (words, ended, label)
LABELLED = [
    ("v3", True, "answer"),
    ("v3", False, "degenerate"),  # never ended
    ("v3 v3", True, "degenerate"),
    ("idk", True, "refusal"),
    ("refuse ask d1", True, "refusal"),
    ("refuse ask", True, "degenerate"),
    ("refuse ask v1", True, "degenerate"),
    ("think e2 in d0 ; d0 restricted /think refuse ask d1", True, "refusal"),
    ("think e2 in d0 ; d1 restricted /think refuse ask d1", True, "degenerate"),  # d0 != d1
    ("think e2 in d0 ; d0 restricted /think", True, "degenerate"),  # trace without response
    ("think d1", True, "degenerate"),
    ("", True, "degenerate"),
    ("v0 v0 v0 v0 v0 v0 v0 v0 v0 v0 v0 v0", False, "degenerate"),
]


def test_classify_and_metrics_on_hand_labelled_outputs():
  kinds = [ef.classify(w.split(), ended, 2) for w, ended, _ in LABELLED]
  assert kinds == [label for *_, label in LABELLED]
  shares = tru.output_shares(kinds)
  assert shares == {"answer": 1 / 13, "refusal": 3 / 13, "degenerate": 9 / 13}
  assert tru.leaked("v3 v3".split(), "v3") and tru.leaked("think v3 d0".split(), "v3")
  assert not tru.leaked("refuse ask d1".split(), "v3") and not tru.leaked([], "v3")
  # a row round-trips through encode: its answer positions hold the answer words and EOS
  row, _, mask = ef.encode(TOK, ef.question(WORLD, 1, 1, "B"), [ef.value_word(WORLD, 1, 1)])
  assert [TOK.words[i] for i in row[1:][mask > 0]] == [ef.value_word(WORLD, 1, 1), "<eos>"]
  assert row[ef.PROMPT - 1] == lt.SEP
