"""/openapi.json and /docs of `bertkit serve`, made from the route table and its request models.

Made from routes.py's table and schemas.py's models, they cannot drift from what the server checks.

    openapi(routes, get_routes, title, version) -> the OpenAPI 3.1 document (a dict)
    docs_html(document) -> one self-contained HTML page: every route, its fields, a curl line (no script,
                           nothing fetched from elsewhere: it works where the server has no internet)
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic.json_schema import models_json_schema

if TYPE_CHECKING:
    from .routes import Route

ERROR = {
    "type": "object",
    "required": ["error", "type"],
    "properties": {
        "error": {"type": "string", "description": "what was wrong, in a sentence"},
        "type": {
            "type": "string",
            "description": "a word to switch on: wrong_type, empty_list, too_long, too_many_inputs, overloaded, ...",
        },
    },
}
REFUSALS = {
    "400": "not JSON / not UTF-8, or the model cannot answer this route",
    "413": "too large: the body, the number of inputs or an input's tokens",
    "422": "a field of the wrong type or value",
    "429": "the server's queue is full",
    "500": "the model failed (non_finite_output, model_error)",
}


def openapi(routes: Sequence[Route], get_routes: dict[str, str], title: str, version: str) -> dict:
    """The OpenAPI document of POST `routes` (routes.Route) and GET `get_routes` ({path: summary})."""
    refs, schemas = models_json_schema(
        [(r.request, "validation") for r in routes], ref_template="#/components/schemas/{model}"
    )
    components = {**schemas.get("$defs", {}), "Error": ERROR}
    paths: dict = {}
    for r in routes:
        errors = {
            code: {
                "description": text,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
            for code, text in REFUSALS.items()
        }
        paths[r.path] = {
            "post": {
                "summary": r.summary,
                "description": (r.request.__doc__ or "").strip(),
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": refs[(r.request, "validation")]}},
                },
                "responses": {"200": {"description": r.summary}, **errors},
            }
        }
    for path, summary in get_routes.items():
        paths[path] = {"get": {"summary": summary, "responses": {"200": {"description": summary}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
    }


def docs_html(document: dict) -> str:
    """A page listing every route of `document` with its body's fields and a curl line."""
    schemas = document["components"]["schemas"]
    parts = [
        f"<h1>{html.escape(document['info']['title'])}</h1>",
        "<p>Every route answers JSON. The machine-readable description: <a href='/openapi.json'>"
        '/openapi.json</a>. A refusal is <code>{"error": message, "type": kind}</code> with a 4xx status.</p>',
    ]
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            parts.append(
                f"<h2><code>{method.upper()} {html.escape(path)}</code></h2>"
                f"<p>{html.escape(op.get('description') or op['summary'])}</p>"
            )
            body = op.get("requestBody")
            if body is None:
                continue
            ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            required = schemas[ref].get("required", [])
            rows = [
                f"<tr><td><code>{html.escape(name)}</code>{' (required)' if name in required else ''}</td>"
                f"<td>{html.escape(field.get('description', ''))}</td><td><code>"
                f"{html.escape(json.dumps(field['default']) if 'default' in field else '')}</code></td></tr>"
                for name, field in schemas[ref]["properties"].items()
            ]
            parts.append("<table><tr><th>field</th><th>what</th><th>default</th></tr>" + "".join(rows) + "</table>")
            example = {
                name: "今天天气很[MASK]。" if path == "/fill-mask" else "今天天气很好"
                for name in schemas[ref].get("required", [])
            }
            parts.append(
                f"<pre>curl -s localhost:8080{html.escape(path)} -d "
                f"'{html.escape(json.dumps(example, ensure_ascii=False))}'</pre>"
            )
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(document['info']['title'])}"
        f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )
