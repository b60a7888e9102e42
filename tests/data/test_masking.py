"""bertkit.data.masking: the masking collator's rates, seeding, whole-word masking and checks on real rows."""

from __future__ import annotations

import math
import pickle
from collections import Counter

import numpy as np
import pytest
import reference_rows as ref
import torch
from data_helpers import SIGMAS, all_rows, assert_rows_equal, within, write_split

from bertkit.data.encode import encode_documents, plain_backend
from bertkit.data.masking import MaskingCollator
from bertkit.data.rows import RowBatch, make_rows
from bertkit.errors import ConfigError
from bertkit.labels import IGNORE
from bertkit.tokenizer import Tokenizer

pytest.importorskip("snownlp")


def collator_for(tok: Tokenizer, **kw) -> MaskingCollator:
    return MaskingCollator(
        vocab_size=tok.vocab_size,
        mask_id=tok.mask_token_id,
        pad_id=tok.pad_token_id,
        special_ids=tuple(tok.all_special_ids),
        **kw,
    )


@pytest.fixture(scope="module")
def pair_rows(pd, zh_tokenizer):
    """Many rows shorter than 128 (short_seq_prob=0.3): a padded batch."""
    return make_rows(
        pd.train,
        "pairs",
        seq_len=128,
        cls_id=zh_tokenizer.cls_token_id,
        sep_id=zh_tokenizer.sep_token_id,
        seed=1,
        short_seq_prob=0.3,
    )


def test_masking_rates(pair_rows, zh_tokenizer):
    tok = zh_tokenizer
    rows = pair_rows.batch(np.arange(1024))
    batch = collator_for(tok)(rows, step=7, positions=np.arange(1024))
    original = torch.from_numpy(rows.input_ids)
    special = torch.isin(original, torch.tensor(tok.all_special_ids))
    candidates = batch["attention_mask"].bool() & ~special
    selected = batch["labels"] != IGNORE
    n, k = int(candidates.sum()), int(selected.sum())
    assert n > 50000 and (batch["attention_mask"] == 0).sum() > 10000
    assert within(k, n, 0.15), (k, n)
    assert not (selected & ~candidates).any(), "specials and padding are never selected"
    assert torch.equal(batch["labels"][selected], original[selected])
    out = batch["input_ids"]
    assert torch.equal(out[~selected], original[~selected])  # nothing else changes
    masked = int((out[selected] == tok.mask_token_id).sum())
    kept = int((out[selected] == original[selected]).sum())
    replaced = k - masked - kept
    p_same = 1 / (tok.vocab_size - len(tok.all_special_ids))  # a random id can be the original
    assert within(masked, k, 0.8) and within(kept, k, 0.1 + 0.1 * p_same) and within(replaced, k, 0.1 * (1 - p_same))
    random_ids = out[selected & (out != original) & (out != tok.mask_token_id)]
    assert not torch.isin(random_ids, torch.tensor(tok.all_special_ids)).any()
    assert len(set(random_ids.tolist())) > 500  # spread over the vocabulary
    assert torch.equal(batch["token_type_ids"], torch.from_numpy(rows.token_type_ids))
    assert torch.equal(batch["attention_mask"], torch.from_numpy(rows.attention_mask))
    assert torch.equal(batch["next_sentence_label"], torch.from_numpy(rows.next_sentence_label))
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in batch.values())


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_masks_are_a_function_of_seed_step_and_position(pair_rows, zh_tokenizer):
    collate = collator_for(zh_tokenizer)
    rows = pair_rows.batch(np.arange(64))
    positions = np.arange(64)
    a = collate(rows, step=5, positions=positions)
    assert equal(a, collate(rows, step=5, positions=positions))
    assert not torch.equal(a["labels"], collate(rows, step=6, positions=positions)["labels"])
    assert not torch.equal(a["labels"], collator_for(zh_tokenizer, seed=1)(rows, step=5, positions=positions)["labels"])
    assert not torch.equal(a["labels"], collate(rows, step=5, positions=positions + 64)["labels"])
    revived = pickle.loads(pickle.dumps(collate))  # as DataLoader workers get it
    assert equal(a, revived(rows, step=5, positions=positions))
    # the same row at two places of one batch gets two masks
    twice = collate(pair_rows.batch([0, 0]), step=5, positions=[0, 1])
    assert not torch.equal(twice["labels"][0], twice["labels"][1])


