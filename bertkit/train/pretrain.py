"""Pretraining, as BERT does it (or as ELECTRA does), from a prepared dataset folder or a raw corpus.

--data DATA (bertkit prepare: token ids and marks, memory-mapped)   or   --corpus SPEC (prepared into
<out>/data first, by the same code: a vocabulary is learned on it unless --tokenizer)
       -> rows cut per batch from the document offsets (data/rows.py): packed rows [CLS] ... [SEP] of
          --seq-len, packed documents, or NSP sentence pairs; the order a seeded permutation of row numbers
       -> the objective (train/objectives/, --objective): mlm, mlm-nsp or electra; it builds the model(s)
          with starting weights by --recipe (bertkit/init.py: local = some heads already attend to
          their neighbours; bert = BERT's initialisation), masks each batch (30% (local) or 15% (bert)
          of its tokens selected: 80% [MASK], 10% random, 10% kept; each process builds and masks only
          its own rows), and owns the loss, the held-out metrics and what is saved
       -> the shared loop (train/loop.py) -> an HF model directory at the top of --out
          (held-out evaluations on the dataset's held-out documents: MLM accuracy at 15% masking,
          replaced-token detection for electra, and how local the most local head is)

bertkit prepare --corpus my_texts/ --tokenizer TOK --out data/zh ; bertkit pretrain --data data/zh --out runs/pt
bertkit pretrain --corpus builtin:peoples-daily --model-config mini --out runs/pt
torchrun --nproc_per_node 2 -m bertkit pretrain --data data/zh ...     (DDP; --batch-size is per process)
"""

from __future__ import annotations

import os
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..checkpoint import read_config
from ..config import PRESETS, BertConfig
from ..data.builtin import BUILTIN_CORPORA
from ..data.corpus import DOC_SEPS, Corpus
from ..data.dataset import PretrainingData, Split
from ..data.prepare import prepare
from ..data.rows import PACKINGS, make_rows, most_rows, pair_options
from ..deprecated import moved
from ..errors import TrainingError, stop_note
from ..modernbert import PRESETS as MODERN_PRESETS
from ..modernbert import ModernBertConfig
from ..options import opt
from ..tokenizer import Tokenizer, vocab_digest
from ..vocab import MIN_FREQUENCY, train_vocab, vocab_shortfall
from .batches import StepSampler
from .loop import TrainSummary, train
from .objectives import OBJECTIVES, Objective, Setup
from .runfolder import keep_settings, run_claimed
from .settings import TrainConfig, with_default

