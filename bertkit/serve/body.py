"""Reading a POST request's body within the server's limits, then as JSON: size 413, time 408, SIGTERM 503, 400.

    read_body(request, settings, guard) -> the body's bytes: within --body-timeout, at most --max-body-bytes (a
        larger body is read and dropped up to max(DRAIN_BYTES, 4x the limit) before the 413, so that clients
        that send the whole body before reading the answer see it)
    parse_json(raw) -> the request's JSON object

A refusal is an InputProblem; EndsConnection when the connection closes after it (the body was not read to its
end); ClientGone when the client went away (counted as status 499).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from .engine import InputProblem, json_type

if TYPE_CHECKING:
    from starlette.requests import Request

    from .connections import Guard
    from .settings import ServeConfig

DRAIN_BYTES = 16 << 20  # a body over --max-body-bytes is read (and dropped) up to max(this, 4x the limit)
# before the 413, so that clients that send the whole body before reading the answer (urllib, requests) see it


class ClientGone(Exception):
    """The client closed its connection before its answer (counted as status 499, as nginx does)."""


class EndsConnection(InputProblem):
    """A refusal after which the connection is closed: its body was not read to the end (too large, too slow)
    or the server is stopping."""


async def read_body(request: Request, settings: ServeConfig, guard: Guard) -> bytes:
    """The body, within --body-timeout (408) and --max-body-bytes (413)."""
    try:
        return await asyncio.wait_for(read(request, settings.max_body_bytes, guard), settings.body_timeout)
    except asyncio.TimeoutError:
        raise EndsConnection(
            408, "timeout", f"the body did not arrive within {settings.body_timeout:g} s (--body-timeout)"
        ) from None


async def read(request: Request, limit: int, guard: Guard) -> bytes:
    """The body; past `limit`, 413 once the body was read and dropped up to max(DRAIN_BYTES, 4x the limit) bytes
    (a client that sends Expect: 100-continue gets the 413 at once, and need not send the body)."""
    drain = max(DRAIN_BYTES, 4 * limit)
    header = request.headers.get("content-length", "")
    declared = int(header) if header.isdigit() else None
    if (
        declared is not None
        and declared > limit
        and (declared > drain or request.headers.get("expect", "").lower() == "100-continue")
    ):
        raise EndsConnection(
            413,
            "body_too_large",
            f"the body has {declared} bytes, more than the limit of {limit} (--max-body-bytes)",
        )
    body, size, more = bytearray(), 0, True
    while more and size <= drain:
        data, more = await chunk(request, guard)
        size += len(data)
        if size <= limit:
            body += data
    if size > limit:
        told = size if not more else declared or f"more than {size}"
        raise EndsConnection(
            413, "body_too_large", f"the body has {told} bytes, more than the limit of {limit} (--max-body-bytes)"
        )
    return bytes(body)


async def chunk(request: Request, guard: Guard) -> tuple[bytes, bool]:
    """The body's next chunk and whether more follows; ClientGone when the client went away, 503 when SIGTERM
    came before the body's end."""
    message = await request.receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    more = message.get("more_body", False)
    if more and guard.stopping:
        raise EndsConnection(
            503,
            "shutting_down",
            "the server is shutting down and the body was not complete; send the request again",
        )
    return message.get("body", b""), more


def parse_json(raw: bytes) -> dict:
    """The request's JSON object (UTF-8, valid JSON, no lone surrogate, an object)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputProblem(
            400,
            "invalid_utf8",
            f"the body is not valid UTF-8 (byte {raw[e.start]:#04x} at offset {e.start}); send JSON encoded as UTF-8",
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputProblem(
            400, "invalid_json", f"the body is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, nesting past the stack
        raise InputProblem(400, "invalid_json", f"the body is JSON this server cannot read: {e}") from None
    if "\\u" in text:  # an escaped lone surrogate (\ud800) is valid JSON but no text
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputProblem(
                400,
                "invalid_unicode",
                f"the body escapes a lone surrogate ({e.object[e.start]!r})"
                ", which is not a character; send text as UTF-8",
            ) from None
    if not isinstance(value, dict):
        raise InputProblem(
            422, "wrong_type", f'the body must be a JSON object like {{"inputs": ...}}, got {json_type(value)}'
        )
    return value
