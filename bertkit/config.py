"""BertConfig: the HF `config.json` fields as a dataclass, presets, JSON io and validate().

Field names and defaults are those of `transformers.BertConfig` (plus the generic
`PretrainedConfig` fields BERT uses), so a `config.json` written by either library reads in the
other. Keys this dataclass does not know are kept in `extra` and written back unchanged.
validate() refuses sizes whose float32 weights (parameter_count) would not fit in this machine's memory
(memory_bound), so a model that cannot be built is refused before a module is allocated.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from .activations import ACT2FN
from .errors import ConfigError
from .files import atomic_write_text, read_text

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

# The words some fields take, once: annotations (a settings field typed AttnImplementation is a flag with these
# choices, bertkit/options.py) and the tuples validate() and error messages list
PositionEmbeddingType = Literal["absolute", "relative_key", "relative_key_query"]
AttnImplementation = Literal["auto", "eager", "sdpa", "varlen"]
ProblemType = Literal["regression", "single_label_classification", "multi_label_classification"]
POSITION_EMBEDDING_TYPES = typing.get_args(PositionEmbeddingType)
ACTIVATIONS = tuple(ACT2FN)  # hidden_act names (activations.py)
ATTN_IMPLEMENTATIONS = typing.get_args(AttnImplementation)
PROBLEM_TYPES = (None, *typing.get_args(ProblemType))
ModelType = Literal["bert", "electra"]
MODEL_TYPES = typing.get_args(ModelType)
FAMILIES = (*MODEL_TYPES, "modernbert")  # every config.json model_type bertkit runs (BertConfig's, ModernBertConfig's)
# transformers' ElectraConfig defaults where they differ from BERT's: what an "electra" config.json means by a
# field it leaves out (ElectraConfig(), as transformers reads the same file)
ELECTRA_DEFAULTS = dict(embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024)

# Fields that are settings of this process, not of the checkpoint: never written to config.json.
RUNTIME_FIELDS = ("attn_implementation", "extra", "num_labels")
_MAX_SIZE = 2**62  # no size field reaches it: torch's sizes are 64-bit, and the memory bound stops far below


def _cut(value: Any, width: int = 40) -> str:
    """repr(value), cut to about `width` characters: a message never holds an unbounded value."""
    text = repr(value)
    return text if len(text) <= width else f"{text[:width]}... ({len(text)} characters)"


def _default_id2label() -> dict[int, str]:
    return {0: "LABEL_0", 1: "LABEL_1"}


class ConfigBase(abc.ABC):
    """What the config dataclass of every model family (BertConfig, ModernBertConfig) shares: id2label, label2id
    and num_labels kept in step as transformers keeps them (its __post_init__ calls _settle_labels, then setting
    one re-derives the others), its field names, config.json in and out, and validated copies. Each family writes
    its own from_dict, to_dict and validate."""

    id2label: dict[int, str]
    label2id: dict[str, int] | None
    num_labels: int | None

    def _settle_labels(self) -> None:
        """The three made consistent at construction (num_labels given and different: LABEL_0..); then ready."""
        self.id2label = {int(k): str(v) for k, v in (self.id2label or {}).items()}
        if self.num_labels is not None and self.num_labels != len(self.id2label):
            self.id2label = {i: f"LABEL_{i}" for i in range(int(self.num_labels))}
            self.label2id = None
        if self.label2id is None:
            self.label2id = {v: k for k, v in self.id2label.items()}
        self.label2id = {str(k): int(v) for k, v in self.label2id.items()}
        self.num_labels = len(self.id2label)
        object.__setattr__(self, "_ready", True)

    def __setattr__(self, name: str, value: Any) -> None:
        """After construction: `config.num_labels = 5` makes LABEL_0..LABEL_4; setting id2label re-derives the
        other two."""
        if self.__dict__.get("_ready") and name == "num_labels" and value != len(self.id2label):
            object.__setattr__(self, "id2label", {i: f"LABEL_{i}" for i in range(int(value))})
            object.__setattr__(self, "label2id", {f"LABEL_{i}": i for i in range(int(value))})
        elif self.__dict__.get("_ready") and name == "id2label":
            value = {int(k): str(v) for k, v in value.items()}
            object.__setattr__(self, "label2id", {v: k for k, v in value.items()})
            object.__setattr__(self, "num_labels", len(value))
        object.__setattr__(self, name, value)

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cast(Any, cls))}

    @classmethod
    @abc.abstractmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> Any:
        """The config of a config.json's dict (each family's: its keys, its forms)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """config.json's dict (each family's keys)."""

    @abc.abstractmethod
    def validate(self, *, size_bound: bool = True) -> Any:
        """self, or a ConfigError naming what cannot work (each family's checks)."""

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], *, size_bound: bool = True, **overrides: Any) -> Self:
        """Read an HF config.json (a file, or a directory holding one); size_bound as in validate()."""
        path, data = read_config_dict(path)
        try:
            return cast("Self", cls.from_dict(data, **overrides).validate(size_bound=size_bound))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The config as JSON text; written to `path` (atomically) when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        if path is not None:
            atomic_write_text(os.fspath(path), text)
        return text

    def replace(self, **overrides: Any) -> Self:
        """A validated copy with some fields changed (runtime fields such as attn_implementation kept)."""
        unknown = set(overrides) - (self.field_names() - {"extra"})
        if unknown:
            raise ConfigError(f"unknown {type(self).__name__} field(s): {', '.join(sorted(unknown))}")
        if "id2label" in overrides and "num_labels" not in overrides:
            overrides["num_labels"] = None  # the new label map decides the count
            overrides.setdefault("label2id", None)
        return cast("Self", dataclasses.replace(cast(Any, self), **overrides).validate())


