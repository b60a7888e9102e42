"""The answers other clients expect, made from bertkit's own: pure functions, no HTTP (app.py's routes call them).

    huggingface_hub InferenceClient(base_url=...)   POST / {"inputs": ..., "parameters": {...}}; what the body
        asks for: hf_task; its parameters: hf_parameters; answers: hf_classification, hf_entities, hf_answer,
        hf_fill_mask, cosine_similarities (feature-extraction answers the vectors as /embed does)
    Text Embeddings Inference (TEI) routes           label_scores (/predict, raw_scores), tei_rerank, tei_tokens,
                                                     tei_info
    OpenAI's client (base_url=.../v1)                openai_embeddings, openai_error

What each client sends and parses was read from its source (huggingface_hub 0.36, openai 3.57) and TEI's
router (router/src/http/types.rs, server.rs). Rows are those of engine.py: `Engine.predictions` (a predict
row as `bertkit predict` writes it), `Engine.fill_mask_answers`, `Engine.tokenize`. A row of an input without
text ("error": "empty input") is refused here: these clients have no place for a row that says why.
"""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING

import numpy as np

from .engine import Engine, InputProblem

if TYPE_CHECKING:
    from .settings import ServeConfig

# bertkit's task -> the Hugging Face task a model with that head answers on POST / (choice has none)
HF_TASKS = {"classify": "text-classification", "tag": "token-classification", "qa": "question-answering"}
# the parameters bertkit honours, per Hugging Face task (feature-extraction's sit beside "inputs", as TEI's)
HF_PARAMETERS = {
    "feature-extraction": ("normalize", "prompt_name", "truncate", "truncation_direction"),
    "sentence-similarity": ("prompt_name", "truncate", "truncation_direction"),
    "text-classification": ("top_k",),
    "token-classification": ("aggregation_strategy", "ignore_labels"),
    "question-answering": (),
    "fill-mask": ("top_k",),
}
AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' token-classification strategies


# ----- huggingface_hub's InferenceClient: POST / -----------------------------------------------------------------
def hf_task(body: dict, task: str | None, mlm: bool) -> str:
    """Which task a POST / body asks of this model. huggingface_hub's feature_extraction sends its parameters
    beside "inputs" and never a "parameters" object, while every other task method sends one (maybe empty): a
    body without "parameters" is feature extraction, whatever the model (every bertkit model embeds). With it:
    {"inputs": {"source_sentence", "sentences"}} is sentence similarity; a task head answers with its head (as
    TEI answers with a classifier's); an MLM fills masks; any other model: feature extraction."""
    inputs = body.get("inputs")
    if isinstance(inputs, dict) and "source_sentence" in inputs:
        return "sentence-similarity"
    if "parameters" not in body:
        return "feature-extraction"
    if task in HF_TASKS:
        return HF_TASKS[task]
    return "fill-mask" if mlm else "feature-extraction"


def hf_parameters(task: str, body: dict) -> dict:
    """The parameters of a POST / body for `task` (feature-extraction: the keys beside "inputs"; the others: the
    "parameters" object; null values dropped, as the client drops them); one bertkit does not honour: 422."""
    if task == "feature-extraction":
        given = {k: v for k, v in body.items() if k != "inputs"}
    else:
        given = body.get("parameters") or {}
        if not isinstance(given, dict):
            raise InputProblem(422, "wrong_type", f"'parameters' must be an object, got {type(given).__name__}")
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(HF_PARAMETERS[task]))
    if unknown:
        where = "the body" if task == "feature-extraction" else "'parameters'"
        raise InputProblem(
            422,
            "wrong_type",
            f"{where} has {', '.join(unknown)}, which {task} here does not take; "
            f"it takes {', '.join(HF_PARAMETERS[task]) or 'none'}",
        )
    top_k = given.get("top_k", 1)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise InputProblem(422, "wrong_type", f"'top_k' must be a whole number of at least 1, got {top_k!r}")
    return given


