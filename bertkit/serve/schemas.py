"""The bodies `bertkit serve`'s routes take, as pydantic models: checked on each request, described in /docs.

A request is checked against its route's model (a refusal names the field), and /openapi.json and /docs are
made from the same models.

    EmbedRequest        POST /embed            {"inputs": str | [str], "truncate": false}
    OpenAIEmbedRequest  POST /v1/embeddings    OpenAI's {"input": ..., "model", "encoding_format", ...}
    PredictRequest      POST /predict          {"inputs": str | object | [...], "truncate": false}
    FillMaskRequest     POST /fill-mask        {"inputs": str | [str], "top_k": 5}
    TokenizeRequest     POST /tokenize         {"inputs": str | [str], "add_special_tokens": true}
    RerankRequest       POST /rerank           TEI's {"query", "texts", ...}
    DecodeRequest       POST /decode           TEI's {"ids": [int] | [[int]], "skip_special_tokens": true}
    InferenceRequest    POST /                 the Hugging Face inference API's {"inputs", "parameters"}

Models are strict (true is not 1, "5" is not 5) and take no unknown field. `problem` turns pydantic's
errors into the server's refusal: 422 "wrong_type" naming the field, 422 "empty_list" for an empty list of
inputs. A route model names the field that holds its inputs (INPUTS): the server counts them (413 past
--max-inputs) and answers one input sent alone with one answer.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from .engine import FILL_MASK_MAX_TOP_K, InputProblem, json_type

Texts = StrictStr | Annotated[list[StrictStr], Field(min_length=1)]  # "" is an input (the engine says empty)
TEXTS = "a text, or a list of texts"


class Body(BaseModel):
    """What every route's body shares: strict types, no unknown field, the inputs in field INPUTS."""

    model_config = ConfigDict(extra="forbid", strict=True)
    INPUTS: ClassVar[str] = "inputs"

    def items(self) -> tuple[list, bool]:
        """(the inputs as a list, whether one input came alone)."""
        value = getattr(self, self.INPUTS)
        return ([value], True) if not isinstance(value, list) else (value, False)


class EmbedRequest(Body):
    """Sentence embeddings, pooled as the model folder says (a list of numbers per input); TEI's /embed fields."""

    inputs: Texts = Field(description=TEXTS)
    truncate: StrictBool = Field(
        False, description="cut an input longer than the model's limit instead of refusing it (413)"
    )
    truncation_direction: Literal["Right", "Left", "right", "left"] = Field(
        "Right", description="which end of a long input truncate cuts off (TEI's field)"
    )
    normalize: StrictBool | None = Field(
        None, description="L2-normalize the vectors; null: as the folder says (TEI's field; TEI's own default is true)"
    )
    prompt_name: StrictStr | None = Field(
        None, description="a prompt of the folder's config_sentence_transformers.json, put before each text"
    )

    def tei(self) -> bool:
        """Whether a TEI field asks for more than the plain /embed."""
        return self.truncation_direction.lower() == "left" or self.normalize is not None or self.prompt_name is not None


class OpenAIEmbedRequest(Body):
    """OpenAI's embeddings request (the `openai` client's embeddings.create); errors in OpenAI's shape."""

    INPUTS: ClassVar[str] = "input"
    input: (
        Texts
        | Annotated[list[StrictInt], Field(min_length=1)]
        | Annotated[list[Annotated[list[StrictInt], Field(min_length=1)]], Field(min_length=1)]
    ) = Field(description="a text, a list of texts, a list of token ids, or a list of such lists")
    model: StrictStr | None = Field(
        None, description="any name: the served model answers (its name is in the answer's model)"
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes"
    )
    dimensions: StrictInt | None = Field(
        None, description="the model's own size, or one it was trained to be cut to (MatryoshkaLoss)"
    )
    user: StrictStr | None = Field(None, description="accepted and ignored")

    def items(self) -> tuple[list, bool]:
        """A flat list of token ids is ONE input (OpenAI's tokenized input), counted as one against --max-inputs."""
        if isinstance(self.input, list) and isinstance(self.input[0], int):
            return [self.input], True
        return super().items()


class PredictRequest(Body):
    """The fine-tuned task's answer per input, as `bertkit predict` writes its rows."""

    inputs: StrictStr | dict[str, Any] | Annotated[list[StrictStr | dict[str, Any]], Field(min_length=1)] = Field(
        description="a text or an object of the task's fields (text / text_pair, question / context, ...), or a "
        "list of them"
    )
    truncate: StrictBool = Field(False, description="cut an input longer than --max-input-tokens")
    raw_scores: StrictBool = Field(False, description="a classifier's rows also hold their logits (TEI's field)")


class FillMaskRequest(Body):
    """The most likely tokens at each [MASK] (a model with its MLM head)."""

    inputs: Texts = Field(description="a text with [MASK] where tokens are missing, or a list of them")
    top_k: StrictInt = Field(5, ge=1, le=FILL_MASK_MAX_TOP_K, description="candidates per mask")