def rows_of(batch: dict, lengths) -> list[dict]:
    return [
        {key: value[b, :n] if value.dim() == 2 else value[b] for key, value in batch.items()}
        for b, n in enumerate(lengths)
    ]


def test_a_row_is_masked_the_same_whatever_else_is_in_the_batch(pair_rows, zh_tokenizer):
    """Masking rows 0..7 at places 0..7 in one call equals masking rows 0..3 at places 0..3 and rows 4..7 at places
    4..7 (two ranks of a DDP run), though the halves are padded to other widths."""
    for wwm in (False, True):
        collate = collator_for(zh_tokenizer, wwm=wwm)
        indices = np.arange(20, 28)
        whole = pair_rows.batch(indices, words=True)
        lengths = (whole.attention_mask > 0).sum(axis=1)
        one = rows_of(collate(whole, step=3, positions=np.arange(8)), lengths)
        halves = rows_of(
            collate(pair_rows.batch(indices[:4], words=True), step=3, positions=np.arange(4)), lengths[:4]
        ) + rows_of(collate(pair_rows.batch(indices[4:], words=True), step=3, positions=np.arange(4, 8)), lengths[4:])
        assert all(equal(x, y) for x, y in zip(one, halves))
        # row 25 at place 5, alone or among other rows at other places
        alone = rows_of(collate(pair_rows.batch([25], words=True), step=3, positions=[5]), lengths[5:6])[0]
        mixed = collate(pair_rows.batch([300, 25, 7], words=True), step=3, positions=[9, 5, 0])
        assert equal(alone, one[5]) and equal(rows_of(mixed, [1, lengths[5], 1])[1], one[5])


def test_at_least_one_target_per_row(pair_rows, zh_tokenizer):
    tok = zh_tokenizer
    cls, sep = tok.cls_token_id, tok.sep_token_id
    collate = collator_for(tok, mlm_probability=0.01)
    row = RowBatch(
        np.array([[cls, 50, 60, sep]]),
        np.zeros((1, 4), dtype=np.int64),
        np.ones((1, 4), dtype=np.int64),
        np.array([[-1, 0, 1, -1]]),
        None,
    )
    for step in range(50):
        labels = collate(row, step=step, positions=[0])["labels"]
        assert (labels != IGNORE).sum() >= 1 and (labels[0, [0, 3]] == IGNORE).all()
    for wwm in (False, True):
        rows = pair_rows.batch(np.arange(256), words=True)
        labels = collator_for(tok, mlm_probability=0.01, wwm=wwm)(rows, step=1, positions=np.arange(256))["labels"]
        assert ((labels != IGNORE).sum(dim=1) >= 1).all()
    only_specials = RowBatch(
        np.array([[cls, sep, 0], [cls, 70, sep]]),
        np.zeros((2, 3), dtype=np.int64),
        np.array([[1, 1, 0], [1, 1, 1]]),
        np.array([[-1, -1, -1], [-1, 0, -1]]),
        None,
    )
    for wwm in (False, True):
        labels = collator_for(tok, wwm=wwm)(only_specials, step=0, positions=[0, 1])["labels"]
        assert (labels[0] == IGNORE).all() and labels[1].tolist() == [IGNORE, 70, IGNORE]  # nothing to pick: no error


def check_whole_words(batch: dict, rows: RowBatch, special_ids, p: float = 0.15) -> int:
    """Every word is selected whole or not at all; about p of the tokens are (5 sigma of the word-size variance)."""
    selected = (batch["labels"] != IGNORE).numpy()
    words = rows.word_ids
    ordinary = (rows.attention_mask > 0) & ~np.isin(rows.input_ids, special_ids)
    assert not (selected & ~ordinary).any()
    covered = total = 0
    variance = 0.0
    for b in range(len(words)):
        numbers, sizes = np.unique(words[b][ordinary[b]], return_counts=True)
        for w, size in zip(numbers.tolist(), sizes.tolist()):
            picks = set(selected[b][ordinary[b] & (words[b] == w)].tolist())
            assert len(picks) == 1, f"row {b}: word {w} is partly selected"
            covered += size * picks.pop()
            variance += size * size * p * (1 - p)
        total += int(sizes.sum())
    assert abs(covered - p * total) <= SIGMAS * math.sqrt(variance), (covered, total)
    return covered


