"""`bertkit export`: a model folder as an ONNX graph beside its config and tokenizer."""

from __future__ import annotations

import os
import sys

from ..export import ONNX_FILE, OPTIMIZED_FILE, ExportConfig, export
from ..options import parse


def main(argv: list[str]) -> int:
    cfg = parse(ExportConfig, argv, prog="bertkit export")
    done = export(cfg.model, cfg.out, kind=cfg.kind, opset=cfg.opset, overwrite=cfg.overwrite)
    checked = (
        "not checked: onnxruntime is not installed (pip install onnxruntime)"
        if done["difference"] is None
        else f"ONNX Runtime's outputs equal bertkit's (largest difference {done['difference']:.1e})"
    )
    fused = (
        f"; ONNX Runtime's fused graph beside it ({OPTIMIZED_FILE}, largest difference {done['optimized']:.1e})"
        if done["optimized"] is not None
        else f"; no fused graph ({OPTIMIZED_FILE}): {done['unfused']}; the engines run {ONNX_FILE}"
    )
    print(
        f"exported {cfg.model} ({done['kind']}: {', '.join(done['outputs'])}) -> {os.path.join(cfg.out, ONNX_FILE)} "
        f"({done['bytes'] / 2**20:.1f} MiB); {checked}{fused}",
        file=sys.stderr,
    )
    return 0
