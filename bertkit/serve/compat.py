"""The answers other clients expect, made from bertkit's own: pure functions, no HTTP (routes.py's handlers call them).

    huggingface_hub InferenceClient(base_url=...)   POST / {"inputs": ..., "parameters": {...}}; what the body
        asks for: hf_asked, and hf_task (a task the model has not: 400); its parameters: hf_parameters; answers:
        hf_classification, hf_entities, hf_answer, hf_fill_mask, cosine_similarities (feature-extraction answers
        the vectors as /embed does)
    Text Embeddings Inference (TEI) routes           label_scores (/predict, raw_scores), tei_rerank, tei_tokens,
                                                     tei_info
    OpenAI's client (base_url=.../v1)                openai_embeddings, openai_error

What each client sends and parses was read from its source (huggingface_hub 0.36, openai 3.57) and TEI's
router (router/src/http/types.rs, server.rs). Rows are those of engine.py: `Engine.predictions` (a predict
row as `bertkit predict` writes it), `Engine.fill_mask_answers`, `Engine.tokenize`. A row of an input without
text ("error": "empty input") is refused here: these clients have no place for a row that says why.

Which task POST / runs. InferenceClient(base_url=...) posts every task to the same URL with the same headers
(no task in either): only the body tells them apart, read in this order (hf_asked):
    inputs that are objects   {"source_sentence", "sentences"}: sentence-similarity; {"question", "context"}:
                              question-answering; {"query", "table"}: table-question-answering
    no "parameters"           feature-extraction (the only task method that sends its parameters beside
                              "inputs", and none inside "parameters")
    "parameters" {...}        the tasks whose method sends every name it holds (HF_CLIENT_PARAMETERS):
                              aggregation_strategy is token-classification, candidate_labels zero-shot, ...;
                              a text holding the mask token ([MASK]) is fill-mask when fill-mask sends those
                              names, and a body with no [MASK] is not fill-mask unless only fill-mask sends them
The model answers the first of those tasks it has; none: 400 "not_supported" naming the task asked, the model's
head and the tasks its POST / answers. Every model answers feature-extraction and sentence-similarity (its
encoder embeds, as on /embed and /v1/embeddings); a classifier text-classification, a tagger
token-classification, a qa model question-answering, a model with its MLM head fill-mask; a choice model no more.
What no server can tell apart: text_classification, token_classification, text_generation, summarization, ...
called without parameters all send {"inputs": a text, "parameters": {}}: that body is the served head's task (a
classifier classifies, a tagger tags), and a model without one of those heads refuses it.
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
# what a body's inputs that are objects hold, per Hugging Face task (huggingface_hub's task methods)
HF_INPUT_KEYS = {
    "sentence-similarity": ("source_sentence", "sentences"),
    "question-answering": ("question", "context"),
    "table-question-answering": ("query", "table"),
}
# the names each huggingface_hub task method that posts a text may send in "parameters" (its keyword arguments)
HF_CLIENT_PARAMETERS = {
    "fill-mask": ("targets", "top_k"),
    "text-classification": ("function_to_apply", "top_k"),
    "token-classification": ("aggregation_strategy", "ignore_labels", "stride"),
    "zero-shot-classification": ("candidate_labels", "multi_label", "hypothesis_template"),
    "summarization": ("clean_up_tokenization_spaces", "generate_parameters", "truncation"),
    "translation": ("src_lang", "tgt_lang", "clean_up_tokenization_spaces", "truncation", "generate_parameters"),
    "text-generation": (
        *("adapter_id", "best_of", "decoder_input_details", "details", "do_sample", "frequency_penalty", "grammar"),
        *("max_new_tokens", "repetition_penalty", "return_full_text", "seed", "stop", "temperature", "top_k"),
        *("top_n_tokens", "top_p", "truncate", "typical_p", "watermark"),
    ),
    "text-to-image": (
        *("negative_prompt", "height", "width", "num_inference_steps", "guidance_scale", "scheduler", "seed"),
    ),
    "text-to-speech": (
        *("do_sample", "early_stopping", "epsilon_cutoff", "eta_cutoff", "max_length", "max_new_tokens"),
        *("min_length", "min_new_tokens", "num_beam_groups", "num_beams", "penalty_alpha", "temperature"),
        *("top_k", "top_p", "typical_p", "use_cache"),
    ),
}
# how a client asks POST / for each task bertkit answers (a refusal lists them; {mask}: the model's mask token)
HF_ASKED_BY = {
    "feature-extraction": 'a body without "parameters"',
    "sentence-similarity": 'inputs {"source_sentence", "sentences"}',
    "text-classification": 'a text and "parameters"',
    "token-classification": 'a text and "parameters"',
    "question-answering": 'inputs {"question", "context"}',
    "fill-mask": "a text with {mask}",
}
AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' token-classification strategies


# ----- huggingface_hub's InferenceClient: POST / -----------------------------------------------------------------
def hf_asked(body: dict, mask_token: str) -> tuple[list[str], str]:
    """The Hugging Face tasks a POST / body may ask for (the module's docstring has the rules), and what in the
    body says so, in words for a refusal."""
    inputs = body.get("inputs")
    items = inputs if isinstance(inputs, list) else [inputs]
    keys = {k for x in items if isinstance(x, dict) for k in x}
    for task, shape in HF_INPUT_KEYS.items():
        if keys & set(shape):
            return [task], f"inputs with {', '.join(sorted(keys & set(shape)))}"
    if "parameters" not in body:
        return ["feature-extraction"], 'a body without "parameters"'
    given = body["parameters"] if isinstance(body["parameters"], dict) else {}
    names = {k for k, v in given.items() if v is not None}  # the client leaves out what the caller did not set
    tasks = [t for t, sent in HF_CLIENT_PARAMETERS.items() if names <= set(sent)] or list(HF_CLIENT_PARAMETERS)
    why = f"'parameters' holding {listed(names)}" if names else "'parameters' empty"
    if "fill-mask" in tasks and any(isinstance(x, str) and mask_token in x for x in items):
        return ["fill-mask"], f"a text with {mask_token} and {why}"
    if len(tasks) > 1 and "fill-mask" in tasks:
        return [t for t in tasks if t != "fill-mask"], f"a text without {mask_token} and {why}"
    return tasks, f"a text and {why}"


def listed(names: set[str] | list[str], most: int = 5, chars: int = 40) -> str:
    """Names a client sent, for a message: sorted, at most `most` of them, each cut at `chars` characters."""
    shown = [n if len(n) <= chars else n[:chars] + "..." for n in sorted(names)[:most]]
    return ", ".join(shown) + (f" (and {len(names) - most} more)" if len(names) > most else "")


def hf_served(engine: Engine) -> list[str]:
    """The Hugging Face tasks the served model answers on POST /: every model embeds; its head adds one."""
    head = [HF_TASKS[engine.task.name]] if engine.task is not None and engine.task.name in HF_TASKS else []
    return ["feature-extraction", "sentence-similarity", *head, *(["fill-mask"] if engine.mlm is not None else [])]


def hf_task(body: dict, engine: Engine) -> str:
    """The task a POST / body asks of the served model: the first task hf_asked reads that the model answers;
    none: 400 not_supported naming the task asked, the model's head and what its POST / answers."""
    mask = engine.tokenizer.mask_token
    asked, why = hf_asked(body, mask)
    served = hf_served(engine)
    for task in asked:
        if task in served:
            return task
    tasks = asked[0] if len(asked) == 1 else f"one of {', '.join(asked)}"
    answers = "; ".join(f"{t} ({HF_ASKED_BY[t].replace('{mask}', mask)})" for t in served)
    raise InputProblem(
        400,
        "not_supported",
        f"POST / asks for {tasks} ({why}), which this model does not do; {engine.described}, whose POST / answers "
        f"{answers}" + ("; /predict answers its task for any input" if engine.task is not None else ""),
    )


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
            f"{where} has {listed(unknown)}, which {task} here does not take; "
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
        kind: dict[str, dict] = {"reranker" if engine.reranker is not None else "classifier": labels}
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
def shortened(vectors: list[list[float]], dim: int, normalize: bool) -> list[list[float]]:
    """The first `dim` numbers of each vector (a Matryoshka-trained model's shorter embedding), L2-normalized again
    when the model's vectors are normalized (as OpenAI answers `dimensions`)."""
    cut = np.asarray(vectors, dtype=np.float32)[:, :dim]
    if normalize:
        cut = cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
    return cut.tolist()


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