def hf_classification(row: dict, top_k: int | None = None) -> list[dict]:
    """text_classification's answer for one input: every label with its probability, best first (top_k: the
    first k). A regression row's one number is its only "label" (LABEL_0, as transformers names it)."""
    _answered(row)
    if "probabilities" not in row:  # regression: {"text", "score"}
        return [{"label": "LABEL_0", "score": row["score"]}][:top_k]
    return label_scores(list(row["probabilities"]), list(row["probabilities"].values()), top_k)


def label_scores(labels: list[str], scores: list[float], top_k: int | None = None) -> list[dict]:
    """[{"label", "score"}] best first, ties in label order (TEI's /predict: probabilities, or logits with
    raw_scores); top_k: the first k."""
    order = sorted(range(len(labels)), key=lambda i: -scores[i])
    return [{"label": labels[i], "score": scores[i]} for i in order][:top_k]


def hf_entities(
    row: dict,
    word_scores: list[float | None] | None,
    strategy: str | None = None,
    ignore_labels: list[str] | None = None,
) -> list[dict]:
    """token_classification's answer for one tag row (Engine.predictions) and its words' tag probabilities
    (Engine.tag_scores). Grouped (strategy simple / first / average / max, the default "simple"): the row's
    entities as {"entity_group", "score", "word", "start", "end"}, score the mean over the entity's words;
    "none": each word whose tag is not "O" as {"entity", "score", "word", "start", "end"}. start / end are
    character offsets into the text (a plain string is tagged per character, so they index the string sent);
    ignore_labels (default ["O"]) leaves out entity types (grouped) or tags ("none")."""
    _answered(row)
    assert word_scores is not None  # an input with text has its words' scores (Engine.tag_scores)
    strategy = "simple" if strategy is None else strategy
    if strategy not in AGGREGATIONS:
        raise InputProblem(
            422, "wrong_type", f"'aggregation_strategy' must be one of {', '.join(AGGREGATIONS)}, got {strategy!r}"
        )
    ignore = {"O"} if ignore_labels is None else set(ignore_labels)
    starts, at = [], 0  # each word's first character in the joined text, as the tag task counts them
    for token in row["tokens"]:
        starts.append(at)
        at += len(token)
    if strategy == "none":
        return [
            {"entity": tag, "score": word_scores[j], "word": token, "start": starts[j], "end": starts[j] + len(token)}
            for j, (token, tag) in enumerate(zip(row["tokens"], row["tags"]))
            if tag not in ignore
        ]
    out = []
    for e in row["entities"]:
        if e["type"] in ignore:
            continue
        scores = [
            score for j, s in enumerate(starts) if e["start"] <= s < e["end"] and (score := word_scores[j]) is not None
        ]
        out.append(
            {
                "entity_group": e["type"],
                "score": sum(scores) / len(scores) if scores else 0.0,
                "word": e["text"],
                "start": e["start"],
                "end": e["end"],
            }
        )
    return out


def hf_answer(row: dict) -> dict:
    """question_answering's answer for one qa row: the best span as character offsets into the context; score is
    bertkit's (start + end logit), not a probability. No valid span: answer "", start = end = 0, score 0.0
    (transformers' impossible answer)."""
    _answered(row)
    if row["start"] < 0:
        return {"answer": "", "score": 0.0, "start": 0, "end": 0}
    return {"answer": row["answer"], "score": row["score"], "start": row["start"], "end": row["end"]}


def hf_fill_mask(per_mask: list[list[dict]]) -> list:
    """fill_mask's answer for one input (Engine.fill_mask_answers' per-[MASK] candidates): {"sequence", "score",
    "token" (the id), "token_str"}; one [MASK]: its list, several: a list per [MASK] (as transformers' pipeline)."""
    answers = [
        [
            {"sequence": c["sequence"], "score": c["score"], "token": c["token_id"], "token_str": c["token"]}
            for c in candidates
        ]
        for candidates in per_mask
    ]
    return answers[0] if len(answers) == 1 else answers


