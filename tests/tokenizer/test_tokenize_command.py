"""`bertkit tokenize`: each token of a text and its id, and a bad model folder reported without a traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tokenizer_helpers import MINILM, REPO, needs_minilm

from bertkit.commands.tokenize import main as tokenize_main
from bertkit.tokenizer import TokenizerError


@needs_minilm
@pytest.mark.slow
def test_cli_tokenize_prints_each_token_and_id(minilm_kit):
    text, pair = "Hello, unaffable world! 今天", "second one"
    proc = subprocess.run(
        [sys.executable, "-m", "bertkit", "tokenize", "--model", str(MINILM), text, "--pair", pair],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    enc = minilm_kit.fast(text, pair)
    lines = proc.stdout.splitlines()
    tokens = enc.tokens()
    assert "##" in "".join(tokens)
    for i, (token, token_id, type_id) in enumerate(zip(tokens, enc["input_ids"], enc["token_type_ids"])):
        row = re.compile(rf"^\s*{i}\s+{re.escape(token)}\s+{token_id}\s+{type_id}\b")
        assert any(row.match(line) for line in lines), (token, token_id, proc.stdout)
    assert f"{len(tokens)} tokens" in proc.stdout


def test_cli_tokenize_reports_a_bad_directory_without_traceback(tmp_path, capsys):
    from bertkit.cli import main

    assert main(["tokenize", "--model", str(tmp_path / "nowhere"), "hi"]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err
    with pytest.raises(TokenizerError):
        tokenize_main(["--model", str(tmp_path / "nowhere"), "hi"])