def read_config_dict(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(the file's path, its JSON object) of an HF config.json (a file, or a directory holding one); ConfigError
    naming the file when it is missing, unreadable, not UTF-8, not JSON, or not an object."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    text = read_text(
        path,
        ConfigError,
        missing="no such file; a model directory needs a config.json",
        cannot_read="cannot read config: {error}",
        not_utf8="not UTF-8 (byte {byte:#04x}); save config.json as UTF-8",
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of config fields, found {type(data).__name__}")
    return path, data


@dataclass
class BertConfig(ConfigBase):
    """Every number that shapes a BERT. Defaults are bert-base-uncased's, as in transformers."""

    vocab_size: int = 30522  # rows of the word embedding (and MLM output) matrix
    hidden_size: int = 768  # width of every token vector, H
    num_hidden_layers: int = 12  # encoder layers, run one after another
    num_attention_heads: int = 12  # heads per layer, run in parallel; head_dim = H / heads
    intermediate_size: int = 3072  # width of the feed-forward block, I
    hidden_act: str = "gelu"  # feed-forward activation
    hidden_dropout_prob: float = 0.1  # dropout on embeddings and every sub-layer output
    attention_probs_dropout_prob: float = 0.1  # dropout on the attention probabilities
    max_position_embeddings: int = 512  # longest input (past + current tokens)
    type_vocab_size: int = 2  # segment ids (sentence A / B)
    initializer_range: float = 0.02  # std of the normal init of weights
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon
    pad_token_id: int = 0  # id of [PAD]; its embedding row starts at zero
    position_embedding_type: PositionEmbeddingType = "absolute"  # learned positions, or relative (Shaw; Huang)
    use_cache: bool = True  # decoders return key/value caches by default
    classifier_dropout: float | None = None  # task-head dropout; None -> hidden_dropout_prob
    is_decoder: bool = False  # causal self-attention (BertLMHeadModel)
    add_cross_attention: bool = False  # a cross-attention block in every layer (decoders only)
    chunk_size_feed_forward: int = 0  # >0: feed-forward in chunks of this many positions
    pruned_heads: dict[int, list[int]] = field(default_factory=dict)  # {layer: [head, ...]} removed
    id2label: dict[int, str] = field(default_factory=_default_id2label)  # task labels by index
    label2id: dict[str, int] | None = None  # inverse of id2label (derived when None)
    num_labels: int | None = None  # shortcut: makes id2label LABEL_0..LABEL_{n-1}
    problem_type: ProblemType | None = None  # the loss of BertForSequenceClassification (None: from the labels)
    tie_word_embeddings: bool = True  # MLM decoder shares the word embedding matrix
    output_attentions: bool = False  # default for forward(output_attentions=None)
    output_hidden_states: bool = False  # default for forward(output_hidden_states=None)
    architectures: list[str] | None = None  # class names the checkpoint was saved from
    model_type: ModelType = "bert"  # "electra": ELECTRA's checkpoints (bertkit.electra), the same encoder
    # ELECTRA's embedding width E (word, position, type embeddings and their LayerNorm), projected to hidden_size
    # by embeddings_project when it differs; None: hidden_size (BERT, which never writes it to config.json)
    embedding_size: int | None = None
    # runtime, not saved: eager | sdpa (both equal to transformers at every position, padding too) |
    # varlen (padding removed before the layers, fused QKV; zeros at padded positions) | auto (the
    # default: varlen when the batch has padding or packed documents, else sdpa; a call that needs
    # attention probabilities, head_mask, relative positions or a decoder takes eager / sdpa as
    # always). Real tokens get the same numbers from all four up to float rounding.
    attn_implementation: AttnImplementation = "auto"
    extra: dict[str, Any] = field(default_factory=dict)  # unknown config.json keys, kept as they were

    def __post_init__(self) -> None:
        self.pruned_heads = {int(k): sorted({int(h) for h in v}) for k, v in (self.pruned_heads or {}).items()}
        self._settle_labels()

    # ----- derived numbers -------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        """E: the width of the embeddings (ELECTRA's embedding_size), hidden_size unless set."""
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    def parameter_count(self) -> int:
        """The parameters of the encoder these sizes build: BertModel's with its pooler (pruned heads not taken
        off; a task head adds a few more). Arithmetic only, so it can bound a model before one is allocated."""
        H, E, P = self.hidden_size, self.embedding_width, self.max_position_embeddings
        embeddings = (self.vocab_size + P + self.type_vocab_size) * E + 2 * E  # three tables and their LayerNorm
        project = E * H + H if E != H else 0  # ELECTRA's embeddings_project
        attention = 4 * (H * H + H) + 2 * H  # query, key, value, output dense and its LayerNorm
        distances = (2 * P - 1) * self.head_dim if self.position_embedding_type != "absolute" else 0  # self only
        feed_forward = (2 * H + 1) * self.intermediate_size + 3 * H  # intermediate, output dense and LayerNorm
        layer = attention * (2 if self.add_cross_attention else 1) + distances + feed_forward
        return embeddings + project + self.num_hidden_layers * layer + H * H + H  # + the pooler

    # ----- validation ------------------------------------------------------------------------
    def validate(self, *, size_bound: bool = True) -> BertConfig:
        """Raise ConfigError listing every setting that cannot work; return self when all is well.

        size_bound=False leaves out the bound on memory (_size_problems): a loader first checks the sizes against
        its weights file, which names the field that is wrong, then validates with the bound (checkpoint.py)."""
        problems = self._dimension_problems() + self._setting_problems()
        if not problems:
            problems = self._pruning_problems()
        if not problems and size_bound:
            problems = self._size_problems()
        if problems:
            raise ConfigError("invalid BertConfig:\n  - " + "\n  - ".join(problems))
        return self

    def _dimension_problems(self) -> list[str]:
        """The sizes: positive integers (below 2**62), heads that divide hidden_size, an embedding_size or None."""
        problems = []
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{name} must be a positive integer, got {_cut(value)}")
            elif value >= _MAX_SIZE:
                problems.append(f"{name} must be below 2**62, got {_cut(value)}")
        if not problems and self.hidden_size % self.num_attention_heads != 0:
            problems.append(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}): each head gets hidden_size / num_attention_heads dimensions"
            )
        width = self.embedding_size
        if width is not None and (not isinstance(width, int) or isinstance(width, bool) or width <= 0):
            problems.append(f"embedding_size must be a positive integer or None (= hidden_size), got {_cut(width)}")
        elif width is not None and width >= _MAX_SIZE:
            problems.append(f"embedding_size must be below 2**62, got {_cut(width)}")
        return problems

    def _setting_problems(self) -> list[str]:
        """The other fields: choices, probabilities, positive numbers, and settings that need one another."""
        problems = []
        for name, value, choices in (
            ("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES),
            ("hidden_act", self.hidden_act, ACTIVATIONS),
            ("attn_implementation", self.attn_implementation, ATTN_IMPLEMENTATIONS),
        ):
            if value not in choices:
                problems.append(f"{name} must be one of {', '.join(choices)}, got {_cut(value)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is None and name == "classifier_dropout":
                continue
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                problems.append(f"{name} must be a probability in [0, 1), got {_cut(value)}")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range < 0:
            problems.append(f"initializer_range must be >= 0, got {_cut(self.initializer_range)}")
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps <= 0:
            problems.append(f"layer_norm_eps must be > 0, got {_cut(self.layer_norm_eps)}")
        if not isinstance(self.chunk_size_feed_forward, int) or self.chunk_size_feed_forward < 0:
            problems.append(
                f"chunk_size_feed_forward must be an integer >= 0, got {_cut(self.chunk_size_feed_forward)}"
            )
        if self.add_cross_attention and not self.is_decoder:
            problems.append(
                "add_cross_attention=True needs is_decoder=True: cross-attention attends from a "
                "decoder to an encoder's output"
            )
        if (
            self.pad_token_id is not None
            and isinstance(self.vocab_size, int)
            and not (isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size)
        ):
            problems.append(f"pad_token_id must be in [0, vocab_size={self.vocab_size}), got {_cut(self.pad_token_id)}")
        if self.num_labels != len(self.id2label):
            problems.append(f"num_labels={self.num_labels} but id2label has {len(self.id2label)} entries")
        if self.problem_type not in PROBLEM_TYPES:
            problems.append(f"problem_type must be one of {PROBLEM_TYPES}, got {_cut(self.problem_type)}")
        if self.model_type not in MODEL_TYPES:
            problems.append(
                f"model_type is {_cut(self.model_type)}; bertkit reads BERT and ELECTRA configs (model_type "
                f"{' or '.join(repr(t) for t in MODEL_TYPES)})"
            )
        return problems

    def _pruning_problems(self) -> list[str]:
        """pruned_heads naming layers and heads the sizes have, and leaving each layer a head."""
        problems = []
        for layer, heads in self.pruned_heads.items():
            if not 0 <= layer < self.num_hidden_layers:
                problems.append(
                    f"pruned_heads names layer {layer}, but the model has layers 0..{self.num_hidden_layers - 1}"
                )
            elif any(not 0 <= h < self.num_attention_heads for h in heads):
                problems.append(
                    f"pruned_heads[{layer}] = {heads} names heads outside 0..{self.num_attention_heads - 1}"
                )
            elif len(heads) >= self.num_attention_heads:
                problems.append(
                    f"pruned_heads[{layer}] would remove all {self.num_attention_heads} heads; keep at least one"
                )
        return problems

    def _size_problems(self) -> list[str]:
        """Sizes whose float32 weights would not fit in this machine's memory, said before anything is allocated
        (a hidden_size of 1,000,000 would otherwise ask for terabytes layer by layer); [] when they fit."""
        count = self.parameter_count()
        memory, where = memory_bound()
        if count * 4 <= memory:
            return []
        sizes = {name: getattr(self, name) for name in SIZE_FIELDS if getattr(self, name) is not None}
        # the field most out of scale, against bert-base's (BertConfig's defaults; embedding_size: its hidden_size)
        field = max(sizes, key=lambda name: sizes[name] / _BERT_BASE[name])
        return [
            f"{field}={sizes[field]} (bert-base has {_BERT_BASE[field]}) makes a model of about {count:.3g} "
            f"parameters, {count * 4 / 2**30:,.0f} GiB in float32: more than {where} "
            f"({memory / 2**30:,.0f} GiB); check {field} (sizes: "
            + ", ".join(f"{k}={v}" for k, v in sizes.items())
            + ")"
        ]

    # ----- dict / JSON io --------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> BertConfig:
        """Build from a config.json dict; unknown keys go to `extra`, `overrides` win."""
        data = {**data, **overrides}
        if data.get("model_type") == "electra":  # a field the file leaves out means what ElectraConfig() says
            data = {**ELECTRA_DEFAULTS, **data}
        known = cls.field_names() - {"extra"}  # a config.json key named "extra" is just an unknown key
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        if "num_labels" in kwargs and "id2label" in data and "num_labels" not in overrides:
            kwargs.pop("num_labels")  # id2label is the authority when both are in a file
        try:
            return cls(**kwargs, extra=extra)
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"config values do not fit BertConfig: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        """The config.json dict: HF field names, label maps with string keys, unknown keys kept."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in RUNTIME_FIELDS:
                continue
            out[f.name] = getattr(self, f.name)
        out["id2label"] = {str(k): v for k, v in self.id2label.items()}
        out["pruned_heads"] = {str(k): list(v) for k, v in self.pruned_heads.items()}
        if self.model_type == "electra":  # ElectraConfig reads a missing embedding_size as 128: always written
            out["embedding_size"] = self.embedding_width
        elif self.embedding_size is None:  # a BERT config.json stays as it was
            del out["embedding_size"]
        out.update(self.extra)
        return out

    # ----- presets ---------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A named architecture (`bert-base-chinese`, `mini`, ...) with any field overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides}).validate()


# The fields that size the weights (parameter_count), and bert-base's values of them
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "embedding_size",
)
_BERT_BASE = {name: getattr(BertConfig(), name) for name in SIZE_FIELDS} | {"embedding_size": BertConfig().hidden_size}
# The bound where this machine's memory cannot be read (os.sysconf has no physical-memory names, e.g. on Windows)
FALLBACK_MEMORY_BYTES = 2**40


def memory_bound() -> tuple[int, str]:
    """The most bytes of float32 weights validate() lets a config ask for: this machine's physical memory (a model is
    built on the CPU before it moves to a GPU), or FALLBACK_MEMORY_BYTES where that cannot be read; and its name."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's memory"
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MEMORY_BYTES, "bertkit's bound where a machine's memory is unknown"


PRESETS: dict[str, dict[str, Any]] = {
    # Google's released checkpoints (architectures only; weights load from a local directory).
    "bert-base-chinese": dict(vocab_size=21128),
    "bert-base-uncased": dict(vocab_size=30522),
    "bert-large-uncased": dict(
        vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
    # Small ones for CPU demos and tests.
    "mini": dict(vocab_size=21128, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "tiny": dict(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
    ),
}
