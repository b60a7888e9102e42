"""bertkit.losses against sentence-transformers' own loss classes: the same loss and the same gradients with respect
to the embeddings (bi-encoders) or the logits (cross-encoders), on seeded random inputs.

ST's losses call model(features); a stand-in module hands them the given embeddings or scores, so the real ST code
path (column order, masking, padding, sorting of Matryoshka dims) runs unchanged. Tests follow ST 5.7."""

import pytest
import sentence_transformers as st  # a dev dependency: the reference
import torch
import torch.nn.functional as F
from sentence_transformers.cross_encoder import CrossEncoder  # noqa: E402
from sentence_transformers.cross_encoder import losses as ce_losses  # noqa: E402
from sentence_transformers.sentence_transformer import losses as st_losses  # noqa: E402
from torch import Tensor, nn

from bertkit import losses
from bertkit.errors import ConfigError, InputError

TOL = 1e-6
B, H = 6, 32


class GivenEmbeddings(nn.Module):
    """A SentenceTransformer stand-in: features {"embedding": (B, H)} -> {"sentence_embedding": it}."""

    def forward(self, features: dict) -> dict:
        return {"sentence_embedding": features["embedding"]}

    def get_embedding_dimension(self) -> int:
        return H


class GivenScores(CrossEncoder):
    """A CrossEncoder stand-in: the score of (query "q<i>", document "<name>") is table[i, docs.index(name)]."""

    num_labels = 1
    device = torch.device("cpu")

    def __init__(self, table: Tensor, docs: list[str]) -> None:
        nn.Module.__init__(self)
        self.table, self.docs = table, docs

    def preprocess(self, pairs, prompt=None, task=None) -> dict:
        index = [int(q[1:]) * len(self.docs) + self.docs.index(d) for q, d in pairs]
        return {"index": torch.tensor(index)}

    def forward(self, features: dict) -> dict:
        return {"scores": self.table.reshape(-1)[features["index"]].unsqueeze(1)}


def leaves(*shapes, seed=0, dtype=torch.float64) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def value_and_grads(loss: Tensor, inputs: list[Tensor]) -> tuple[float, list[Tensor]]:
    return loss.item(), list(torch.autograd.grad(loss, inputs))


def assert_same(ours: tuple[float, list[Tensor]], theirs: tuple[float, list[Tensor]]) -> None:
    assert abs(ours[0] - theirs[0]) <= TOL, (ours[0], theirs[0])
    for a, b in zip(ours[1], theirs[1], strict=True):
        assert (a - b).abs().max().item() <= TOL


# ----- bi-encoder losses --------------------------------------------------------------------------
@pytest.mark.parametrize("negatives", [0, 1, 2])
@pytest.mark.parametrize("symmetric", [False, True])
def test_multiple_negatives_ranking_equals_st(negatives, symmetric):
    cols = leaves(*[(B, H)] * (2 + negatives))
    ours = value_and_grads(losses.multiple_negatives_ranking(cols[0], cols[1:], symmetric=symmetric), cols)
    directions = ("query_to_doc", "doc_to_query") if symmetric else ("query_to_doc",)
    partition = "per_direction" if symmetric else "joint"
    ref = st_losses.MultipleNegativesRankingLoss(GivenEmbeddings(), directions=directions, partition_mode=partition)
    assert_same(ours, value_and_grads(ref.compute_loss_from_embeddings(cols, None), cols))


def test_multiple_negatives_ranking_scale_is_used():
    cols = leaves((B, H), (B, H))
    ref = st_losses.MultipleNegativesRankingLoss(GivenEmbeddings(), scale=7.0)
    theirs = value_and_grads(ref.compute_loss_from_embeddings(cols, None), cols)
    assert_same(value_and_grads(losses.multiple_negatives_ranking(cols[0], cols[1:], scale=7.0), cols), theirs)


def test_a_batch_of_one_pair_has_no_negative():
    a, p = leaves((1, H), (1, H))
    with pytest.raises(InputError, match="batch of 1 pair has no negative"):
        losses.multiple_negatives_ranking(a, [p])
    with pytest.raises(InputError, match="batch of 1 pair has nothing to order"):
        losses.cosent(a, p, torch.ones(1))


