"""Show the inside of a BERT: heads, shapes, attention maps, MLM predictions.

    from bertkit import BertForMaskedLM
    from bertkit.tokenizer import Tokenizer
    from bertkit import explain

    model = BertForMaskedLM.from_pretrained("path/to/bert-base-chinese")
    tok = Tokenizer.from_pretrained("path/to/bert-base-chinese")
    print(explain.architecture(model))                  # modules as heads, parameter counts, config numbers
    print(explain.trace(model, tok, "今天天气很好"))      # every step's tensor shape, from forward hooks
    print(explain.mlm(model, tok, "今天[MASK]气很好"))    # masks, logits (B, S, V), what the loss uses, top-k
    maps = explain.attention_maps(model, tok, "今天天气很好")  # per layer (heads, S, S), from output_attentions
    maps.save_png("attention.png"); maps.save_html("attention.html")
    maps                                                # in a notebook: the interactive viewer

The command line is `bertkit explain ...` and `bertkit attention ...` (bertkit/commands/).
"""

from .architecture import Architecture, architecture
from .attention_view import AttentionMaps, PngLayout, attention_maps, attention_maps_ids, attention_png
from .common import ExplainError
from .html_view import attention_html, save_html
from .loading import char_tokenizer
from .mlm import MLMExplanation, explain_mlm
from .trace import Step, Trace, trace, trace_ids

mlm = explain_mlm  # explain.mlm(model, tokenizer, text)

__all__ = [
    "Architecture",
    "architecture",
    "Trace",
    "Step",
    "trace",
    "trace_ids",
    "MLMExplanation",
    "mlm",
    "explain_mlm",
    "AttentionMaps",
    "PngLayout",
    "attention_maps",
    "attention_maps_ids",
    "attention_png",
    "attention_html",
    "save_html",
    "char_tokenizer",
    "ExplainError",
]