class TokenizeRequest(Body):
    """The tokens of each input, with ids and character offsets."""

    inputs: Texts = Field(description=TEXTS)
    add_special_tokens: StrictBool = Field(True, description="[CLS] and [SEP] around the tokens")


class RerankRequest(Body):
    """TEI's /rerank: the texts ordered by their relevance to the query, from a re-ranker (a classifier with one
    output, fine-tuned on (query, text) pairs)."""

    INPUTS: ClassVar[str] = "texts"
    query: StrictStr = Field(description="the query")
    texts: Annotated[list[StrictStr], Field(min_length=1)] = Field(description="the texts to rank")
    truncate: StrictBool = Field(False, description="cut a pair longer than --max-input-tokens")
    raw_scores: StrictBool = Field(False, description="the logit instead of its sigmoid")
    return_text: StrictBool = Field(False, description="each answer also holds its text")


class DecodeRequest(Body):
    """TEI's /decode: token ids back to text."""

    INPUTS: ClassVar[str] = "ids"
    ids: (
        Annotated[list[StrictInt], Field(min_length=1)]
        | Annotated[list[Annotated[list[StrictInt], Field(min_length=1)]], Field(min_length=1)]
    ) = Field(description="a list of token ids, or a list of such lists")
    skip_special_tokens: StrictBool = Field(True, description="leave out [CLS], [SEP], [PAD], ...")

    def items(self) -> tuple[list, bool]:
        return ([self.ids], True) if isinstance(self.ids[0], int) else (self.ids, False)


class InferenceRequest(Body):
    """The Hugging Face inference API's POST / (what huggingface_hub's InferenceClient(base_url=...) sends, and
    Text Embeddings Inference serves): the task is the one the body asks for (compat.hf_asked: no "parameters":
    feature extraction; {"source_sentence", "sentences"}: sentence similarity; a text with [MASK]: fill-mask;
    the parameters' names: their task), refused (400) when the served model has not that head."""

    inputs: StrictStr | dict[str, Any] | Annotated[list[StrictStr | dict[str, Any]], Field(min_length=1)] = Field(
        description="a text or a list of texts; QA {question, context}; sentence similarity {source_sentence, "
        "sentences}"
    )
    parameters: dict[str, Any] | None = Field(
        None, description="the task's parameters (top_k, aggregation_strategy, ...)"
    )
    normalize: StrictBool | None = Field(None, description="feature extraction: as /embed's")
    prompt_name: StrictStr | None = Field(None, description="feature extraction: as /embed's")
    truncate: StrictBool | None = Field(None, description="feature extraction: as /embed's")
    truncation_direction: Literal["Right", "Left", "right", "left"] | None = Field(
        None, description="feature extraction: as /embed's"
    )

    def items(self) -> tuple[list, bool]:
        if isinstance(self.inputs, dict) and isinstance(self.inputs.get("sentences"), list):
            return [self.inputs.get("source_sentence"), *self.inputs["sentences"]], True
        return super().items()


def parse_body(model: type[Body], body: dict) -> Body:
    """`body` (a JSON object) checked as `model`; an InputProblem saying what is wrong where, otherwise."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise problem(model, body, e) from None


def problem(model: type[Body], body: dict, error: ValidationError) -> InputProblem:
    """The refusal for the first field pydantic refused. A union (a text or a list of texts) has a complaint
    per branch: the one of the branch the value's JSON type takes, deepest first, says what is wrong."""
    errors = error.errors()
    field = str(errors[0]["loc"][0]) if errors[0]["loc"] else ""
    value = body.get(field)
    kind = "list" if isinstance(value, list) else "dict" if isinstance(value, dict) else None
    own = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]]
    first = max(
        own, key=lambda e: (kind is not None and len(e["loc"]) > 1 and str(e["loc"][1]).startswith(kind), len(e["loc"]))
    )
    takes = ", ".join(model.model_fields)
    if first["type"] == "extra_forbidden":
        unknown = sorted(set(body) - set(model.model_fields))
        return InputProblem(422, "wrong_type", f"unknown field(s) {', '.join(unknown)}; this route takes {takes}")
    if first["type"] == "missing":
        return InputProblem(
            422, "wrong_type", f'the body has no {field!r}: send {{"{field}": "a text"}} or a list of texts'
        )
    if field == model.INPUTS and first["type"] == "too_short":
        return InputProblem(422, "empty_list", f"{field!r} is an empty list: send at least one input")
    info = model.model_fields.get(field)
    where = "".join(f"[{p}]" if isinstance(p, int) else "" for p in first["loc"][1:])
    for p in first["loc"][1:]:  # the part of the value that was refused (inputs[1])
        if isinstance(p, int) and isinstance(value, list) and p < len(value):
            value = value[p]
    wants = info.description if info is not None and info.description else ""
    return InputProblem(
        422,
        "wrong_type",
        f"{field}{where}: {first['msg'].lower()}, got {json_type(value)} ({field}: {wants})"
        if wants
        else f"{field}{where}: {first['msg'].lower()}",
    )
