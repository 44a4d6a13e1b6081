import pytest

from compactor.config.properties import load_properties, parse_properties
from compactor.exceptions import ConfigError


def test_separators_comments_and_continuations() -> None:
    text = """
# comment
! also a comment
a=1
b : two
c   three words
d = x\\
    y
e=tab\\there \\u0041
"""
    assert parse_properties(text) == {
        "a": "1", "b": "two", "c": "three words", "d": "xy", "e": "tab\there A",
    }


def test_duplicate_key_is_refused_with_both_values() -> None:
    with pytest.raises(ConfigError, match="given twice.*'1'"):
        parse_properties("a=1\na=2\n")


def test_unreadable_file_names_the_path(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot be read") as info:
        load_properties(tmp_path / "missing.properties")
    assert info.value.exit_code == 2
    assert "missing.properties" in str(info.value)
