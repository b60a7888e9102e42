"""The typed side of `bertkit serve`: request models checked with the field named, /openapi.json (valid OpenAPI
3.1, read by openapi-spec-validator) and /docs made from the route table, and a route added from outside the
package with one model and one table entry."""

from __future__ import annotations

import pytest
from openapi_spec_validator import validate
from pydantic import Field
from starlette.testclient import TestClient

from bertkit.serve.app import build_app
from bertkit.serve.engine import Engine, InputProblem
from bertkit.serve.routes import ROUTES, Route
from bertkit.serve.schemas import Body, EmbedRequest, OpenAIEmbedRequest, PredictRequest, Texts, parse_body
from bertkit.serve.settings import ServeConfig


@pytest.mark.parametrize(
    "model, body, kind, says",
    [
        (EmbedRequest, {"inputs": ["a", 5]}, "wrong_type", "inputs[1]: input should be a valid string, got a number"),
        (EmbedRequest, {"inputs": []}, "empty_list", "'inputs' is an empty list"),
        (EmbedRequest, {"inputs": "a", "truncate": 1}, "wrong_type", "truncate: input should be a valid boolean"),
        (
            EmbedRequest,
            {"inputs": "a", "normalise": True},
            "wrong_type",
            "unknown field(s) normalise; this route takes",
        ),
        (EmbedRequest, {}, "wrong_type", "the body has no 'inputs'"),
        (
            OpenAIEmbedRequest,
            {"input": "a", "encoding_format": "int"},
            "wrong_type",
            "encoding_format: input should be 'float' or 'base64', got a string",
        ),
        (PredictRequest, {"inputs": [{"text": "a"}, 3]}, "wrong_type", "inputs[1]: input should be a valid"),
    ],
)
def test_a_refused_body_names_the_field(model, body, kind, says):
    with pytest.raises(InputProblem) as e:
        parse_body(model, body)
    assert (e.value.status, e.value.kind) == (422, kind) and says in str(e.value), str(e.value)


def test_an_empty_text_is_an_input_not_an_empty_list():
    assert parse_body(EmbedRequest, {"inputs": ""}).items() == ([""], True)  # the engine answers empty_input
    assert parse_body(PredictRequest, {"inputs": {"text": "好"}}).items() == ([{"text": "好"}], True)


class ShoutRequest(Body):
    """Each text upper-cased (a route this test adds)."""

    inputs: Texts = Field(description="a text, or a list of texts")


async def shout(engine, request: ShoutRequest, call):
    texts, single = request.items()
    loud = await call.tokenize(lambda items: [t.upper() for t in items], texts)
    return (loud[0] if single else loud), len(texts)


@pytest.fixture(scope="module")
def client(base_dir):
    routes = (*ROUTES, Route("/shout", ShoutRequest, shout, "the texts, upper-cased"))
    app, batcher, _ = build_app(Engine(base_dir), ServeConfig(model=base_dir, max_inputs=4), routes=routes)
    with TestClient(app) as test_client:
        yield test_client


def test_a_new_route_is_one_model_and_one_table_entry(client):
    assert client.post("/shout", json={"inputs": ["ab", "c"]}).json() == ["AB", "C"]
    assert client.post("/shout", json={"inputs": "ab"}).json() == "AB"
    refused = client.post("/shout", json={"inputs": 3})
    assert refused.status_code == 422 and refused.json()["type"] == "wrong_type" and "inputs" in refused.json()["error"]
    too_many = client.post("/shout", json={"inputs": ["a"] * 5})  # the server's limits hold for it too
    assert too_many.status_code == 413 and too_many.json()["type"] == "too_many_inputs"
    assert "/shout" in client.get("/openapi.json").json()["paths"] and "/shout" in client.get("/docs").text


def test_openapi_describes_every_route_and_is_valid(client):
    document = client.get("/openapi.json").json()
    validate(document)  # OpenAPI 3.1, as a client generator reads it
    paths = document["paths"]
    assert {r.path for r in ROUTES} <= set(paths) and {"/health", "/info", "/metrics", "/docs"} <= set(paths)
    schemas = document["components"]["schemas"]
    embed = schemas[
        paths["/embed"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    ]
    assert embed["required"] == ["inputs"] and embed["additionalProperties"] is False
    assert embed["properties"]["truncate"]["default"] is False
    openai = schemas["OpenAIEmbedRequest"]["properties"]["encoding_format"]
    assert openai["enum"] == ["float", "base64"]
    assert (
        paths["/embed"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
        == "#/components/schemas/Error"
    )


def test_docs_is_one_page_that_needs_nothing_from_elsewhere(client):
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert "<script" not in text and "http://" not in text and "https://" not in text
    for route in ROUTES:
        assert f"POST {route.path}" in text
    assert "top_k" in text and "curl -s localhost:8080/embed" in text