Say = Callable[..., object]  # where a run's notes go: print to stderr, or nowhere


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
    """bertkit pretrain: masked-language-model pretraining from a prepared dataset (--data) or a raw corpus."""

    # may change on --resume: a dataset is known by its content (its manifest's fingerprint), not by its path,
    # so a copy elsewhere continues the run; another dataset is refused by the identity check (state.py)
    data: str | None = opt(
        None, "a dataset folder made by bertkit prepare (read by memory map; no tokenizing)", may_change_on_resume=True
    )
    corpus: str | None = opt(
        None,
        "instead of --data: a text file, folder, JSONL, Parquet, or "
        f"{' / '.join(BUILTIN_CORPORA)}, prepared into <out>/data first "
        "(default: builtin:peoples-daily)",
    )
    doc_sep: str = opt(
        "line", "--corpus plain text: one document per line, or documents separated by blank lines", choices=DOC_SEPS
    )
    text_field: str = opt("text", "--corpus JSONL field / Parquet column holding the text")
    workers: int = opt(0, "--corpus: processes that tokenize it (0: one per CPU core)", may_change_on_resume=True)
    model_config: str = opt(
        "mini",
        f"a preset (BERT: {', '.join(PRESETS)}; ModernBERT, --objective mlm: {', '.join(MODERN_PRESETS)}; its "
        "vocabulary is the tokenizer's) or a config.json path (a vocab_size larger than the tokenizer's is kept, "
        "as padding)",
    )
    init_from: str | None = opt(None, "continue pretraining from this model directory")
    recipe: str = opt(
        "local",
        "local: heads that attend to their neighbours from step 0, the output bias at the "
        "token frequencies, 30%% masking, no dropout (learns word order in CPU minutes; "
        "bench/results/pretraining_recipes.md); bert: BERT's initialisation, 15%% masking, the "
        "model's dropout",
        choices=list(RECIPES),
    )
    tokenizer: str | None = opt(
        None,
        "tokenizer directory; without one a vocabulary is learned on --corpus (with --data: must be the data's own)",
    )
    vocab_size: int = opt(21128, "size of the vocabulary learned when there is no --tokenizer")
    vocab_sample: str | None = opt(
        None, "learn the vocabulary from a seeded sample of --corpus: 200MB, 2GB or 50000docs (default: all of it)"
    )
    seq_len: int = opt(128, "tokens per example, [CLS] and [SEP] included")
    mlm_probability: float | None = opt(None, "share of tokens selected for prediction (default: the recipe's)")
    dropout: float | None = opt(
        None,
        "dropout while pretraining (default: the recipe's; the saved config keeps the model's own, for fine-tuning)",
    )
    wwm: bool = opt(
        False,
        "whole-word masking (Chinese words from jieba, English words with their ## pieces; --data "
        "must be prepared with --wwm)",
    )
    objective: str = opt(
        "mlm",
        "what the model learns: mlm (BERT's masked-language model), mlm-nsp (+ next-sentence "
        "prediction on sentence pairs), mlm-bow (+ the pooled [CLS] vector predicts its row's "
        "tokens), electra (a small generator fills the masked tokens, the model learns from every "
        "token whether it was replaced: ELECTRA's replaced-token detection)",
        choices=OBJECTIVES,
    )  # the registry itself: an objective added later too
    nsp: bool = opt(False, "the same as --objective mlm-nsp")
    generator_size: float = opt(
        0.25,
        "electra: the generator's hidden size, heads and feed-forward width as a share "
        "of the model's (its layers as many)",
    )
    disc_weight: float = opt(
        50.0,
        "electra: the weight of the replaced-token loss (a mean over every real token) "
        "against the generator's MLM loss",
    )
    bow_weight: float = opt(
        1.0,
        "mlm-bow: the weight of the bag-of-words loss of the pooled [CLS] vector (a mean "
        "over rows) beside the MLM loss",
    )
    packing: str = opt(
        "stream",
        "MLM rows: stream (all documents joined by [SEP], cut into rows) or documents "
        "(several documents per row, attention and positions kept inside each)",
        choices=PACKINGS,
    )
    heldout: float = opt(0.01, "--corpus: share of documents held out for evaluation (--data: the folder's own split)")
    eval_rows: int = opt(
        1024,
        "held-out rows each evaluation scores, the first of the held-out split (0: all)",
        may_change_on_resume=True,
    )
    # Defaults sized for the built-in corpus and `mini` on a CPU (bench/results/pretraining_recipes.md):
    # many small steps learn more per second than few large ones
    batch_size: int = with_default("batch_size", 8)
    steps: int = with_default("steps", 2000)
    lr: float = with_default("lr", 7e-4)
    eval_every: int = with_default("eval_every", 250)
    save_every: int = with_default("save_every", 250)

    def check(self) -> None:
        """The loop's rules (TrainConfig.check) and pretraining's: one TrainingError naming the flag, before any
        work (run() calls it once; everything after trusts the settings)."""
        super().check()
        if self.seq_len < 8:
            raise TrainingError(f"--seq-len must be at least 8, got {self.seq_len}")
        if self.recipe not in RECIPES:
            raise TrainingError(f"--recipe {self.recipe!r}: choose one of {', '.join(RECIPES)}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise TrainingError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.objective not in OBJECTIVES:
            raise TrainingError(f"--objective {self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.nsp and self.objective not in ("mlm", "mlm-nsp"):
            raise TrainingError(f"--nsp is --objective mlm-nsp; it cannot go with --objective {self.objective}")
        objective = "mlm-nsp" if self.nsp else self.objective
        if OBJECTIVES[objective].pairs and self.packing == "documents":
            raise TrainingError(
                f"--objective {objective} trains on sentence-pair rows; --packing documents is for rows of whole "
                "documents"
            )
        if self.data and self.corpus:
            raise TrainingError("pass --data (a prepared folder) or --corpus (prepared into the run folder), not both")
        if not 0.0 <= self.heldout < 1.0:
            raise TrainingError(f"--heldout must be in [0, 1), got {self.heldout}")
        if self.eval_rows < 0:
            raise TrainingError(f"--eval-rows must be >= 0, got {self.eval_rows}")


@dataclass
class PretrainSummary(TrainSummary):
    """The loop's summary, and the data's size: rows trained on and held out, the vocabulary."""

    train_examples: int = 0
    heldout_examples: int = 0
    vocab_size: int = 0


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Every dropout of the model at p for this run; config.json keeps the model's own values."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p


def _dropout_of(model: torch.nn.Module) -> str:
    values = sorted({m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)})
    return "/".join(f"{v:g}" for v in values) or "none"


def encoder_config(cfg: PretrainConfig) -> BertConfig | ModernBertConfig:
    """The model's shape: --model-config (a BERT or ModernBERT preset, or a config.json), or --init-from's
    config.json; --seq-len must fit its positions. Read before any data is: its vocabulary comes from the tokenizer
    later (build_model_config)."""
    config: BertConfig | ModernBertConfig
    if cfg.init_from:
        config = read_config(cfg.init_from)
    elif cfg.model_config in PRESETS:
        config = BertConfig.from_preset(cfg.model_config)
    elif cfg.model_config in MODERN_PRESETS:
        config = ModernBertConfig.from_preset(cfg.model_config)
    elif os.path.exists(cfg.model_config):
        config = read_config(cfg.model_config)
    else:
        raise TrainingError(
            f"--model-config {cfg.model_config!r} is neither a preset ({', '.join([*PRESETS, *MODERN_PRESETS])}) "
            "nor a config.json path"
        )
    model = f"--init-from {cfg.init_from}" if cfg.init_from else f"--model-config {cfg.model_config}"
    if cfg.seq_len > config.max_position_embeddings:
        raise TrainingError(
            f"--seq-len {cfg.seq_len} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings}, {model}); lower --seq-len"
        )
    objective = "mlm-nsp" if cfg.nsp else cfg.objective
    if isinstance(config, ModernBertConfig) and objective != "mlm":
        raise TrainingError(f"--objective {objective} trains BERT models; {model} is a ModernBERT: use --objective mlm")
    return config


def build_model_config(
    cfg: PretrainConfig, tokenizer: Tokenizer, say: Say = lambda *a: None
) -> BertConfig | ModernBertConfig:
    """encoder_config with the tokenizer's vocabulary. A preset is a shape: it takes the tokenizer's size. A
    --model-config file's own vocab_size is honoured as transformers honours it (run_mlm.py): a larger one is
    kept (embedding rows past the tokenizer's ids are legal padding, e.g. to a multiple of 64), a smaller one
    is grown to the tokenizer's size (it could not hold its ids); either way a note names both numbers."""
    config, tokens = encoder_config(cfg), tokenizer.vocab_size
    in_file = None if cfg.init_from or cfg.model_config in (*PRESETS, *MODERN_PRESETS) else config.vocab_size
    vocab_size = max(in_file or tokens, tokens)
    if in_file is not None and in_file != tokens:
        say(
            f"note: --model-config {cfg.model_config} sets vocab_size {in_file}, the tokenizer has {tokens} tokens: "
            + (
                f"kept, so embedding rows {tokens}..{in_file - 1} are padding no token id uses (as transformers "
                f"keeps them); set vocab_size to {tokens} in the file to leave them out"
                if in_file > tokens
                else f"it cannot hold the tokenizer's ids, so the model gets {tokens} rows (as transformers' run_mlm "
                f"resizes its embeddings); set vocab_size to {tokens} in the file to say so"
            )
        )
    if isinstance(config, ModernBertConfig):  # its special-token ids are the tokenizer's too
        ids = dict(cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
        config = config.replace(**ids, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    return config.replace(vocab_size=vocab_size, pad_token_id=tokenizer.pad_token_id)


DEFAULT_CORPUS = "builtin:peoples-daily"


def check_corpus(cfg: PretrainConfig) -> None:
    """Refuse a --corpus that cannot give one batch of rows, before a vocabulary is learned or a token is made.

    A token holds at least one character (of the text as the tokenizer normalises it: lower case, accents
    apart), so a document's characters bound its tokens, and so the rows, from above. The training documents
    stream by (none is kept) until the bound reaches one batch: a few documents of a real corpus; a corpus that
    cannot make a row is read to its end, and refused here instead of after its vocabulary and tokens.
    """
    kind, chunk = row_kind(cfg), cfg.seq_len - 2  # rows of [CLS] chunk [SEP]
    docs = chars = pieces = 0
    for text in Corpus(
        cfg.corpus or DEFAULT_CORPUS,
        text_field=cfg.text_field,
        doc_sep=cfg.doc_sep,
        seed=cfg.seed,
        skip_heldout=cfg.heldout,
    ):
        n = len(unicodedata.normalize("NFD", text.lower()))
        docs, chars, pieces = docs + 1, chars + n, pieces + -(-n // chunk)
        if most_rows(kind, docs, chars, pieces, chunk) >= cfg.batch_size:
            return
    spec = cfg.corpus or DEFAULT_CORPUS
    if not docs:
        raise TrainingError(
            f"--corpus {spec}: every document is held out for evaluation (--heldout {cfg.heldout:g}); lower --heldout"
        )
    if kind == "pairs" and docs < 2:
        raise TrainingError(
            f"--corpus {spec}: {docs} training document(s); sentence pairs (--objective {cfg.objective}) need 2"
        )
    rows = ROW_NAMES[kind]
    raise TrainingError(
        f"--corpus {spec}: its {docs:,} training document(s) hold {chars:,} characters: at most "
        f"{most_rows(kind, docs, chars, pieces, chunk):,} {rows} of --seq-len {cfg.seq_len}, fewer "
        f"than one batch of {cfg.batch_size}; add text, or lower --seq-len or --batch-size"
    )


ROW_NAMES = {"stream": "packed rows", "documents": "packed documents", "pairs": "sentence pairs"}


def row_kind(cfg: PretrainConfig) -> str:
    """The rows the run trains on: sentence pairs when its objective needs them (NSP), else --packing's."""
    return "pairs" if OBJECTIVES[cfg.objective].pairs else cfg.packing


def load_or_learn_tokenizer(cfg: PretrainConfig, rank: int, world: int, say: Say) -> Tokenizer:
    """--tokenizer (or --init-from) if given; else the one this run learned before (resume); else learn one on
    the training documents of --corpus (its held-out ones left out; a --vocab-sample of them if asked).

    A learned vocabulary is saved in the run folder first, and every process (and every resume)
    loads that file: learning is deterministic, but only rank 0 spends the time on it.
    """
    if cfg.tokenizer or cfg.init_from:
        return Tokenizer.from_pretrained(cfg.tokenizer or cfg.init_from or "")  # one of them is given
    saved = os.path.join(cfg.out, "tokenizer")
    if not (cfg.resume and os.path.exists(os.path.join(saved, "vocab.txt"))):
        if rank == 0:
            texts = Corpus(
                cfg.corpus or DEFAULT_CORPUS,
                text_field=cfg.text_field,
                doc_sep=cfg.doc_sep,
                sample=cfg.vocab_sample,
                seed=cfg.seed,
                skip_heldout=cfg.heldout,
            )
            tokenizer = train_vocab(texts=texts, vocab_size=cfg.vocab_size)
            tokenizer.save_pretrained(saved)
            say(f"learned a vocabulary of {tokenizer.vocab_size} tokens ({saved})")
            shortfall = vocab_shortfall(tokenizer, cfg.vocab_size, MIN_FREQUENCY)
            if shortfall:
                say(f"note: {shortfall}")
        if world > 1:
            dist.barrier()
    return Tokenizer.from_pretrained(saved)


def load_data(cfg: PretrainConfig, rank: int, world: int, say: Say) -> tuple[PretrainingData, Tokenizer]:
    """The dataset and its tokenizer: --data as it is (its own tokenizer unless --tokenizer / --init-from, which
    must have the same vocabulary); --corpus prepared into <out>/data by rank 0 first (kept if it is already
    there from the same corpus, vocabulary and options: a resumed run does not tokenize again)."""
    if cfg.data:
        data = PretrainingData.open(cfg.data)
        tokenizer = Tokenizer.from_pretrained(cfg.tokenizer or cfg.init_from or data.tokenizer_dir)
    else:
        tokenizer = load_or_learn_tokenizer(cfg, rank, world, say)
        folder = os.path.join(cfg.out, "data")
        if rank == 0:
            # a stop leaves no partial folder; a vocabulary learned into --out makes a rerun there need --overwrite
            learned = not (cfg.tokenizer or cfg.init_from or cfg.resume)
            with stop_note(
                f"it was preparing --corpus into {folder}: nothing of that was kept (run the command "
                f"again{' with --overwrite' if learned else ''} to start over)"
            ):
                result = prepare(
                    cfg.corpus or DEFAULT_CORPUS,
                    tokenizer,
                    folder,
                    doc_sep=cfg.doc_sep,
                    text_field=cfg.text_field,
                    wwm=cfg.wwm,
                    heldout=cfg.heldout,
                    seed=cfg.seed,
                    nsp_seq_len=cfg.seq_len if row_kind(cfg) == "pairs" else 0,
                    workers=cfg.workers,
                    overwrite=True,
                    progress=cfg.progress,
                )
            if not result.reused:
                say(f"prepared {result.text_bytes / 1e6:,.1f} MB of text into {folder} in {result.seconds:,.1f} s")
        if world > 1:
            dist.barrier()
        data = PretrainingData.open(folder)
    made_with, now = data.manifest["tokenizer"]["fingerprint"], vocab_digest(tokenizer)
    if made_with != now and cfg.data and not (cfg.tokenizer or cfg.init_from):
        # the data's own tokenizer was edited after bertkit prepare: its ids no longer name the tokens they did
        raise TrainingError(
            f"--data {data.folder}: its tokenizer ({os.path.join(data.tokenizer_dir, 'vocab.txt')}) "
            f"no longer matches the fingerprint in its manifest "
            f"({os.path.join(data.folder, 'manifest.json')}: {made_with}, the tokenizer now "
            f"{now}): it was changed after bertkit prepare, so the token ids "
            "would mean other tokens; prepare the corpus again (bertkit prepare --corpus ... "
            f"--tokenizer ... --out {data.folder} --overwrite), or put back the tokenizer it was "
            "prepared with"
        )
    if made_with != now:
        given = "--tokenizer" if cfg.tokenizer else "--init-from"
        raise TrainingError(
            f"--data {data.folder}: its token ids come from another vocabulary (fingerprint "
            f"{made_with}) than {given}'s ({now}); leave {given} out to use "
            f"the data's own tokenizer ({data.tokenizer_dir}), or prepare the corpus again with "
            "this tokenizer"
        )
    if cfg.wwm and data.manifest["options"]["words"] != "jieba":
        raise TrainingError(
            f"--wwm: {data.folder} was prepared without --wwm, so its Chinese words are single "
            "characters; prepare it again with bertkit prepare --wwm (English words need nothing "
            "more, but the folder must say how its words were found)"
        )
    return data, tokenizer


def pretraining_rows(cfg: PretrainConfig, data: PretrainingData, tokenizer: Tokenizer, say: Say | None = None) -> dict:
    """{"train": rows, "heldout": rows} of the kind the flags ask for ("heldout" missing when its documents cannot
    make any). NSP pairs come from the data's own plan when bertkit prepare walked it for this --seq-len; else they
    are walked here and kept in <out>/plans, named by the data's fingerprint, --seq-len and the seed."""
    kind = row_kind(cfg)
    rows = {}
    stored = data.splits["train"].pair_options
    if kind == "pairs" and stored != pair_options(cfg.seq_len) and say is not None:
        had = f"pairs for --seq-len {stored['seq_len']}" if stored else "no pairs"
        say(
            f"--data {data.folder} holds {had}: they are walked here for --seq-len {cfg.seq_len} (every sentence, "
            f"about a minute per GB of text, kept in {os.path.join(cfg.out, 'plans')} for a resume); bertkit "
            f"prepare --nsp-seq-len {cfg.seq_len} plans them once, as it tokenizes"
        )
    for name, split in data.splits.items():
        if split.documents >= (2 if kind == "pairs" else 1):  # pairs need a second document for random B sentences
            seed = cfg.seed + (name == "heldout")
            plan = os.path.join(cfg.out, "plans", f"pairs-{data.fingerprint}-{name}-{cfg.seq_len}-{seed}.npy")
            rows[name] = make_rows(
                split,
                kind,
                seq_len=cfg.seq_len,
                cls_id=tokenizer.cls_token_id,
                sep_id=tokenizer.sep_token_id,
                seed=seed,
                plan_file=plan if kind == "pairs" else None,
            )
    return rows


def run(cfg: PretrainConfig) -> PretrainSummary:
    """Everything `bertkit pretrain` does, in a claimed --out (runfolder.py); returns the run's summary."""
    cfg.check()
    if cfg.nsp:
        cfg.objective = "mlm-nsp"
    encoder_config(cfg)  # --seq-len fits the model: checked before the corpus is read
    if not cfg.data:
        check_corpus(cfg)  # it can make a batch: checked before its vocabulary is learned (and --out claimed)
    return run_claimed(
        cfg,
        run_in,
        inputs={
            "--corpus": cfg.corpus,
            "--data": cfg.data,
            "--init-from": cfg.init_from,
            "--tokenizer": cfg.tokenizer,
            "--model-config": cfg.model_config,
        },
    )


def starting_model(
    cfg: PretrainConfig, tokenizer: Tokenizer, train_split: Split, say: Callable[..., None] = lambda *a: None
) -> tuple[Objective, nn.Module]:
    """The run's objective and its model before the first step: torch seeded with --seed, then --init-from's weights,
    or the objective's build with the recipe's initialisation (the output bias from the training split's token
    counts). run_in starts from it; the quickstart makes it again to measure what initialisation set."""
    recipe = RECIPES[cfg.recipe]
    mlm_probability = recipe.mlm_probability if cfg.mlm_probability is None else cfg.mlm_probability
    objective = OBJECTIVES[cfg.objective](Setup(cfg, tokenizer, recipe.init, mlm_probability, say))
    torch.manual_seed(cfg.seed)
    if cfg.init_from:
        return objective, objective.load(cfg.init_from)
    counts = torch.from_numpy(np.array(train_split.token_counts))  # of the corpus, counted by bertkit prepare
    counts[list(tokenizer.all_special_ids)] = 0  # never a target
    config = build_model_config(cfg, tokenizer, say)
    counts = F.pad(counts, (0, config.vocab_size - len(counts)))  # padding rows (a larger vocab_size): never seen
    return objective, objective.build(config, counts)


def run_in(cfg: PretrainConfig, rank: int, world: int) -> PretrainSummary:
    """The run itself, in a claimed --out (runfolder.py)."""
    say = (lambda *a: print(*a, file=sys.stderr)) if rank == 0 else (lambda *a: None)
    data, tokenizer = load_data(cfg, rank, world, say)
    train_split, heldout_split = data.splits["train"], data.splits["heldout"]
    say(
        f"data: {data.folder}: {train_split.documents:,} documents ({train_split.tokens:,} tokens), "
        f"{heldout_split.documents:,} held out ({heldout_split.tokens:,} tokens)"
    )
    shared_plans = row_kind(cfg) == "pairs" and world > 1  # rank 0 walks the sentences, keeps the plans in <out>/plans
    if shared_plans and rank != 0:
        dist.barrier()  # until rank 0 has written them; then they are read, not walked again
    rows = pretraining_rows(cfg, data, tokenizer, say)
    if shared_plans and rank == 0:
        dist.barrier()
    if "train" not in rows:
        raise TrainingError(f"{data.folder}: {train_split.documents} training document(s); next-sentence pairs need 2")
    heldout_rows = rows.get("heldout")
    if heldout_rows is not None and not len(heldout_rows):
        heldout_rows = None  # held-out documents too short for one row
    say(
        f"rows: {len(rows['train']):,} for training, {len(heldout_rows) if heldout_rows else 0:,} held out "
        f"({ROW_NAMES[row_kind(cfg)]}"
        f" of {cfg.seq_len} tokens)" + ("" if heldout_rows else "; no held-out evaluation")
    )
    sampler = StepSampler(len(rows["train"]), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)  # >= a batch

    recipe = RECIPES[cfg.recipe]
    mlm_probability = recipe.mlm_probability if cfg.mlm_probability is None else cfg.mlm_probability
    dropout = recipe.dropout if cfg.dropout is None else cfg.dropout
    objective, model = starting_model(cfg, tokenizer, train_split, say)
    if dropout is not None:
        set_dropout(model, dropout)
    say(
        f"model: {objective.describe(model)}; objective {cfg.objective}, recipe {cfg.recipe}: "
        f"{'initialised ' + recipe.init if not cfg.init_from else 'from ' + cfg.init_from}, "
        f"{mlm_probability:.0%} of tokens masked, dropout {_dropout_of(model)}"
    )

    def evaluate(m: nn.Module) -> dict:
        assert heldout_rows is not None  # train() is given evaluate only where there are held-out rows
        return objective.evaluate(m, heldout_rows)

    def save(m: nn.Module, out: str) -> None:
        objective.save(m, out)
        tokenizer.save_pretrained(out)

    identity: dict[str, object] = {
        "vocab": vocab_digest(tokenizer),
        "data": data.fingerprint,
        "objective": cfg.objective,
    }
    if cfg.data:  # known by its content on --resume: a copy at another path continues the run
        identity.update(data_from=f"--data {cfg.data}", data_parts=data.parts)
    if rank == 0:
        keep_settings(cfg, "pretrain")
    summary = train(
        model,
        objective.batches(rows["train"], sampler),
        cfg,
        objective.loss,
        evaluate=evaluate if heldout_rows else None,
        save_model=save,
        identity=identity,
        loss_title=objective.loss_title,
    )
    return PretrainSummary(
        **vars(summary),
        train_examples=len(rows["train"]),
        heldout_examples=min(cfg.eval_rows or len(heldout_rows), len(heldout_rows)) if heldout_rows else 0,
        vocab_size=tokenizer.vocab_size,
    )


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "main": "bertkit.commands.pretrain:main",
            "report": "bertkit.commands.pretrain:report",
        },
    )
