"""`bertkit prepare`: tokenize a corpus once into a dataset folder that pretraining reads by memory map."""

from __future__ import annotations

import sys

from ..data.prepare import PrepareConfig, prepare, usable_workers
from ..errors import stop_note
from ..options import parse


def main(argv: list[str]) -> int:
    cfg = parse(PrepareConfig, argv, prog="bertkit prepare")
    say = lambda *a: print(*a, file=sys.stderr)  # noqa: E731
    with stop_note(f"nothing was written to --out {cfg.out} (run it again to start over)"):
        result = prepare(
            cfg.corpus,
            cfg.tokenizer,
            cfg.out,
            doc_sep=cfg.doc_sep,
            text_field=cfg.text_field,
            wwm=cfg.wwm,
            heldout=cfg.heldout,
            seed=cfg.seed,
            nsp_seq_len=cfg.nsp_seq_len,
            workers=cfg.workers,
            overwrite=cfg.overwrite,
            progress=cfg.progress,
            say=say,
        )
    m = result.manifest
    if not result.reused:
        train, held = m["splits"]["train"], m["splits"]["heldout"]
        rate = result.text_bytes / 1e6 / max(result.seconds, 1e-9)
        print(
            f"{cfg.out}: {train['documents']:,} documents ({train['tokens']:,} tokens) to train on, "
            f"{held['documents']:,} ({held['tokens']:,} tokens) held out; {result.text_bytes / 1e6:,.1f} MB of text "
            f"in {result.seconds:,.1f} s ({rate:.2f} MB/s, {usable_workers(cfg.workers, lambda *a: None)} workers)"
        )
        if m["empty_documents"]:
            print(f"{m['empty_documents']:,} documents gave no token and were left out")
    return 0
