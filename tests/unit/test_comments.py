"""Comments and docstrings say why and what, never what a run measured: figures go stale in
code, so they live in bench/README.md, where a rerun replaces them."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A ratio of runs (1.3x), a decimal time or size (0.74 s, 28.2 ms, 3.5 MB), a before -> after
# pair of numbers, a measurement named as one, or an issue number nobody reading code can use.
MEASUREMENT = re.compile(
    r"\b\d+(\.\d+)?x\b|\b\d+\.\d+ ?(s|ms|MB|MiB|GB|KB|KiB)\b|\d ?-> ?\d|\bmeasured\b"
    r"|\bissue \d+")


def _prose(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    found = [(tok.start[0], tok.string) for tok in
             tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_no_comment_or_docstring_carries_a_measured_figure() -> None:
    paths = sorted(p for package in ("compactor", "streaming")
                   for p in (ROOT / package).rglob("*.py"))
    hits = [f"{path.relative_to(ROOT)}:{line}: {found.group(0)!r}"
            for path in paths for line, text in _prose(path)
            if (found := MEASUREMENT.search(text))]
    assert hits == []
