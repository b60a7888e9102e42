"""ONNX export (`bertkit export MODEL --out DIR`): a model folder as an ONNX graph, in a folder of its own.

    MODEL (any folder bertkit loads) -> loaded as its command loads it (embed, fill-mask, predict) -> Graph: the
    model with the inputs and outputs below -> torch.onnx.export (TorchScript tracing; batch, choice and sequence
    axes dynamic; BertModel takes its padded attention and reads no input value while exporting)
    -> DIR/model.onnx + config.json, the tokenizer's files (and for an embedding model, the sentence-transformers
    files that say its pooling), so DIR loads on its own: bertkit's Tokenizer, transformers' AutoConfig, optimum's
    ORTModel classes; + DIR/model_optimized.onnx, the graph onnxruntime.transformers' optimizer fuses from it (the
    graph --engine onnx / auto runs; ONNX Runtime's own operators, so other runtimes take model.onnx).
    Checked before DIR appears: ONNX Runtime runs each graph on batches of several lengths of the built-in
    calibration texts, and every output equals bertkit's float32 to 1e-4 (padding positions left out). A fused
    graph that does not (an operator the optimizer fuses differently) is not written: model.onnx runs instead.
    --kind must be the folder's head (config.json's architectures), or `encoder`: a classifier is not exported as a
    tagger, an MLM not as a classifier. DIR is built in a hidden .DIR.exporting-PID@HOST beside it and renamed
    into place: a failed write (read-only folder, full disk: one line, files.write_problem) leaves nothing, an
    export that was killed leaves a folder the next export beside it removes (once its process is gone), and of
    two exports into one DIR at once the first to finish wins (the other's is an ExportError; engines.py relies on
    it). An --out that holds anything else is refused: an earlier export is replaced with --overwrite only.

    kind      inputs (int64)                                       outputs (float32)
    encoder   input_ids, attention_mask, token_type_ids (B, S)     last_hidden_state (B, S, H),
                                                                   sentence_embedding (B, H): embed's pooling
    mlm       the same                                             logits (B, S, vocabulary)
    classify  the same                                             logits (B, labels)
    tag       the same                                             logits (B, S, labels)
    qa        the same                                             start_logits, end_logits (B, S)
    choice    input_ids, attention_mask, token_type_ids (B, C, S)  logits (B, C)
The names are those of optimum's exports. Why TorchScript's exporter: its graph of BERT is the one
onnxruntime.transformers' optimizer fuses (one Attention, two SkipLayerNormalization and one BiasGelu per layer).
A row with no real token gives what the padded path gives there, not embed's zeros.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shutil
import socket
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from .deprecated import moved
from .errors import BertkitError, CheckpointError
from .files import alive, write_problem
from .options import opt
from .outfolder import check_out, move_aside
from .tasks import TASKS

if TYPE_CHECKING:
    from .config import BertConfig
    from .pooling import Pooling
    from .tokenizer import Tokenizer

KINDS = ["auto", "encoder", "mlm", *TASKS]  # a registry: its keys are the choices (options.py)

ONNX_FILE = "model.onnx"
# ONNX Runtime's transformer optimizer's graph of model.onnx (one EmbedLayerNormalization, then per layer one
# Attention, two SkipLayerNormalization and one BiasGelu: ONNX Runtime's own operators, so it runs there only); the
# engines run it where it is
OPTIMIZED_FILE = "model_optimized.onnx"
# what the export writes, for the engines' cache key: a new value makes every cached graph again (2: the
# embeddings fused too, from positions sized by input_ids as transformers' export sizes them)
GRAPH_FORM = 2
OPSET = 17  # ONNX Runtime 1.17 and later run it; LayerNormalization is one node from 17 on
TOLERANCE = 1e-4
# the outputs of each kind, by name; a task added to the registry (tasks.TASKS) gives `logits`
OUTPUTS = {
    "encoder": ("last_hidden_state", "sentence_embedding"),
    "mlm": ("logits",),
    "classify": ("logits",),
    "tag": ("logits",),
    "qa": ("start_logits", "end_logits"),
    "choice": ("logits",),
}
PER_TOKEN = {"last_hidden_state", "start_logits", "end_logits"}  # and tag's and mlm's logits: see _per_token
MLM_CLASSES = ("BertForMaskedLM", "BertForPreTraining", "ElectraForMaskedLM", "ModernBertForMaskedLM")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# besides the weights, what a model folder holds that the export folder keeps
SENTENCE_TRANSFORMERS_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling",
    "2_Normalize",
)


class ExportError(BertkitError, ValueError):
    """An export that cannot be made or whose graph does not compute what bertkit computes."""


class ExportWriteError(ExportError):
    """An export folder that could not be written (a read-only folder, a full disk); `problem` says why in words."""

    def __init__(self, out: str, problem: str) -> None:
        super().__init__(f"--out {out}: {problem}; nothing was written")
        self.out, self.problem = out, problem


@dataclass
class ExportConfig:
    """Write a model folder as an ONNX graph with its config and tokenizer: a folder ONNX Runtime serves."""

    model: str = opt(
        "", "a model folder bertkit loads: embeddings, pretrained MLM, or bertkit finetune's --out", positional=True
    )
    out: str = opt("", "the folder to write (model.onnx, config.json, the tokenizer)", required=True)
    format: Literal["onnx"] = opt("onnx", "the graph format")
    kind: str = opt(
        "auto",
        "what to export; auto: the task head config.json's architectures name, an MLM's head, "
        "else the encoder with its sentence-embedding pooling",
        choices=KINDS,
    )
    opset: int = opt(OPSET, "the ONNX opset")
    overwrite: bool = opt(False, "replace an export already in --out: it is moved to <out>.replaced-<time>")
    device: str = opt(
        "auto",
        "auto or cpu: the graph is traced and checked on the CPU and runs on any device (ONNX Runtime's "
        "CUDA provider too: --engine onnx --device cuda)",
    )

    def problem(self) -> str | None:
        if not self.model:
            return "pass the model folder to export"
        if self.device not in ("auto", "cpu"):
            return (
                f"--device {self.device}: bertkit export traces and checks the graph on the CPU, and the graph it "
                "writes is the same for every device; run it on a GPU with --engine onnx --device cuda (ONNX "
                "Runtime's CUDA provider) or on the torch engine"
            )
        if self.opset < OPSET:
            return f"argument --opset: {OPSET} or later (one LayerNormalization node), got {self.opset}"
        return None


# ----- what is exported --------------------------------------------------------------------------
class Graph(nn.Module):
    """A loaded model as the graph runs it: the inputs' tensors in, outputs(kind) out, in that order."""

    def __init__(self, model: nn.Module, kind: str, pooling: Pooling | None = None) -> None:
        super().__init__()
        self.model, self.kind, self.pooling = model, kind, pooling

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if self.kind != "encoder":
            return tuple(getattr(out, name) for name in outputs(self.kind))
        from .pooling import pool

        assert self.pooling is not None, "an encoder's Graph is made with its pooling (load)"
        hidden = out.last_hidden_state  # (B, S, H)
        vectors = pool(hidden, attention_mask, self.pooling.mode)  # (B, H)
        return hidden, F.normalize(vectors, p=2, dim=1) if self.pooling.normalize else vectors


