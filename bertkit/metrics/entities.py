"""Entities in tag sequences, and how well predicted tags find the true ones:

bio_entities    tags -> entities (type, start, end) by a scheme: "seqeval" (lenient, the default) or
                "IOB2" / "IOBES" (strict) as seqeval reads them in each mode, or "conlleval" (lenient)
                as conlleval.pl reads them
entity_report   entity-level precision, recall, F1 (micro over entities) and per type, equal to
                seqeval's classification_report (tests/tasks/test_metrics.py checks)
"""

from __future__ import annotations

from typing import Any

from .common import MetricError, check_choice, prf

ENTITY_SCHEMES = ("seqeval", "conlleval", "IOB2", "IOBES")
_STRICT_PREFIXES: dict[str, tuple[str, ...]] = {"IOB2": ("B", "I"), "IOBES": ("B", "I", "E", "S")}


def bio_entities(tags: list[str], scheme: str = "seqeval") -> list[tuple[str, int, int]]:
    """Entities (type, start, end exclusive) in `tags`, read by `scheme`:

    seqeval    (the default; lenient) BIO or IOBES tags as seqeval's default mode reads them: an I-
               after O or after another type starts an entity; B- always starts one (so B-PER B-PER is
               two); a change of type ends one; an entity still open at the end is closed there; E- and
               S- end one, S- starts one. M- (BMES tags, which seqeval does not know) reads as I-.
    conlleval  (lenient) as conlleval.pl (CoNLL 2000's script) reads them: its rules for B- / I- and
               for E- as IOE's chunk end (E-X E-X is two entities, E-X I-X two); any other prefix (S-,
               M-) starts or ends an entity only where the type changes, so B-PER S-PER is ONE entity
               there and two for seqeval. On BIO and IOE tags the two schemes agree.
    IOB2       (strict; seqeval's mode="strict", scheme=IOB2) an entity is B-X and the I-X right after
               it; an I- that continues no entity is no entity. E- / S- / M- tags are an error.
    IOBES      (strict; seqeval's mode="strict", scheme=IOBES) an entity is S-X, or B-X, I-X..., E-X;
               a B- without its E- is no entity. M- tags are an error."""
    check_choice("scheme", scheme, ENTITY_SCHEMES, " (BIO tags read strictly: 'IOB2')")
    if scheme in ("seqeval", "conlleval"):
        return _lenient_entities(tags, scheme)
    return _strict_entities(tags, scheme)


def _lenient_entities(tags: list[str], scheme: str) -> list[tuple[str, int, int]]:
    edges = _seqeval_edges if scheme == "seqeval" else _conlleval_edges
    entities, start, prev_tag, prev_type = [], None, "O", ""
    for i, full in enumerate(list(tags) + ["O"]):  # the final O closes an entity at the end
        tag, kind = _split_tag(full, i)
        if tag == "M" and scheme == "seqeval":
            tag = "I"
        ends, starts = edges(prev_tag, tag, prev_type, kind)
        if start is not None and ends:
            entities.append((prev_type, start, i))
            start = None
        if starts:
            start = i
        prev_tag, prev_type = tag, kind
    return entities


def entity_report(true_tags: list[list[str]], pred_tags: list[list[str]], scheme: str = "seqeval") -> dict[str, Any]:
    """{precision, recall, f1, accuracy (per token), n_true, n_pred, n_correct, scheme, per_type: {type:
    {precision, recall, f1, support}}}: an entity counts only when type, start and end all match; entities
    are read by `scheme` (see bio_entities: "seqeval", the lenient default, "conlleval" (conlleval.pl's reading),
    or strict "IOB2" / "IOBES"). Equal to seqeval's classification_report (default mode, or mode="strict" with the
    scheme)."""
    check_choice("scheme", scheme, ENTITY_SCHEMES, " (BIO tags read strictly: 'IOB2')")
    if len(true_tags) != len(pred_tags):
        raise MetricError(f"{len(true_tags)} true tag sequences but {len(pred_tags)} predicted ones")
    gold: set[tuple[int, str, int, int]] = set()  # (sequence, type, start, end)
    found: set[tuple[int, str, int, int]] = set()
    tokens = right = 0
    for s, (t, p) in enumerate(zip(true_tags, pred_tags)):
        if len(t) != len(p):
            raise MetricError(f"sequence {s}: {len(t)} true tags but {len(p)} predicted ones")
        gold.update((s, *e) for e in _sequence_entities(t, scheme, f"sequence {s}, true tags"))
        found.update((s, *e) for e in _sequence_entities(p, scheme, f"sequence {s}, predicted tags"))
        tokens += len(t)
        right += sum(a == b for a, b in zip(t, p))
    correct = gold & found
    types = sorted({e[1] for e in gold | found})
    per_type = {
        kind: prf(sum(e[1] == kind for e in correct), sum(e[1] == kind for e in found), sum(e[1] == kind for e in gold))
        for kind in types
    }
    total = prf(len(correct), len(found), len(gold))
    return {
        "precision": total["precision"],
        "recall": total["recall"],
        "f1": total["f1"],
        "accuracy": right / tokens if tokens else 0.0,
        "n_true": len(gold),
        "n_pred": len(found),
        "n_correct": len(correct),
        "scheme": scheme,
        "per_type": per_type,
    }


