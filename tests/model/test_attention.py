"""attention.py on its own: backends agree, masks and relative scores match their definitions."""

import math

import pytest
import torch
from helpers import TOL, max_diff, padded_batch, random_model

from bertkit import attention


def qkv(B=2, h=3, S=5, T=7, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, h, S, d, generator=g),
        torch.randn(B, h, T, d, generator=g),
        torch.randn(B, h, T, d, generator=g),
    )


def test_eager_is_softmax_of_scaled_scores():
    q, k, v = qkv()
    keep = torch.ones(2, 7)
    keep[1, 4:] = 0
    mask = attention.to_additive(keep[:, None, None, :], torch.float32)
    context, probs = attention.eager_attention(q, k, v, mask, scale=0.5, dropout_p=0.0)
    for b in range(2):
        for h in range(3):
            n = int(keep[b].sum())
            expected = torch.softmax(q[b, h] @ k[b, h, :n].T * 0.5, dim=-1)  # (S, n) over real keys only
            assert max_diff(probs[b, h, :, :n], expected) <= 1e-6
            assert probs[b, h, :, n:].abs().sum().item() == 0.0
            assert max_diff(context[b, h], expected @ v[b, h, :n]) <= 1e-6


def test_sdpa_equals_eager():
    q, k, v = qkv()
    keep = torch.ones(2, 5, 7)
    keep[0, :, 3:] = 0
    mask = attention.to_additive(keep[:, None], torch.float32)
    eager, _ = attention.eager_attention(q, k, v, mask, scale=0.5, dropout_p=0.0)
    sdpa, probs = attention.sdpa_attention(q, k, v, mask, scale=0.5, dropout_p=0.0)
    assert probs is None
    assert max_diff(eager, sdpa) <= TOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_takes_a_float32_mask_with_half_precision_queries(dtype):
    q, k, v = qkv()
    keep = torch.ones(2, 7)
    keep[0, 5:] = 0
    mask = attention.to_additive(keep[:, None, None, :], torch.float32)
    reference, _ = attention.eager_attention(q, k, v, mask, scale=0.5, dropout_p=0.0)
    out, _ = attention.sdpa_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask, scale=0.5, dropout_p=0.0)
    assert torch.isfinite(out).all()
    assert max_diff(out.float(), reference) <= 3e-2


def test_sdpa_refuses_what_only_eager_does():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="eager"):
        attention.sdpa_attention(q, k, v, None, scale=1.0, dropout_p=0.0, head_mask=torch.ones(1, 3, 1, 1))


@pytest.mark.parametrize(
    "need_probs, head_mask, relative, expected",
    [
        (False, False, False, "sdpa"),
        (True, False, False, "eager"),
        (False, True, False, "eager"),
        (False, False, True, "eager"),
    ],
)
@pytest.mark.parametrize("implementation", ["sdpa", "auto", "varlen"])
def test_padded_backend(implementation, need_probs, head_mask, relative, expected):
    assert (
        attention.padded_backend(implementation, need_probs=need_probs, head_mask=head_mask, relative=relative)
        == expected
    )
    assert attention.padded_backend("eager", need_probs=False, head_mask=False, relative=False) == "eager"


@pytest.mark.parametrize("past", [0, 3])
def test_causal_mask_with_past(past):
    S, T = 4, 4 + past
    keep = torch.ones(2, T)
    keep[1, 0] = 0  # first cached token of row 1 is padding
    mask = attention.self_attention_mask(keep, S, causal=True, dtype=torch.float32)
    assert mask.shape == (2, 1, S, T)
    for b in range(2):
        for i in range(S):
            for j in range(T):
                visible = j <= past + i and keep[b, j] == 1
                assert (mask[b, 0, i, j] == 0) == visible


@pytest.mark.parametrize("kind", ["relative_key", "relative_key_query"])
@pytest.mark.parametrize("past", [0, 2])
def test_relative_scores_match_the_definition(kind, past):
    q, k, _ = qkv(S=3, T=3 + past)
    table = torch.nn.Embedding(2 * 10 - 1, 4)
    scores = sum(attention.relative_position_scores(q, k, table, kind, past_length=past))
    for i in range(3):
        for j in range(3 + past):
            r = table.weight[(past + i) - j + 10 - 1]  # vector of the signed distance
            expected = q[:, :, i] @ r
            if kind == "relative_key_query":
                expected = expected + k[:, :, j] @ r
            assert max_diff(scores[:, :, i, j], expected) <= 1e-5


def test_model_in_bfloat16_and_under_autocast():
    model = random_model()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        reference = model(ids, mask, types).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = model(ids, mask, types).last_hidden_state
        half = model.to(torch.bfloat16)(ids, mask, types).last_hidden_state
    for out in (auto, half):
        assert torch.isfinite(out).all()
        rows = mask.bool()  # padding positions are not compared
        assert max_diff(out.float()[rows], reference[rows]) <= 0.1
    assert math.isclose(float(half.float()[rows].std()), float(reference[rows].std()), rel_tol=0.05)
