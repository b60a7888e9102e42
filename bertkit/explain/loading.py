"""Models and tokenizers for the explain commands: a local directory, or a preset with random weights.

A preset has no vocabulary. Rather than refuse, explain builds a character vocabulary from the
text it is given ([PAD] [UNK] [CLS] [SEP] [MASK], then each character, "##"-prefixed inside a
word as WordPiece writes it) and says so: the weights are random anyway, so any consistent ids
serve to show the shapes and the attention maps. `--tokenizer DIR` uses a real vocabulary instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import torch
from tokenizers import normalizers, pre_tokenizers

from ..config import BertConfig
from ..errors import ConfigError
from ..finite import check_weights
from ..heads import BertForMaskedLM
from ..model import BertModel, BertPreTrainedModel
from ..tokenizer import DEFAULT_SPECIALS, Tokenizer, TokenizerError
from .common import ExplainError

_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in DEFAULT_SPECIALS.values()) + ")")


def char_tokenizer(*texts: str | None) -> Tokenizer:
    """A WordPiece tokenizer whose vocabulary is the 5 specials + the characters of `texts`.

    Inside a word, later characters get BERT's "##" form ("hello" -> h ##e ##l ##l ##o); CJK
    characters are words of their own. Special tokens written in the text ("[MASK]") stay whole.
    """
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    vocab = {token: i for i, token in enumerate(DEFAULT_SPECIALS.values())}
    for text in texts:
        if text is None:
            continue
        for part in _SPECIAL_RE.split(text):
            if part in vocab:
                continue
            for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(part)):
                for j, char in enumerate(word):
                    vocab.setdefault(char if j == 0 else "##" + char, len(vocab))
    return Tokenizer(vocab)


HEADS: dict[str, type[BertPreTrainedModel]] = {
    "mlm": BertForMaskedLM,
    "base": BertModel,
}  # explain --head: the model class of each
MLM_HEADS = ("cls.predictions", "generator_predictions", "generator_lm_head")  # BERT's MLM head, ELECTRA's


@dataclass
class Loaded:
    model: BertPreTrainedModel
    tokenizer: Tokenizer | None
    notes: list[str] = field(default_factory=list)  # what a reader must know about what was loaded


def load(
    model_dir: str | None,
    preset: str | None,
    *,
    head: str = "mlm",
    tokenizer_dir: str | None = None,
    texts: tuple[str | None, ...] = (),
    seed: int = 0,
    weights_needed: bool = True,
) -> Loaded:
    """The model (BertForMaskedLM for head="mlm", BertModel for "base") and a tokenizer for `texts`.

    weights_needed=False (architecture only) builds a preset on the meta device: no memory, no init time.
    """
    model_class = HEADS[head]
    notes: list[str] = []
    if model_dir is not None:
        model = _from_directory(model_class, model_dir, notes)
    else:
        if preset is None:
            raise ConfigError("load() needs a model directory or a preset")
        config = BertConfig.from_preset(preset)
        if weights_needed:
            torch.manual_seed(seed)
            model = model_class(config).eval()
            notes.append(
                f"preset {preset}: random weights (seed {seed}); the shapes are real, the numbers "
                "mean nothing until trained or loaded"
            )
        else:
            with torch.device("meta"):
                model = model_class(config)
            notes.append(f"preset {preset}: architecture only (no weights were made)")
    tokenizer = None
    if any(t is not None for t in texts):
        tokenizer = _tokenizer(model, model_dir, tokenizer_dir, texts, notes)
    return Loaded(model, tokenizer, notes)


def _from_directory(model_class: type[BertPreTrainedModel], model_dir: str, notes: list[str]) -> BertPreTrainedModel:
    """The checkpoint's model; what it lacks or holds beyond the model becomes a note or a warning. Weights that
    are not finite are a NonFiniteError (pictures and probabilities of NaN would show nothing)."""
    model, report = model_class.from_pretrained(model_dir, output_loading_info=True)
    check_weights(model, model_dir)
    head_missing = report.missing_under(*MLM_HEADS)
    if head_missing:
        generator = os.path.join(model_dir, "generator")
        hint = (
            f" (its ELECTRA generator has one: bertkit explain {generator})"
            if os.path.isfile(os.path.join(generator, "config.json"))
            else ""
        )
        heads = ", ".join(p + ".*" for p in MLM_HEADS if any(k.startswith(p) for k in head_missing))
        notes.append(
            f"{model_dir} has no MLM head weights ({heads}): they are random here, so "
            f"the MLM logits and predictions mean nothing; the encoder is the checkpoint's{hint}"
        )
    elif report.missing and report.missing_under("pooler.") == report.missing:
        notes.append(
            f"{model_dir} has no pooler weights (pretrained without next-sentence prediction): "
            "the pooler is random here; the encoder is the checkpoint's"
        )
    else:
        report.warn_missing(stacklevel=3)
    if report.unexpected_under("pooler.") == report.unexpected:
        pass  # BertForMaskedLM has no pooler by design: its tensors are expected to go unused (or none)
    elif not report.unexpected_under("embeddings.", "encoder."):
        task = ", ".join(getattr(model.config, "architectures", None) or ["a task model"])
        notes.append(
            f"{model_dir} holds {task}: its encoder is shown here; its task head (a small layer "
            "on top of the encoder's output) is not"
        )
    else:
        report.warn_unexpected(stacklevel=3)
    return model.eval()


def _tokenizer(
    model: BertPreTrainedModel,
    model_dir: str | None,
    tokenizer_dir: str | None,
    texts: tuple[str | None, ...],
    notes: list[str],
) -> Tokenizer:
    vocab_size = model.config.vocab_size
    if tokenizer_dir is not None:
        tokenizer = Tokenizer.from_pretrained(tokenizer_dir)
    elif model_dir is not None:
        try:
            tokenizer = Tokenizer.from_pretrained(model_dir)
        except TokenizerError as e:
            raise ExplainError(f"{e}; pass --tokenizer DIR, a folder with vocab.txt or tokenizer.json") from None
    else:
        tokenizer = char_tokenizer(*texts)
        if tokenizer.vocab_size > vocab_size:
            raise ExplainError(
                f"the text has {tokenizer.vocab_size - 5} distinct characters, more than the "
                f"model's vocab_size={vocab_size} allows; shorten it or pass --tokenizer DIR"
            )
        notes.append(
            f"no tokenizer for a preset: built a character vocabulary of {tokenizer.vocab_size} entries "
            "from the text ([PAD] [UNK] [CLS] [SEP] [MASK] + its characters); pass --tokenizer DIR for "
            "a real one"
        )
        return tokenizer
    if tokenizer.vocab_size > vocab_size:
        raise ExplainError(
            f"the tokenizer has {tokenizer.vocab_size} entries but the model's vocab_size is "
            f"{vocab_size}: they do not belong together"
        )
    return tokenizer
