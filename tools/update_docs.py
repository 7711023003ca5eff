#!/usr/bin/env python3
"""update_docs.py: rewrites the generated blocks of the docs from the tree (`make docs`).

Two blocks, each between an HTML comment pair that stays in place:
  - docs/architecture.md, `<!-- layers:begin -->` .. `<!-- layers:end -->`: exactly what
    `make layers` (tools/check_layers.py) prints, in a code block;
  - tests/README.md, `<!-- tests:begin -->` .. `<!-- tests:end -->`: the catalogue of every
    tests/unit/**/test_*.c, tests/integration/test_*.py and tests/fuzz/fuzz_*.c, one line
    each, the first sentence of the file's opening comment or docstring.

With --check it writes nothing and exits 1 naming each block that differs from the tree
(tests/integration/test_docs.py runs it that way).

Usage: tools/update_docs.py [--check] [--root DIR]
"""
import argparse
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARCHITECTURE = "docs/architecture.md"
TESTS_README = "tests/README.md"
MAX_LINE = 280  # a catalogue line longer than this is cut at a clause boundary


class DocsError(Exception):
    pass


def layers_output(root):
    """What `make layers` prints for the tree at root (it must pass)."""
    run = subprocess.run([sys.executable, os.path.join(root, "tools", "check_layers.py"), root],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise DocsError("tools/check_layers.py failed:\n" + run.stdout + run.stderr)
    return run.stdout


def layers_block(root):
    return "```\n" + layers_output(root).rstrip("\n") + "\n```"


def opening_text(path):
    """The file's opening comment (C) or docstring (Python), as one line of prose."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".py"):
        m = re.match(r'\s*(?:#[^\n]*\n\s*)*[rbuRBU]?("""|\'\'\')(.*?)\1', text, re.S)
        body = m.group(2) if m else ""
    else:
        m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
        body = re.sub(r"(?m)^\s*\*+ ?", "", m.group(1)) if m else ""
    paragraph = re.split(r"\n\s*\n", body.strip(), maxsplit=1)[0]
    return " ".join(paragraph.split())


def describe(path):
    """One line for the catalogue: the opening comment's first sentence, without the
    file's own name in front. Empty when the file has no opening comment."""
    text = opening_text(path)
    name = os.path.basename(path)
    text = re.sub(r"^" + re.escape(name) + r"\s*:\s*", "", text)
    text = re.sub(r"^Tests for\s+", "", text)
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", text, maxsplit=1)[0].rstrip(".")
    if len(sentence) > MAX_LINE:
        sentence = clause_cut(sentence, MAX_LINE) + " ..."
    return sentence.replace("|", "\\|")


def clause_cut(text, limit):
    """text cut at its last clause boundary (", ", "; " or ": " outside brackets and
    backquotes) before limit, or at a word when there is none."""
    depth, quoted, best = 0, False, -1
    for i, c in enumerate(text[:limit]):
        if c == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c in ",;:" and depth == 0 and text[i + 1:i + 2] == " ":
            best = i
    if best < 0:
        best = text.rfind(" ", 0, limit)
    return text[:best] if best > 0 else text[:limit]


def test_files(root):
    """The catalogue's files, relative to tests/, in three groups."""
    def rel(pattern):
        paths = glob.glob(os.path.join(root, "tests", pattern), recursive=True)
        return sorted(os.path.relpath(p, os.path.join(root, "tests")) for p in paths)
    return [("Unit tests", "unit", rel("unit/**/test_*.c")),
            ("Integration tests", "integration", rel("integration/test_*.py")),
            ("Fuzz harnesses", "fuzz", rel("fuzz/fuzz_*.c"))]


def tests_block(root):
    out, missing = [], []
    for title, folder, files in test_files(root):
        out += [f"### {title} ({folder}/, {len(files)} files)", "", "| file | checks |", "|---|---|"]
        for rel in files:
            line = describe(os.path.join(root, "tests", rel))
            if not line:
                missing.append("tests/" + rel)
            shown = rel[len(folder) + 1:]
            out.append(f"| [`{shown}`]({rel}) | {line} |")
        out.append("")
    if missing:
        raise DocsError("no opening comment or docstring to describe: " + ", ".join(missing))
    return "\n".join(out).rstrip("\n")


def replace_block(text, name, block, path):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise DocsError(f"{path}: no {begin} ... {end} block")
    return pattern.sub(lambda _: f"{begin}\n{block}\n{end}", text, count=1)


def rendered(root):
    """{path: (current text, text with its blocks regenerated)}."""
    blocks = {ARCHITECTURE: [("layers", layers_block(root))], TESTS_README: [("tests", tests_block(root))]}
    result = {}
    for path, items in blocks.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            old = f.read()
        new = old
        for name, block in items:
            new = replace_block(new, name, block, path)
        result[path] = (old, new)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a block is stale")
    ap.add_argument("--root", default=ROOT)
    a = ap.parse_args()
    try:
        docs = rendered(a.root)
    except DocsError as e:
        sys.exit(f"update_docs: {e}")
    stale = [path for path, (old, new) in docs.items() if old != new]
    if a.check:
        for path in stale:
            print(f"update_docs: {path} differs from the tree; run `make docs`")
        return 1 if stale else 0
    for path in stale:
        with open(os.path.join(a.root, path), "w", encoding="utf-8") as f:
            f.write(docs[path][1])
        print(f"update_docs: rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