def test_columns_of_different_shapes_are_an_input_error():
    a, p = leaves((B, H), (B - 1, H))
    with pytest.raises(InputError, match=r"same B and H; got \[\(6, 32\), \(5, 32\)\]"):
        losses.multiple_negatives_ranking(a, [p])


def test_cosent_equals_st():
    u, v = leaves((B, H), (B, H))
    labels = torch.tensor([0.1, 0.9, 0.5, 0.5, 0.0, 0.7], dtype=torch.float64)  # a tie included
    ours = value_and_grads(losses.cosent(u, v, labels), [u, v])
    ref = st_losses.CoSENTLoss(GivenEmbeddings())
    assert_same(ours, value_and_grads(ref.compute_loss_from_embeddings([u, v], labels), [u, v]))


@pytest.mark.parametrize("inner", ["mnrl", "cosent", "dot"])
def test_matryoshka_equals_st(inner):
    cols = leaves((B, H), (B, H))
    labels = torch.tensor([0.1, 0.9, 0.5, 0.3, 0.0, 0.7], dtype=torch.float64)
    dims, weights = [8, 32, 16], [0.25, 1.0, 0.5]  # unsorted: the weights must follow their dims
    model = GivenEmbeddings()  # one model: MatryoshkaLoss truncates by patching its forward
    if inner == "mnrl":
        ours_inner = lambda c: losses.multiple_negatives_ranking(c[0], c[1:])  # noqa: E731
        ref_inner = st_losses.MultipleNegativesRankingLoss(model)
    elif inner == "cosent":
        ours_inner = lambda c: losses.cosent(c[0], c[1], labels)  # noqa: E731
        ref_inner = st_losses.CoSENTLoss(model)
    else:  # a dot product sees the length, so this one tells whether truncated columns are re-normalised
        ours_inner = lambda c: F.cross_entropy(c[0] @ c[1].T, torch.arange(B))  # noqa: E731
        ref_inner = st_losses.MultipleNegativesRankingLoss(model, scale=1.0, similarity_fct=st.util.dot_score)
    ours = value_and_grads(losses.matryoshka(ours_inner, cols, dims, weights), cols)
    ref = st_losses.MatryoshkaLoss(model, ref_inner, dims, weights)
    theirs = value_and_grads(ref([{"embedding": c} for c in cols], labels), cols)
    assert_same(ours, theirs)


def test_matryoshka_default_weights_are_one():
    cols = leaves((B, H), (B, H))
    inner = lambda c: losses.multiple_negatives_ranking(c[0], c[1:])  # noqa: E731
    ours = value_and_grads(losses.matryoshka(inner, cols, [32, 16]), cols)
    model = GivenEmbeddings()
    ref = st_losses.MatryoshkaLoss(model, st_losses.MultipleNegativesRankingLoss(model), [32, 16])
    assert_same(ours, value_and_grads(ref([{"embedding": c} for c in cols], None), cols))


@pytest.mark.parametrize(
    "dims, weights, message",
    [
        ([64, 16], None, r"\[64, 16\]: each must be an integer in 1\.\.32"),
        ([16, 0], None, r"\[16, 0\]: each must be an integer in 1\.\.32"),
        ([16, -8], None, r"each must be an integer in 1\.\.32"),
        ([16, 16, 8], None, r"\[16, 16, 8\]: a size is listed twice"),
        ([32, 16], [1.0], r"2 sizes but 1 weights; give one weight per size"),
        ([], None, r"none given"),
    ],
)
def test_matryoshka_dims_that_cannot_work_are_a_config_error(dims, weights, message):
    cols = leaves((B, H), (B, H))
    with pytest.raises(ConfigError, match=message):
        losses.matryoshka(lambda c: c[0].sum(), cols, dims, weights)


