"""Rows for embedding and reranking training (bertkit/data/pairs.py): columns matched as sentence-transformers'
trainer matches them, and every bad row an error naming its line."""

import json

import pytest

from bertkit.data.pairs import read_rows
from bertkit.data.records import TaskDataError
from bertkit.tasks.embed import EmbedExample, retrieval_set
from bertkit.tasks.rerank import _examples as rerank_examples


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def jsonl(path, rows):
    return write(path, [json.dumps(r, ensure_ascii=False) for r in rows])


def test_inputs_by_order_and_the_label_column_by_name(tmp_path):
    """The trainer's rule: label / labels / score / scores is the label wherever it stands; the other columns are
    inputs in their order, whatever their names."""
    rows = read_rows(
        jsonl(tmp_path / "a.jsonl", [{"score": 0.5, "q": "今天", "d": "明天"}, {"score": 1, "q": "x", "d": "y"}])
    )
    assert rows.columns == ["q", "d"] and rows.label_column == "score"
    assert rows.texts == [["今天", "明天"], ["x", "y"]] and rows.labels == [0.5, 1.0] and rows.lines == [1, 2]
    csv = read_rows(write(tmp_path / "a.csv", ["anchor,positive,negative", "a,b,c", '"x, y",z,w']))
    assert csv.texts == [["a", "b", "c"], ["x, y", "z", "w"]] and csv.labels is None
    tsv = read_rows(write(tmp_path / "a.tsv", ["sentence1\tsentence2\tlabel", "a\tb\t1", "c\td\t0"]))
    assert tsv.labels == [1.0, 0.0] and tsv.label_column == "label"


def test_parquet_rows_are_read_as_the_other_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"anchor": ["a", "b"], "positive": ["c", "d"], "label": [1.0, 0.0]}), path)
    rows = read_rows(path)
    assert rows.texts == [["a", "c"], ["b", "d"]] and rows.labels == [1.0, 0.0] and rows.where(1) == f"{path}: row 2"


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"a": "x", "b": "y"}, {"a": "x"}], r"line 2: no 'b' \(or null\); every row needs the columns of the first"),
        ([{"a": "x", "b": "y"}, {"a": "x", "b": None}], r"line 2: no 'b'"),
        ([{"a": "x", "b": "  "}], r"line 1: column 'b' is empty"),
        ([{"a": "x", "b": 3}], r"line 1: column 'b' holds a int \(3\), not a text"),
        ([{"a": "x", "b": "y", "label": "good"}], r"line 1: label column 'label' holds .*not a finite number"),
        ([{"a": "x", "b": "y", "label": float("nan")}], r"not a finite number"),
        ([{"a": "x", "label": 1, "score": 2}], r"line 1: more than one label column \(label, score\)"),
        ([{"label": 1}], r"line 1: no text column"),
    ],
)
def test_a_bad_row_is_an_error_naming_its_line(tmp_path, rows, message):
    path = write(tmp_path / "bad.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(TaskDataError, match=message):
        read_rows(path)


def test_an_unknown_format_names_the_formats_read(tmp_path):
    with pytest.raises(TaskDataError, match=r"\.csv, \.json, \.jsonl, \.tsv, \.parquet"):
        read_rows(write(tmp_path / "a.txt", ["x"]))


def test_pairs_become_a_retrieval_set_of_their_anchors_and_every_other_text():
    """Evaluation pairs: the anchors are the queries, positives and negatives the corpus (each text once), an anchor
    given twice has both positives."""
    data = retrieval_set(
        [EmbedExample(["q1", "p1", "n1"]), EmbedExample(["q2", "p2", "p1"]), EmbedExample(["q1", "p3", "n1"])]
    )
    assert data.queries == {"q0": "q1", "q1": "q2"}
    assert data.corpus == {"d0": "p1", "d1": "n1", "d2": "p2", "d3": "p3"}
    assert data.relevant == {"q0": {"d0", "d3"}, "q1": {"d2"}}


def test_rerank_rows_are_labelled_pairs_or_a_positive_before_its_negatives(tmp_path):
    labelled = rerank_examples(read_rows(jsonl(tmp_path / "l.jsonl", [{"q": "a", "d": "b", "label": 0}])))
    assert [(e.query, e.documents, e.labels, e.from_label_column) for e in labelled] == [("a", ["b"], [0.0], True)]
    listed = rerank_examples(read_rows(jsonl(tmp_path / "p.jsonl", [{"q": "a", "p": "b", "n1": "c", "n2": "d"}])))
    assert [(e.documents, e.labels) for e in listed] == [(["b", "c", "d"], [1.0, 0.0, 0.0])]
    with pytest.raises(Exception, match="a labelled row is one query, one document and its label"):
        rerank_examples(read_rows(jsonl(tmp_path / "x.jsonl", [{"q": "a", "d": "b", "e": "c", "label": 1}])))


def test_training_rows_of_uneven_width_are_refused_naming_the_row():
    """Rows from Python (or a file whose columns a reader let vary) with fewer texts than the first would shift every
    later row's texts into the wrong columns: the row is named instead."""
    from bertkit.tasks.embed import training_rows

    rows = [EmbedExample(["a", "b", "c"]), EmbedExample(["d", "e", "f"]), EmbedExample(["g", "h"])]
    with pytest.raises(TaskDataError, match="the data: row 3 has 2 texts, the first has 3; every row needs as many"):
        training_rows(rows, "the data")