def _sequence_entities(tags: list[str], scheme: str, where: str) -> list[tuple[str, int, int]]:
    """bio_entities, with an error that names the sequence."""
    try:
        return bio_entities(tags, scheme)
    except MetricError as e:
        raise MetricError(f"{where}: {e}") from None


def _strict_entities(tags: list[str], scheme: str) -> list[tuple[str, int, int]]:
    """seqeval's strict mode: B-X I-X... (IOB2); S-X, or B-X I-X... E-X (IOBES); nothing else is an entity."""
    split = [_strict_tag(full, i, scheme) for i, full in enumerate(tags)]
    entities, i = [], 0
    while i < len(split):
        prefix, kind = split[i]
        if prefix != "B":  # an S- is an entity of its own; an I- or E- that no B- opened is none
            if prefix == "S":
                entities.append((kind, i, i + 1))
            i += 1
            continue
        j = i + 1
        while j < len(split) and split[j] == ("I", kind):
            j += 1
        if scheme == "IOB2":
            entities.append((kind, i, j))
        elif j < len(split) and split[j] == ("E", kind):
            j += 1
            entities.append((kind, i, j))
        i = j  # IOBES: a B- without its E- is dropped, and reading goes on at the tag that broke it
    return entities


def _strict_tag(full: str, position: int, scheme: str) -> tuple[str, str]:
    tag, kind = _split_tag(full, position)
    allowed = _STRICT_PREFIXES[scheme]
    if tag != "O" and full[0] not in allowed:
        names = ", ".join(f"{p}-" for p in allowed[:-1]) + f" and {allowed[-1]}-"
        other = "'IOBES' or 'seqeval'" if scheme == "IOB2" else "'seqeval'"
        raise MetricError(
            f"tag {position} is {full!r}: the {scheme} scheme has only O, {names} tags "
            f"(read these tags with scheme={other})"
        )
    return tag, kind


def _split_tag(full: str, position: int) -> tuple[str, str]:
    """(prefix, type) of a tag: ("O", "") or one of B I E S M and the rest."""
    if full == "O":
        return "O", ""
    if not isinstance(full, str) or len(full) < 3 or full[1] != "-" or full[0] not in "BIESM":
        raise MetricError(f"tag {position} is {full!r}: expected O or B-/I-/E-/S-/M- + a type, e.g. B-PER")
    return full[0], full[2:]


def _seqeval_edges(prev_tag: str, tag: str, prev_type: str, kind: str) -> tuple[bool, bool]:
    """(an entity ends before this tag, one starts at it), as seqeval's end_of_chunk and start_of_chunk."""
    new_type = prev_type != kind
    ends = (
        prev_tag in ("E", "S") or (prev_tag in ("B", "I") and tag in ("B", "S", "O")) or (prev_tag != "O" and new_type)
    )
    starts = tag in ("B", "S") or (tag in ("I", "E") and prev_tag in ("E", "S", "O")) or (tag != "O" and new_type)
    return ends, starts


_CONLLEVAL_ENDS = {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
_CONLLEVAL_STARTS = {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}


def _conlleval_edges(prev_tag: str, tag: str, prev_type: str, kind: str) -> tuple[bool, bool]:
    """(an entity ends before this tag, one starts at it), as conlleval.pl's endOfChunk and startOfChunk: its
    pairs of prefixes, and a change of type; a prefix outside its pairs (S-, M-) acts through the type alone."""
    new_type = prev_type != kind
    ends = (prev_tag, tag) in _CONLLEVAL_ENDS or (prev_tag != "O" and new_type)
    starts = (prev_tag, tag) in _CONLLEVAL_STARTS or (tag != "O" and new_type)
    return ends, starts