# ----- cross-encoder losses -----------------------------------------------------------------------
def test_binary_cross_entropy_equals_st():
    (table,) = leaves((B, B))
    docs = [f"d{j}" for j in range(B)]
    queries = [f"q{i}" for i in range(B)]
    labels = torch.tensor([1, 0, 1, 1, 0, 0])
    picked = torch.tensor([3, 1, 4, 0, 5, 2])  # query i pairs with document picked[i]
    ours = value_and_grads(losses.binary_cross_entropy(table[torch.arange(B), picked], labels), [table])
    ref = ce_losses.BinaryCrossEntropyLoss(GivenScores(table, docs))
    theirs = value_and_grads(ref([queries, [docs[j] for j in picked]], labels), [table])
    assert_same(ours, theirs)


def test_listnet_equals_st_with_lists_of_unequal_length():
    lengths = [3, 5, 1, 4]
    docs = [f"d{j}" for j in range(5)]
    (table,) = leaves((len(lengths), 5), dtype=torch.float32)  # ST computes ListNet in float32
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 4, (len(lengths), 5), generator=g).float()
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    ours = value_and_grads(losses.listnet(table, labels, mask), [table])
    queries = [f"q{i}" for i in range(len(lengths))]
    ref = ce_losses.ListNetLoss(GivenScores(table, docs))
    theirs = value_and_grads(
        ref([queries, [docs[:n] for n in lengths]], [labels[i, :n] for i, n in enumerate(lengths)]), [table]
    )
    assert_same(ours, theirs)
    assert ours[1][0][~mask].abs().max() == 0  # padding gets no gradient


def test_listnet_query_without_documents_is_an_input_error():
    with pytest.raises(InputError, match="a query has no document"):
        losses.listnet(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([[1, 1, 0], [0, 0, 0]]))


@pytest.mark.parametrize("num_negatives", [None, 3])
@pytest.mark.parametrize("hard_columns", [0, 1])
def test_cross_encoder_ranking_equals_st(num_negatives, hard_columns):
    columns = 1 + hard_columns
    docs = [f"c{c}_{j}" for c in range(columns) for j in range(B)]  # document c * B + j: row j of column c
    (table,) = leaves((B, len(docs)))
    queries = [f"q{i}" for i in range(B)]
    rows = torch.arange(B)
    torch.manual_seed(5)
    negatives = losses.in_batch_negatives(B, columns, num_negatives)
    matrix = [table[rows, rows]] + [table[rows, negatives[:, k]] for k in range(negatives.size(1))]
    matrix += [table[rows, c * B + rows] for c in range(1, columns)]  # own hard negatives come last, as ST
    ours = value_and_grads(losses.cross_encoder_ranking(torch.stack(matrix, dim=1)), [table])
    ref = ce_losses.MultipleNegativesRankingLoss(GivenScores(table, docs), num_negatives=num_negatives)
    inputs = [queries] + [docs[c * B : (c + 1) * B] for c in range(columns)]
    torch.manual_seed(5)
    assert_same(ours, value_and_grads(ref(inputs, None), [table]))


def test_in_batch_negatives_all_others_in_order():
    assert losses.in_batch_negatives(3, 2, None).tolist() == [[1, 2, 4, 5], [0, 2, 3, 5], [0, 1, 3, 4]]
    assert losses.in_batch_negatives(3, 1, 99).tolist() == [[1, 2], [0, 2], [0, 1]]  # more asked than there are


def test_in_batch_negatives_random_choice_is_seeded_and_never_a_querys_own():
    pick = lambda seed: losses.in_batch_negatives(8, 2, 5, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    first = pick(0)
    assert torch.equal(first, pick(0)) and not torch.equal(first, pick(1))
    for i, row in enumerate(first.tolist()):
        assert len(set(row)) == 5 and i not in row and 8 + i not in row


def test_in_batch_negatives_need_a_second_query():
    with pytest.raises(InputError, match="no in-batch negative; use a batch size of 2 or more"):
        losses.in_batch_negatives(1, 3, None)
    with pytest.raises(InputError, match=r"n >= 1 negatives; got \(4, 1\)"):
        losses.cross_encoder_ranking(torch.zeros(4, 1))
