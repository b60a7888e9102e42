"""GradCache (bertkit.gradcache) gives the uncached loss and gradients; gather=True across two processes gives
one process's gradients on the whole batch.

A tiny BertModel with mean pooling embeds (anchor, positive) pairs in float64, so exact comparisons hold."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import padded_batch, random_model

from bertkit import losses
from bertkit.errors import ConfigError, InputError
from bertkit.gradcache import cached_loss, split_features
from bertkit.pooling import pool

BATCH = 8


def make_model(dropout: float = 0.0) -> torch.nn.Module:
    model = random_model(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout).double()
    return model.train(dropout > 0)


def columns(batch: int = BATCH, count: int = 2) -> list[dict[str, torch.Tensor]]:
    """`count` columns (anchors, positives, ...) of `batch` texts of varied lengths, as feature dicts."""
    out = []
    for c in range(count):
        lengths = [3 + (5 * i + 3 * c) % 9 for i in range(batch)]
        ids, mask, types = padded_batch(lengths=lengths, seed=c)
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    return out


def embedder(model: torch.nn.Module):
    def embed(features: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = model(**features).last_hidden_state  # (b, S, H)
        return pool(hidden, features["attention_mask"], "mean")  # (b, H)

    return embed


def mnrl(cols: list[torch.Tensor], **kw) -> torch.Tensor:
    return losses.multiple_negatives_ranking(cols[0], cols[1:], **kw)


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and len(a) > 0
    return max((a[n] - b[n]).abs().max().item() for n in a)


def uncached(model, cols, loss_on=mnrl, parts: int | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    """One pass with a graph; with `parts`, each column embedded part by part (the same RNG draws as GradCache)."""
    model.zero_grad()
    embed = embedder(model)
    if parts is None:
        reps = [embed(c) for c in cols]
    else:
        reps = [torch.cat([embed(p) for p in split_features(c, parts)]) for c in cols]
    loss = loss_on(reps)
    loss.backward()
    return loss.item(), grads(model)


def cached(model, cols, size: int, loss_on=mnrl, scale: float = 1.0) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = cached_loss(embedder(model), [split_features(c, size) for c in cols], loss_on)
    (loss * scale).backward()
    return loss.item(), grads(model)


# ----- cached = uncached --------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 3, 8])
def test_cached_loss_and_gradients_equal_uncached(size):
    model, cols = make_model(), columns()
    loss, ref = uncached(model, cols)
    cached_value, got = cached(model, cols, size)
    assert abs(cached_value - loss) <= 1e-6
    assert max_grad_diff(got, ref) <= 1e-5


def test_cached_equals_uncached_with_hard_negatives_symmetric_and_matryoshka():
    model, cols = make_model(), columns(count=3)

    def loss_on(c):
        return losses.matryoshka(lambda t: mnrl(t, symmetric=True), c, [32, 16], [1.0, 0.5])

    loss, ref = uncached(model, cols, loss_on)
    cached_value, got = cached(model, cols, 3, loss_on)
    assert abs(cached_value - loss) <= 1e-6
    assert max_grad_diff(got, ref) <= 1e-5


def test_the_incoming_gradient_scales_every_part_and_gradients_accumulate():
    model, cols = make_model(), columns()
    _, once = cached(model, cols, 3)
    _, scaled = cached(model, cols, 3, scale=1024.0)  # as a GradScaler scales the loss
    assert max_grad_diff(scaled, {n: g * 1024 for n, g in once.items()}) <= 1e-9 * 1024
    loss = cached_loss(embedder(model), [split_features(c, 3) for c in cols], mnrl)
    loss.backward()  # on top of the scaled run's gradients
    assert max_grad_diff(grads(model), {n: g * 1025 for n, g in once.items()}) <= 1e-9 * 1025


def test_without_gradients_it_is_the_plain_loss():
    model, cols = make_model(), columns()
    with torch.no_grad():
        plain = mnrl([embedder(model)(c) for c in cols]).item()
        value = cached_loss(embedder(model), [split_features(c, 3) for c in cols], mnrl)
    assert not value.requires_grad and abs(value.item() - plain) <= 1e-9


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
        ),
    ],
)
def test_dropout_masks_are_replayed_in_the_second_pass(device):
    """With dropout on, the gradients equal those of one pass with the parts' own dropout masks (the draws of step
    1); a second pass drawing fresh masks would give other gradients. After backward, the RNG is where step 1 left
    it, so the run continues as without the cache."""
    model = make_model(dropout=0.3).to(device)
    cols = [{k: v.to(device) for k, v in c.items()} for c in columns()]
    torch.manual_seed(7)
    loss, ref = uncached(model, cols, parts=3)
    next_draw = torch.rand(1, device=device)
    torch.manual_seed(7)
    cached_value, got = cached(model, cols, 3)
    assert torch.equal(torch.rand(1, device=device), next_draw)
    assert abs(cached_value - loss) <= 1e-6
    assert max_grad_diff(got, ref) <= 1e-5
    torch.manual_seed(8)
    _, other_masks = uncached(model, cols, parts=3)
    assert max_grad_diff(other_masks, ref) > 1e-3  # the check above can tell masks apart


def test_the_second_pass_runs_under_the_first_passs_autocast():
    """A training loop embeds under autocast and calls backward outside it; the second pass must embed under the same
    autocast (bf16 here), so that it reproduces the first pass's embeddings, to which the cached gradients belong. The
    model is in training mode, as the loop leaves it (dropout off: equal masks are the other test's)."""
    model, cols = random_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train(), columns()
    seen = []

    def embed(features):
        rep = embedder(model)(features)
        seen.append(rep.detach())
        return rep

    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cached_loss(embed, [split_features(c, 3) for c in cols], mnrl)
    loss.backward()
    first, second = seen[: len(seen) // 2], seen[len(seen) // 2 :]
    assert len(first) == 6 and all(torch.equal(a, b) for a, b in zip(first, second))


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward, and the most kept at once."""

    def __init__(self) -> None:
        self.alive = self.peak = 0
        super().__init__(self.pack, lambda held: held.tensor)

    def pack(self, tensor: torch.Tensor) -> "Held":
        return Held(self, tensor)


class Held:
    def __init__(self, counter: SavedBytes, tensor: torch.Tensor) -> None:
        self.counter, self.tensor = counter, tensor.detach()  # detached: holding an output would keep its graph
        self.size = tensor.numel() * tensor.element_size()
        counter.alive += self.size
        counter.peak = max(counter.peak, counter.alive)

    def __del__(self) -> None:
        self.counter.alive -= self.size


def test_only_one_parts_activations_are_alive_at_a_time():
    model, cols = make_model(), columns(batch=16)
    whole, parts = SavedBytes(), SavedBytes()
    with whole:
        uncached(model, cols)
    with parts:
        cached(model, cols, 4)
    assert whole.peak > 0 and parts.peak < whole.peak / 3  # 4 rows of 32 at a time: about a quarter


def test_a_column_the_loss_does_not_use_is_an_input_error():
    model, cols = make_model(), columns(count=3)
    with pytest.raises(InputError, match="did not use every column"):
        cached_loss(embedder(model), [split_features(c, 4) for c in cols], lambda c: mnrl(c[:2]))


def test_split_features_cuts_rows_and_trailing_padding():
    ids, mask, types = padded_batch(lengths=(2, 7, 3, 4, 1))
    parts = split_features({"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, 2)
    assert [tuple(p["input_ids"].shape) for p in parts] == [(2, 7), (2, 4), (1, 1)]
    assert torch.equal(parts[1]["attention_mask"], mask[2:4, :4])
    with pytest.raises(ConfigError, match="mini-batch size must be 1 or more; got 0"):
        split_features({"input_ids": ids}, 0)


# ----- negatives gathered across ranks ------------------------------------------------------------
CASES = [  # (columns, symmetric, mini-batch size: None = uncached)
    (2, False, None),
    (3, True, None),
    (2, False, 2),
    (3, True, 1),
]


def _rank_run(rank: int, world: int, port: int, out: str) -> None:
    """One rank: rows rank * 4 ... of each column, gather=True; saves its loss and its gradients averaged over the
    ranks (as DDP averages them), for every case."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    results = []
    for count, symmetric, size in CASES:
        model = make_model()
        local = [{k: v[rank * 4 : (rank + 1) * 4] for k, v in c.items()} for c in columns(count=count)]

        def loss_on(c, symmetric=symmetric):
            return mnrl(c, symmetric=symmetric, gather=True)

        loss, g = uncached(model, local, loss_on) if size is None else cached(model, local, size, loss_on)
        for t in g.values():
            dist.all_reduce(t)
            t /= world
        results.append((loss, g))
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two processes
def test_gathered_negatives_on_two_ranks_equal_one_process_on_the_whole_batch(tmp_path):
    """Two gloo processes with 4 pairs each, gather=True, DDP-averaged gradients = one process with all 8 pairs;
    the mean of the two ranks' losses = the one process's loss."""
    mp.spawn(_rank_run, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for case, (count, symmetric, _) in enumerate(CASES):
        loss, ref = uncached(make_model(), columns(count=count), lambda c, s=symmetric: mnrl(c, symmetric=s))
        (loss0, grads0), (loss1, grads1) = ranks[0][case], ranks[1][case]
        assert abs((loss0 + loss1) / 2 - loss) <= 1e-6, CASES[case]
        assert max_grad_diff(grads0, ref) <= 1e-6, CASES[case]
        assert max_grad_diff(grads1, grads0) == 0