def test_whole_word_masking_chinese(wwm_data, zh_tokenizer):
    rows = make_rows(
        wwm_data.train, "stream", seq_len=128, cls_id=zh_tokenizer.cls_token_id, sep_id=zh_tokenizer.sep_token_id
    )
    batch = all_rows(rows)
    sizes = Counter()
    for words in batch.word_ids:
        sizes.update(Counter(np.unique(words[words >= 0], return_counts=True)[1].tolist()))
    assert sizes[2] > 1000  # most jieba words are two characters
    masked = collator_for(zh_tokenizer, wwm=True)(batch, step=3, positions=np.arange(len(rows)))
    assert check_whole_words(masked, batch, zh_tokenizer.all_special_ids) > 1000


def test_whole_word_masking_english(en_data, en_tokenizer):
    rows = make_rows(
        en_data.train, "stream", seq_len=64, cls_id=en_tokenizer.cls_token_id, sep_id=en_tokenizer.sep_token_id
    )
    batch = all_rows(rows)
    collate = collator_for(en_tokenizer, wwm=True)
    continued = (batch.word_ids[:, 1:] >= 0) & (batch.word_ids[:, 1:] == batch.word_ids[:, :-1])
    multi_piece_words_masked = 0
    for step in range(20):
        masked = collate(batch, step=step, positions=np.arange(len(rows)))
        check_whole_words(masked, batch, en_tokenizer.all_special_ids)
        multi_piece_words_masked += int(((masked["labels"][:, 1:] != IGNORE).numpy() & continued).sum())
    assert multi_piece_words_masked > 50


def test_packed_documents_attention_mask_holds_the_piece_numbers(tmp_path, zh_tokenizer):
    tok = zh_tokenizer
    cls, sep = tok.cls_token_id, tok.sep_token_id
    texts = ["今天天气很好。", "我们去公园散步吧！", "好"]
    enc = encode_documents(plain_backend(tok), texts)
    bounds = np.concatenate([[0], np.cumsum(enc.lengths)])
    docs = [(enc.ids[a:b], enc.word_starts[a:b], enc.sentence_starts[a:b]) for a, b in zip(bounds, bounds[1:])]
    split = write_split(tmp_path, docs, tok.vocab_size)
    rows = make_rows(split, "documents", seq_len=16, cls_id=cls, sep_id=sep)
    examples = ref.pack_documents(ref.tokenize_documents(tok, texts), 16, cls, sep)
    assert_rows_equal(rows, examples, "documents")
    batch = all_rows(rows)
    assert batch.attention_mask.max() == 2  # two documents share a row
    for step in range(20):
        out = collator_for(tok, mlm_probability=0.5)(batch, step=step, positions=np.arange(len(rows)))
        assert np.array_equal(out["attention_mask"].numpy(), batch.attention_mask)
        selected = (out["labels"] != IGNORE).numpy()
        assert not (selected & np.isin(batch.input_ids, [cls, sep])).any()  # inner [CLS] / [SEP] neither
        assert not (selected & (batch.attention_mask == 0)).any()
    assert "next_sentence_label" not in out


def test_collator_checks(zh_tokenizer):
    tok = zh_tokenizer
    for p in (0.0, 1.0, -0.1):
        with pytest.raises(ConfigError, match="mlm_probability"):
            collator_for(tok, mlm_probability=p)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        MaskingCollator(vocab_size=10, mask_id=12, pad_id=0, special_ids=(0,))
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        MaskingCollator(vocab_size=10, mask_id=3, pad_id=10, special_ids=(0,))
    with pytest.raises(ConfigError, match="only special tokens"):
        MaskingCollator(vocab_size=3, mask_id=1, pad_id=0, special_ids=(2,))
    collate = collator_for(tok)
    ones = np.ones((1, 3), dtype=np.int64)
    packed = RowBatch(np.array([[2, 50, 3]]), ones * 0, ones, np.array([[-1, 0, -1]]), None)
    assert "next_sentence_label" not in collate(packed, step=0, positions=[0])
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        collate(RowBatch(np.array([[2, 99999, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        collate(RowBatch(np.array([[2, -5, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="word ids"):
        collator_for(tok, wwm=True)(RowBatch(np.array([[2, 50, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="empty batch"):
        collate(
            RowBatch(np.zeros((0, 0), dtype=np.int64), *(np.zeros((0, 0), dtype=np.int64),) * 2, None, None),
            step=0,
            positions=[],
        )