def kind_of(model_dir: str) -> str:
    """The kind `auto` exports: a fine-tuned task head, an MLM, else the encoder (from config.json's architectures)."""
    from .checkpoint import read_config
    from .tasks import TaskDataError, task_of

    try:
        return task_of(model_dir)
    except TaskDataError:
        architectures = read_config(model_dir).architectures or ()
        return "mlm" if any(a in MLM_CLASSES for a in architectures) else "encoder"


def check_kind(model_dir: str, kind: str, flag: str = "--kind") -> None:
    """Refuse a `kind` the folder's head is not: a head's weights would run as another head's (a sentence
    classifier's on every token as a tagger). `encoder` fits every folder; a folder without a head (kind_of:
    encoder) is left to load()'s refusal of a head that would be random. `flag` names the option that asked."""
    from .checkpoint import read_config

    head = kind_of(model_dir)
    if kind in ("encoder", head) or head == "encoder":
        return
    names = ", ".join(a[:60] for a in (read_config(model_dir).architectures or [])[:3])
    remedy = (
        f"pass --kind {head} (or auto), or --kind encoder for its encoder alone"
        if flag == "--kind"
        else f"pass {flag} {head}, or leave {flag} out"
    )
    raise ExportError(
        f"{flag} {kind}: {model_dir}: its head is {head} (config.json's architectures: {names}), not {kind}: its "
        f"weights would run as a head they are not; {remedy}"
    )


