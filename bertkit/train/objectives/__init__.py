"""Pretraining objectives, one module each; `bertkit pretrain --objective NAME` takes any in OBJECTIVES.

    mlm       BERT's masked-language model (mlm.py)
    mlm-nsp   + next-sentence prediction on sentence pairs (mlm.py)
    mlm-bow   + a bag-of-words loss on the pooled [CLS] vector (bow.py)
    electra   ELECTRA's replaced-token detection: a small generator and the discriminator (electra.py)

A new objective is an Objective subclass (base.py says what it owns) and its line here.
"""

from .base import Objective, Setup
from .bow import MaskedLMWithBagOfWords
from .electra import Electra
from .mlm import MaskedLM, MaskedLMWithNSP

OBJECTIVES: dict[str, type[Objective]] = {
    MaskedLM.name: MaskedLM,
    MaskedLMWithNSP.name: MaskedLMWithNSP,
    MaskedLMWithBagOfWords.name: MaskedLMWithBagOfWords,
    Electra.name: Electra,
}

__all__ = ["OBJECTIVES", "Objective", "Setup"]
