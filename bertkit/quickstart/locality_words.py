"""What the report says about the heads: what initialisation set and what training changed, in words that follow
the numbers (locality.py measures them)."""

from __future__ import annotations

CHANGE = 0.05  # a share of attention that moved less than this from step 0 to the end is "about the same"
# a neighbour's offset, in words
OFFSET_WORDS = {-2: "two tokens back", -1: "the previous token", 1: "the next token", 2: "two tokens ahead"}


def head_groups(locality: dict) -> dict[str, dict]:
    """{"seeded": the heads the recipe pointed at a neighbour (their mean share on it), "others": the rest (the most
    one of them puts on one neighbour)}, each at step 0 and after pretraining; a group without heads is left out."""
    groups = {}
    for kind, seeded, name, summarise in (
        ("seeded", True, "seeded heads, mean", lambda xs: sum(xs) / len(xs)),
        ("others", False, "other heads, the most local", max),
    ):
        heads = [h for h in locality["heads"] if h["seeded"] == seeded]
        if heads:
            groups[kind] = {
                "name": f"the {len(heads)} {name}",
                "heads": heads,
                "step0": summarise([h["step0"] for h in heads]),
                "final": summarise([h["final"] for h in heads]),
            }
    return groups


def which_heads(heads: list[dict]) -> str:
    """The seeded heads in words, layers with the same heads together: "layers 0-1: every head; layers 2-3: heads
    0-1"."""
    per_layer: dict[int, tuple[list[int], int]] = {}
    for h in heads:
        chosen, total = per_layer.get(h["layer"], ([], 0))
        per_layer[h["layer"]] = (chosen + [h["head"]] if h["seeded"] else chosen, total + 1)
    parts: list[tuple[list[int], str]] = []
    for layer, (chosen, total) in sorted(per_layer.items()):
        if not chosen:
            continue
        words = "every head" if len(chosen) == total else "heads " + span(chosen)
        if parts and parts[-1][1] == words and parts[-1][0][-1] == layer - 1:
            parts[-1][0].append(layer)
        else:
            parts.append(([layer], words))
    return "; ".join(f"{'layer' if len(ls) == 1 else 'layers'} {span(ls)}: {words}" for ls, words in parts)


def span(numbers: list[int]) -> str:
    """0-3 for a run of consecutive numbers, else 0, 2, 3."""
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)


def moved(before: float, after: float) -> str:
    """What training did to a share of attention, in words (CHANGE: the least that counts as a move)."""
    if after - before > CHANGE:
        return f"training sharpened it to {after:.2f}"
    if before - after > CHANGE:
        return f"training loosened it to {after:.2f}"
    return f"training left it about there ({after:.2f})"


def locality_lines(summary: dict) -> list[str]:
    """Report lines: which heads initialisation pointed at a neighbour, those and the others at step 0 and after
    pretraining (head_groups), and sentences that credit initialisation or training as the numbers say."""
    locality = summary.get("locality")
    if not locality:
        return ["(No full held-out row to measure the heads on at step 0.)", ""]
    heads = locality["heads"]
    groups = head_groups(locality)
    intro = (
        f"The `local` recipe points {len(groups['seeded']['heads'])} of the {len(heads)} heads at one neighbour "
        f"before any training ({which_heads(heads)}; `bertkit/init.py`); the others start as BERT's initialisation "
        "leaves them."
        if "seeded" in groups
        else "No head was pointed at a neighbour before training."
    )
    rows = {
        "seeded": "mean attention on the neighbour each was pointed at",
        "others": "the most one puts on one neighbour",
    }
    return [
        f"**What initialisation set, and what training changed.** {intro} Measured on {locality['rows']} held-out "
        f"rows of {locality['tokens']} tokens (attention spread evenly: {1 / locality['tokens']:.3f} per token):",
        "",
        f"| heads | step 0 (initialisation) | after {summary['pretrain_steps']} steps (training) |",
        "|---|---:|---:|",
        *[
            f"| the {len(g['heads'])} {'seeded' if kind == 'seeded' else 'other'} heads: {rows[kind]} "
            f"| {g['step0']:.2f} | {g['final']:.2f} |"
            for kind, g in groups.items()
        ],
        "",
        " ".join(locality_sentences(groups)),
        "",
    ]


def locality_sentences(groups: dict[str, dict]) -> list[str]:
    """What initialisation set in the seeded heads and what training did to them; whether training made any other
    head local (its most local one, moved by more than CHANGE)."""
    sentences = []
    if "seeded" in groups:
        before, after = groups["seeded"]["step0"], groups["seeded"]["final"]
        sentences.append(
            f"The seeded heads' locality is initialisation's: they already put {before:.2f} on their neighbour at "
            f"step 0, before any training; {moved(before, after)}."
        )
    if "others" in groups:
        top = max(groups["others"]["heads"], key=lambda h: h["final"])
        if top["final"] - top["step0"] > CHANGE:
            sentences.append(
                f"Training moved other heads towards a neighbour: the most local one (layer {top['layer']} head "
                f"{top['head']}, offset {top['offset']:+d}) went from {top['step0']:.2f} to {top['final']:.2f}: that "
                "much, training taught by itself."
            )
        else:
            sentences.append(
                f"Training made none of the other heads local (the most local one: {groups['others']['step0']:.2f} "
                f"at step 0, {top['final']:.2f} after): the stripes in the attention maps (section 7) are where "
                "initialisation put them, not something training taught."
            )
    return sentences


def inside_head(head: dict, where: str) -> str:
    """What the recipe seeded in the review's most local head, and what it did at step 0 (where: "the next
    token", ...)."""
    seeded, start = head.get("seeded_offset"), head.get("step0_weight")
    if start is None:
        return ""
    if seeded == head["offset"]:
        return (
            f"The `local` recipe pointed this head at {where} before training: at step 0 it already put {start:.2f} "
            f"there on this review, so the stripe is initialisation's ({head['weight']:.2f} after pretraining). "
        )
    if seeded is not None:
        return (
            f"The `local` recipe pointed this head at offset {seeded:+d}, not here; at step 0 it put {start:.2f} on "
            f"{where}. "
        )
    if head["weight"] - start > CHANGE:
        return (
            f"The `local` recipe did not seed this head: at step 0 it put {start:.2f} there, so training made this "
            "stripe. "
        )
    return (
        f"The `local` recipe did not seed this head, and at step 0 it already put {start:.2f} there (BERT's random "
        "initialisation): training did not make this stripe. "
    )