def load(model_dir: str, kind: str) -> tuple[Graph, Tokenizer, Pooling | None]:
    """(Graph, tokenizer, pooling or None): the folder loaded as embed, fill-mask or predict loads it, with the
    same refusals (a task head or MLM head that would be random weights, weights that are not finite)."""
    from .inference import load_mlm, load_task_model
    from .tokenizer import Tokenizer

    if kind == "encoder":  # as embed's Encoder loads it: a task model's `bert.` weights, its head left out
        from .checkpoint import load_pretrained
        from .finite import check_weights
        from .model import BertModel
        from .pooling import pooling_settings, read_pooling

        model, _ = load_pretrained(BertModel, model_dir, add_pooling_layer=False, output_loading_info=True)
        check_weights(model, model_dir)
        pooling = pooling_settings(read_pooling(model_dir), None, None)
        return Graph(model, kind, pooling), Tokenizer.from_pretrained(model_dir), pooling
    if kind == "mlm":
        return Graph(load_mlm(model_dir), kind), Tokenizer.from_pretrained(model_dir), None
    found = load_task_model(model_dir, kind)
    assert isinstance(found.model, nn.Module)  # inference's own loader: the torch BertFor* model
    return Graph(found.model, kind), found.tokenizer, None


def sample_batches(tokenizer: Tokenizer, kind: str, positions: int = 128) -> list[dict[str, torch.Tensor]]:
    """Padded batches of the built-in calibration texts in this model's tokens: one text; three of different
    lengths; eight of up to 128 tokens (or the model's `positions`, when fewer). choice: each batch's rows as
    (B, 2, S) questions of two choices."""
    from .data.batching import id_batch
    from .quantize import calibration_rows

    rows = calibration_rows(tokenizer, per_language=8, max_length=min(128, positions))
    rows.sort(key=len)
    picks = [rows[len(rows) // 2 : len(rows) // 2 + 1], [rows[0], rows[len(rows) // 2], rows[-1]], rows[-8:]]
    batches = [id_batch(p, tokenizer.pad_token_id) for p in picks]
    if kind == "choice":  # the rows in pairs: each a question with two choices
        batches = [{k: torch.cat([v, v.flip(0)], 1).view(len(v), 2, -1) for k, v in b.items()} for b in batches]
    return batches


# ----- export and check --------------------------------------------------------------------------
def export_onnx(graph: Graph, example: dict[str, torch.Tensor], path: str, opset: int = OPSET) -> None:
    """Trace `graph` on `example` into the ONNX file `path`, every input and output axis but the hidden one
    dynamic."""
    axes = {0: "batch", 1: "choices", 2: "sequence"} if graph.kind == "choice" else {0: "batch", 1: "sequence"}
    names = outputs(graph.kind)
    dynamic = {name: axes for name in INPUTS}
    for name in names:
        dynamic[name] = (
            {0: "batch", 1: "choices"}
            if graph.kind == "choice"
            else ({0: "batch", 1: "sequence"} if _per_token(graph.kind, name) else {0: "batch"})
        )
    with warnings.catch_warnings(), torch.no_grad():
        # the TorchScript exporter's deprecation notice, and tracing's notes on Python values it keeps constant
        # (shape checks, which hold for every input of the graph)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                graph.eval(),
                tuple(example[k] for k in INPUTS),
                path,
                dynamo=False,
                input_names=list(INPUTS),
                output_names=list(names),
                dynamic_axes=dynamic,
                opset_version=opset,
                do_constant_folding=True,
            )
        except (RuntimeError, torch.onnx.OnnxExporterError) as e:  # an operator the opset cannot express, ...
            if write_problem(e, os.path.dirname(path)) is not None:  # a full disk: export() says so in one line
                raise
            raise ExportError(
                f"torch's ONNX exporter could not write the {graph.kind} graph at opset {opset}: "
                f"{str(e).strip().splitlines()[0][:300]}"
            ) from None


def outputs(kind: str) -> tuple[str, ...]:
    return OUTPUTS.get(kind, ("logits",))


def _per_token(kind: str, name: str) -> bool:
    return name in PER_TOKEN or kind in ("mlm", "tag")


def largest_difference(graph: Graph, path: str, batches: list[dict[str, torch.Tensor]]) -> float | None:
    """The largest |ONNX Runtime - bertkit| over every output of every batch (real tokens only), scaled by the
    output's largest |value| where that is above 1; None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in batches:
        with torch.no_grad():
            ours = graph(**batch)
        takes = {i.name for i in session.get_inputs()}  # a ModernBERT graph has no token_type_ids
        theirs = session.run(list(outputs(graph.kind)), {k: batch[k].numpy() for k in INPUTS if k in takes})
        real = batch["attention_mask"].bool()
        for name, a, b in zip(outputs(graph.kind), ours, theirs):
            a, b = a.float(), torch.from_numpy(b)
            if _per_token(graph.kind, name):
                a, b = a[real], b[real]
            worst = max(worst, float((a - b).abs().max()) / max(1.0, float(a.abs().max())))
    return worst


def copy_beside(model_dir: str, folder: str) -> None:
    """config.json, the tokenizer's files and the sentence-transformers files of `model_dir` into `folder`."""
    from .tokenizer import TOKENIZER_FILES

    for name in ("config.json", *TOKENIZER_FILES, *SENTENCE_TRANSFORMERS_FILES):
        source = os.path.join(model_dir, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(folder, name))
        elif os.path.isfile(source):
            shutil.copy2(source, os.path.join(folder, name))


def _exported(name: str) -> bool:
    """Whether an entry of --out is one an export writes."""
    from .tokenizer import TOKENIZER_FILES

    named = ("config.json", *TOKENIZER_FILES, *SENTENCE_TRANSFORMERS_FILES)
    return name.startswith((ONNX_FILE, OPTIMIZED_FILE)) or name in named


def export(
    model_dir: str, out: str, *, kind: str = "auto", opset: int = OPSET, overwrite: bool = False
) -> dict[str, Any]:
    """Export `model_dir` to the folder `out` (see the module's docstring); returns what was written and checked.
    The folder is built beside `out` and renamed into place once the check passed: `out` is never half written."""
    if not os.path.isdir(model_dir):
        what = "not a directory" if os.path.exists(model_dir) else "no such directory"
        raise ExportError(f"{model_dir}: {what}; pass a model folder (config.json and weights)")
    inputs: dict[str, str | None] = {"MODEL": model_dir}
    entries = check_out(
        out, ExportError, overwrite=overwrite, inputs=inputs, ours=_exported, what="an export", renamed=True
    )
    if entries and not overwrite:
        refuse_entries(out, entries)
    if importlib.util.find_spec("onnx") is None:
        raise ExportError(
            "bertkit export needs the onnx package (torch's exporter writes the graph with it): "
            "pip install onnx (a dependency of bertkit's that is missing here)"
        )
    kind = kind_of(model_dir) if kind == "auto" else kind
    check_kind(model_dir, kind)
    graph, tokenizer, pooling = load(model_dir, kind)
    config = cast("BertConfig", graph.model.config)  # nn.Module types no attributes: a BertFor* model holds it
    batches = sample_batches(tokenizer, kind, config.max_position_embeddings)
    building = start_building(out)
    try:
        write_folder(building, graph, batches, model_dir, pooling, opset)
        difference = largest_difference(graph, os.path.join(building, ONNX_FILE), batches)
        if difference is not None and difference > TOLERANCE:
            raise ExportError(
                f"{model_dir}: the exported graph's outputs differ from bertkit's by {difference:.2e} "
                f"(more than {TOLERANCE:g}); nothing was written to {out}"
            )
        optimized, unfused = write_optimized(building, graph, batches)
        put_in_place(building, out, bool(entries))
    except BaseException as e:
        shutil.rmtree(building, ignore_errors=True)  # this command's own unfinished folder
        problem = failed_write(e, os.path.dirname(building))
        if problem is not None:
            raise ExportWriteError(out, problem) from e
        raise
    return {
        "out": out,
        "kind": kind,
        "outputs": list(outputs(kind)),
        "difference": difference,
        "optimized": optimized,
        "unfused": unfused,  # why there is no fused graph ("" when there is one)
        "bytes": os.path.getsize(os.path.join(out, ONNX_FILE)),
    }


def refuse_entries(out: str, entries: list[str]) -> None:
    """Refuse an --out that holds something (without --overwrite): an earlier export is for --overwrite to move
    aside; anything else it would refuse too, so that is asked to go first."""
    foreign = [n for n in entries if not _exported(n)]
    shown = ", ".join(n[:80] + ("/" if os.path.isdir(os.path.join(out, n)) else "") for n in (foreign or entries)[:5])
    more = f" and {len(foreign or entries) - 5} more" if len(foreign or entries) > 5 else ""
    if foreign:
        raise ExportError(
            f"--out {out}: holds files that are not an export ({shown}{more}); pass an empty or new --out, or "
            "move them out first"
        )
    raise ExportError(
        f"--out {out}: holds an export ({shown}{more}); pass --overwrite to move it aside (to "
        "<out>.replaced-<time>), or a new --out"
    )


def start_building(out: str) -> str:
    """Make the hidden folder the export is built in, .NAME.exporting-PID@HOST beside `out`, after removing those
    of exports that were killed (clean_unfinished); an ExportWriteError when it cannot be made."""
    parent, name = os.path.dirname(os.path.abspath(out)), os.path.basename(os.path.normpath(out))
    building = os.path.join(parent, f".{name}.exporting-{os.getpid()}@{socket.gethostname()}")
    clean_unfinished(parent, name)
    try:
        os.makedirs(parent, exist_ok=True)
        os.makedirs(building)
    except OSError as e:
        problem = failed_write(e, parent)
        assert problem is not None, "failed_write names every OSError"
        raise ExportWriteError(out, problem) from None
    return building


def clean_unfinished(parent: str, name: str) -> None:
    """Remove the .NAME.exporting-PID[@HOST] folders in `parent` that exports killed before their rename left:
    only those whose process is gone from this host (files.alive), so an export still running is never disturbed."""
    host = socket.gethostname()
    try:
        found = os.listdir(parent)
    except OSError:  # no such folder yet, or one we cannot read: nothing of ours in it
        return
    for entry in found:
        match = re.fullmatch(rf"\.{re.escape(name)}\.exporting-(\d+)(?:@(.+))?", entry)
        if match is None or (match.group(2) or host) != host or alive(int(match.group(1))):
            continue
        path = os.path.join(parent, entry)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            print(f"removed {path}: an export that ended before it finished left it", file=sys.stderr)


def write_folder(
    building: str,
    graph: Graph,
    batches: list[dict[str, torch.Tensor]],
    model_dir: str,
    pooling: Pooling | None,
    opset: int,
) -> None:
    """The export's files in `building`: model.onnx, the model's config and tokenizer, the pooling it applies."""
    export_onnx(graph, batches[1], os.path.join(building, ONNX_FILE), opset)
    copy_beside(model_dir, building)
    if pooling is not None and not os.path.exists(os.path.join(building, "modules.json")):
        from .pooling import write_pooling

        config = cast("BertConfig", graph.model.config)  # nn.Module types no attributes: a BertModel holds it
        write_pooling(building, pooling, config.hidden_size)


def write_optimized(building: str, graph: Graph, batches: list[dict[str, torch.Tensor]]) -> tuple[float | None, str]:
    """OPTIMIZED_FILE in `building`: onnxruntime.transformers' optimizer's fusion of its model.onnx, kept when its
    outputs equal bertkit's to TOLERANCE as model.onnx's do. (the largest difference, "") when written, else
    (None, why not): no onnxruntime, a graph the optimizer cannot fuse, or a fusion that changes the answers."""
    if importlib.util.find_spec("onnxruntime") is None:
        return None, "onnxruntime is not installed"
    from onnxruntime.transformers.optimizer import optimize_model

    config = cast("BertConfig", graph.model.config)  # nn.Module types no attributes: a BertModel holds it
    path = os.path.join(building, OPTIMIZED_FILE)
    difference, why = None, ""
    try:
        fused = optimize_model(
            os.path.join(building, ONNX_FILE),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
        fused.save_model_to_file(path)
        difference = largest_difference(graph, path, batches)
    except OSError:
        raise  # a full disk: export() says so in one line
    except Exception as e:  # a graph the optimizer's patterns do not expect: model.onnx runs as it is
        said = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        why = f"ONNX Runtime's optimizer cannot fuse this graph ({said})"
    if difference is not None and difference > TOLERANCE:
        why = f"the fused graph's outputs differ from bertkit's by {difference:.1e} (more than {TOLERANCE:g})"
    if why:
        if os.path.exists(path):
            os.remove(path)
        return None, why
    return difference, ""


def put_in_place(building: str, out: str, replace: bool) -> None:
    """Rename the finished `building` to `out`, the earlier export there moved aside first when `replace`; another
    export that renamed its own into `out` meanwhile wins (an ExportError here)."""
    try:
        if replace:
            move_aside(out, what="the earlier export")
        elif os.path.isdir(out):
            os.rmdir(out)  # empty
        os.rename(building, out)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise ExportError(f"--out {out}: another export wrote it while this one ran; this one was not kept") from None


def failed_write(error: BaseException, folder: str) -> str | None:
    """A one-line reason (files.write_problem) for a write of the export that failed, else None: any OSError in
    writing (atomic_write's CheckpointError holds one), and the ONNX writer's full disk."""
    cause = error.__cause__ if isinstance(error, CheckpointError) else error
    if isinstance(cause, BertkitError) or not isinstance(cause, (OSError, RuntimeError)):
        return None
    problem = write_problem(cause, folder)
    if problem is not None or not isinstance(cause, OSError):
        return problem
    if cause.errno in (errno.ENOTDIR, errno.EEXIST):  # makedirs through a file
        return "a part of its path is a file, not a folder"
    return f"cannot write there ({cause.strerror or cause})"


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "main": "bertkit.commands.export:main",
        },
    )