def cosine_similarities(vectors: list[list[float]]) -> list[float]:
    """sentence_similarity's answer: the cosine of the first vector (source_sentence) with each of the others."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1).clip(min=1e-12)
    return (v[1:] @ v[0] / (norms[1:] * norms[0])).tolist()


# ----- Text Embeddings Inference's routes ------------------------------------------------------------------------
def tei_rerank(rows: list[dict], texts: list[str], raw_scores: bool = False, return_text: bool = False) -> list[dict]:
    """/rerank's answer: [{"index", "score", "text"?}] best first (ties in input order). rows: the predict rows of
    (query, text) pairs, from a classifier with one output (a cross-encoder, bertkit's regression): score is that
    logit with raw_scores, else its sigmoid (as TEI). A classifier with labels has no one relevance score: 400."""
    ranks = []
    for i, (row, text) in enumerate(zip(rows, texts)):
        _answered(row)
        if "probabilities" in row:
            raise InputProblem(
                400,
                "not_supported",
                "/rerank needs a re-ranker: a classifier with one output (a "
                f"cross-encoder, finetuned with problem_type regression); this one has labels "
                f"{', '.join(row['probabilities'])}",
            )
        score = row["score"] if raw_scores else 1 / (1 + math.exp(-row["score"]))
        ranks.append({"index": i, "score": score, **({"text": text} if return_text else {})})
    return sorted(ranks, key=lambda r: -r["score"])


def tei_tokens(tokens: list[dict]) -> list[dict]:
    """/tokenize's tokens of one input (Engine.tokenize) as TEI writes them: {"id", "text", "special", "start",
    "stop"}, a special token's text its token ("[CLS]"), not ""."""
    return [
        {
            "id": t["id"],
            "text": t["token"] if t["special"] else t["text"],
            "special": t["special"],
            "start": t["start"],
            "stop": t["stop"],
        }
        for t in tokens
    ]


def tei_info(engine: Engine, settings: ServeConfig, version: str) -> dict:
    """TEI's /info fields for `engine` served with `settings` (a ServeConfig), for clients that read them (e.g.
    InferenceClient.get_endpoint_info); bertkit's /info may hold them beside its own."""
    if engine.task is not None and engine.task.labelled_outputs:  # classify, tag; regression: a re-ranker
        assert engine.task_model is not None  # loaded with its task
        config = engine.task_model.config
        assert config.label2id is not None  # BertConfig derives it from id2label
        labels = {"id2label": {str(i): n for i, n in config.id2label.items()}, "label2id": dict(config.label2id)}
        kind: dict[str, dict] = {"reranker" if config.problem_type == "regression" else "classifier": labels}
    else:  # TEI has no other kind: every bertkit model serves /embed
        kind = {"embedding": {"pooling": engine.encoder.pooling.mode}}
    return {
        "model_id": engine.name,
        "model_sha": None,
        "model_dtype": engine.quantize or "float32",
        "model_type": kind,
        "max_concurrent_requests": settings.max_queue,
        "max_input_length": engine.embed_limit,
        "max_batch_tokens": settings.max_batch_tokens,
        "max_batch_requests": None,
        "max_client_batch_size": settings.max_inputs,
        "auto_truncate": False,
        "tokenization_workers": 1,
        "version": version,
        "sha": None,
        "docker_label": None,
    }


# ----- OpenAI's client: /v1/embeddings ---------------------------------------------------------------------------
def openai_embeddings(vectors: list[list[float]], encoding_format: str, model: str, tokens: int) -> dict:
    """/v1/embeddings' answer. base64: each vector's float32 little-endian bytes (the client decodes them as
    float32; it asks for base64 when the caller names no format)."""

    def packed(v: list[float]) -> list[float] | str:
        return v if encoding_format == "float" else base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": packed(v)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def openai_error(status: int, message: str, kind: str, param: str | None = None) -> dict:
    """An error body in OpenAI's shape: the client's exception text is "Error code: N - <message>" only when the
    body is {"error": {"message": ...}}; its .code is bertkit's kind, .type OpenAI's word for the status."""
    return {
        "error": {
            "message": message,
            "type": "server_error" if status >= 500 else "invalid_request_error",
            "param": param,
            "code": kind,
        }
    }


def _answered(row: dict) -> None:
    """A predict row of an input without text names why and has no prediction: refused (422 empty_input)."""
    if row.get("error"):
        raise InputProblem(
            422,
            "empty_input",
            f"an input has no text ({row['error']}: only whitespace, zero-width "
            "or control characters): there is nothing to predict on",
        )
