"""bertkit.init: locality-seeded heads attend where they should at step 0, the checkpoint stays a
standard BERT (transformers computes the same outputs), and the output bias starts at the prior."""

import math

import pytest
import torch
from helpers import hf_twin, parity, tf5_mlm_logit_diff

from bertkit import BertConfig, BertForMaskedLM, BertModel
from bertkit.errors import ConfigError
from bertkit.init import LocalitySeed, default_heads, initialise, seed_locality
from bertkit.metrics import offset_mass


def mini(**overrides) -> BertForMaskedLM:
    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig.from_preset("mini", vocab_size=500, **overrides)).eval()


def mass_of(model, seq_len: int = 128, rows: int = 4) -> torch.Tensor:
    ids = torch.randint(5, model.config.vocab_size, (rows, seq_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return offset_mass(model(input_ids=ids, output_attentions=True).attentions)  # (L, H, 5): offsets -2..+2


def test_default_layout_seeds_the_lower_layers_fully_and_half_of_the_upper_heads():
    assert default_heads(4, 4) == (
        (0, 0, -1),
        (0, 1, 1),
        (0, 2, -2),
        (0, 3, 2),
        (1, 0, -1),
        (1, 1, 1),
        (1, 2, -2),
        (1, 3, 2),
        (2, 0, -1),
        (2, 1, 1),
        (3, 0, -1),
        (3, 1, 1),
    )
    assert default_heads(1, 2) == ((0, 0, -1), (0, 1, 1))


def test_seeded_heads_look_at_their_offset_from_step_0_and_the_others_stay_uniform():
    model = initialise(mini(), "local")
    mass = mass_of(model)
    column = {-2: 0, -1: 1, 1: 3, 2: 4}
    seeded = default_heads(4, 4)
    for layer, head, offset in seeded:
        assert mass[layer, head, column[offset]] > 0.85, (layer, head, offset, mass[layer, head])
    for layer, head in [(2, 2), (2, 3), (3, 2), (3, 3)]:  # left global: about 1/128 on every offset
        assert mass[layer, head].max() < 2 / 128
    assert mass_of(mini()).max() < 2 / 128  # BERT's initialisation: uniform everywhere


@pytest.mark.slow
def test_peak_logit_sets_how_sharp_a_seeded_head_starts():
    soft = mass_of(seed_locality(mini(), LocalitySeed(heads=((0, 0, -1),), peak_logit=3.0)))[0, 0, 1]
    sharp = mass_of(seed_locality(mini(), LocalitySeed(heads=((0, 0, -1),), peak_logit=10.0)))[0, 0, 1]
    # softmax of a logit L on one key of 128 (others ~0): e^L / (e^L + 127)
    assert soft == pytest.approx(math.exp(3) / (math.exp(3) + 127), abs=0.05)
    assert sharp > 0.97


@pytest.mark.slow
def test_a_seeded_model_is_a_standard_bert_for_transformers():
    model = initialise(mini(), "local")
    theirs = hf_twin(model)
    ids = torch.randint(5, 500, (2, 40), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    with torch.no_grad():
        ours, hf = model(input_ids=ids, attention_mask=mask).logits, theirs(input_ids=ids, attention_mask=mask).logits
    parity(ours[mask.bool()], hf[mask.bool()])


def test_words_and_positions_start_in_separate_dims():
    model = initialise(mini(), "local")
    emb = model.bert.embeddings
    code = slice(256 - 64, 256)
    assert emb.word_embeddings.weight[:, code].abs().max() == 0
    assert emb.token_type_embeddings.weight[:, code].abs().max() == 0
    assert emb.position_embeddings.weight[:, : 256 - 64].abs().max() == 0
    # each (cos, sin) pair has the same length at every position
    pairs = emb.position_embeddings.weight[:, code].view(512, 32, 2).norm(dim=-1)
    assert torch.allclose(pairs, pairs[0, 0].expand_as(pairs))


def test_prior_bias_starts_the_output_at_the_token_frequencies():
    model = mini()
    counts = torch.zeros(500, dtype=torch.long)
    counts[7], counts[9] = 900, 100
    initialise(model, "local", token_counts=counts)
    bias = model.cls.predictions.bias.detach()
    assert int(bias.argmax()) == 7
    assert float(bias[7] - bias[9]) == pytest.approx(math.log(901 / 101), abs=1e-5)
    assert float(bias[9] - bias[8]) == pytest.approx(math.log(101), abs=1e-5)


def test_small_models_get_a_shorter_code_and_bare_encoders_work():
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_preset("tiny")).eval()  # head_dim 8: an 8-dim code
    initialise(model, "local")
    assert model.embeddings.word_embeddings.weight[:, -8:].abs().max() == 0
    ids = torch.randint(5, 1000, (2, 12))
    with torch.no_grad():
        mass = offset_mass(model(input_ids=ids, output_attentions=True).attentions)
    assert mass[0, 0, 1] > 0.5  # layer 0 head 0: the previous token


def test_what_cannot_be_seeded_is_a_clear_error():
    with pytest.raises(ConfigError, match="position_embedding_type='relative_key'"):
        initialise(mini(position_embedding_type="relative_key"), "local")
    with pytest.raises(ConfigError, match="layer 4 head 0"):
        seed_locality(mini(), LocalitySeed(heads=((4, 0, -1),)))
    with pytest.raises(ConfigError, match="unknown init 'fancy'"):
        initialise(mini(), "fancy")


@pytest.mark.slow
def test_a_seeded_mlm_checkpoint_loads_in_transformers_5_with_the_same_logits(tmp_path):
    model = initialise(mini(), "local", token_counts=torch.arange(500))
    ids = torch.randint(5, 500, (2, 130), generator=torch.Generator().manual_seed(3))  # past one code period
    diff = tf5_mlm_logit_diff(model, ids, torch.ones_like(ids), tmp_path)
    assert diff <= 1e-5, diff
