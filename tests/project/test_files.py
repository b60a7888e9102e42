"""bertkit.files: the shared UTF-8 reader (its callers' own wording, the file and the line named)."""

from __future__ import annotations

import gzip

import pytest

from bertkit import BertConfig
from bertkit.errors import ConfigError
from bertkit.files import read_text, text_lines


class Oops(ValueError):
    pass


WORDS = dict(not_utf8="not UTF-8 (byte {byte:#04x} at offset {offset}); fix it", cannot_read="cannot read ({reason})")


def test_a_bad_byte_names_the_file_the_line_and_the_byte(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("一\n二\nthree \xff\n".encode().replace(b"\xc3\xbf", b"\xff"))
    with pytest.raises(Oops) as info:
        read_text(str(path), Oops, **WORDS)
    assert str(info.value) == f"{path}: line 3: not UTF-8 (byte 0xff at offset 14); fix it"


def test_a_bom_is_stripped_on_request_and_offsets_count_it(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfok\n\xfe")
    with pytest.raises(Oops, match="line 2: .* offset 6"):
        read_text(str(path), Oops, strip_bom=True, **WORDS)
    path.write_bytes(b"\xef\xbb\xbfok\n")
    assert read_text(str(path), Oops, strip_bom=True, **WORDS) == "ok\n"
    assert read_text(str(path), Oops, **WORDS) == "\ufeffok\n"


def test_gzip_only_when_asked(tmp_path):
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress("héllo\n".encode()))
    assert read_text(str(path), Oops, bad_gzip="not gzip ({error})", **WORDS) == "héllo\n"
    with pytest.raises(Oops, match="line 1: not UTF-8"):  # without bad_gzip the bytes are read as they are
        read_text(str(path), Oops, **WORDS)
    path.write_bytes(b"plain text")
    with pytest.raises(Oops, match=r"a.txt.gz: not gzip \("):
        read_text(str(path), Oops, bad_gzip="not gzip ({error})", **WORDS)


def test_missing_file_and_folder_in_the_callers_words_or_the_generic_ones(tmp_path):
    with pytest.raises(Oops, match=r"nope.txt: gone$"):
        read_text(str(tmp_path / "nope.txt"), Oops, missing="gone", **WORDS)
    with pytest.raises(Oops, match=r"nope.txt: cannot read \(No such file or directory\)"):
        read_text(str(tmp_path / "nope.txt"), Oops, **WORDS)
    with pytest.raises(Oops, match=r": a folder$"):
        read_text(str(tmp_path), Oops, folder="a folder", **WORDS)


def test_text_lines_split_at_newlines_only():
    assert text_lines("a\r\nb\x1cc\n\nd\n") == ["a", "b\x1cc", "", "d"]
    assert text_lines("") == [] and text_lines("x") == ["x"]


def test_config_json_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{\n  "hidden_act": "g\xe9lu"\n}\n')
    with pytest.raises(ConfigError, match=r"config.json: line 2: not UTF-8 \(byte 0xe9\); save config.json as UTF-8"):
        BertConfig.from_json(path)
