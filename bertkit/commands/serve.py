"""`bertkit serve`: a model folder behind HTTP (bertkit/serve/ has the routes and the server)."""

from __future__ import annotations

from ..options import parse
from ..serve import run
from ..serve.settings import ServeConfig


def main(argv: list[str]) -> int:
    return run(parse(ServeConfig, argv, prog="bertkit serve"))
