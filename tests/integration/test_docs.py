"""The docs stay true to the tree: docs/architecture.md's layer graph is what `make layers`
prints and the page is at most 200 lines, tests/README.md's catalogue lists every test
file with its opening comment, every relative link in the docs resolves (file and
#anchor), and every path of the tree the docs name in backticks exists. `make docs`
(tools/update_docs.py) rewrites the generated blocks."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import update_docs  # noqa: E402

MAX_ARCHITECTURE_LINES = 200


@pytest.fixture(scope="module")
def docs():
    return update_docs.rendered(str(ROOT))


def block(text, name):
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert m, f"no {name} block"
    return m.group(1)


def test_layer_graph_in_architecture_is_what_make_layers_prints(docs):
    old, _ = docs[update_docs.ARCHITECTURE]
    printed = subprocess.run([sys.executable, str(ROOT / "tools" / "check_layers.py"), str(ROOT)],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    in_doc = block(old, "layers")
    assert in_doc == "```\n" + printed.rstrip("\n") + "\n```", \
        "docs/architecture.md's layer graph differs from `make layers`: run `make docs`"


def test_architecture_is_one_page():
    lines = (ROOT / update_docs.ARCHITECTURE).read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_ARCHITECTURE_LINES, \
        f"docs/architecture.md has {lines} lines (at most {MAX_ARCHITECTURE_LINES}): move detail to design_notes.md"


def test_catalogue_in_tests_readme_lists_every_test_file(docs):
    old, new = docs[update_docs.TESTS_README]
    listed = set(re.findall(r"^\| \[`[^`]+`\]\(([^)]+)\)", block(old, "tests"), re.M))
    tests = ROOT / "tests"
    on_disk = {p.relative_to(tests).as_posix()
               for pattern in ("unit/**/test_*.c", "integration/test_*.py", "fuzz/fuzz_*.c")
               for p in tests.glob(pattern)}
    missing, gone = sorted(on_disk - listed), sorted(listed - on_disk)
    assert not missing, f"test files missing from tests/README.md: {missing}; run `make docs`"
    assert not gone, f"tests/README.md lists files that are gone: {gone}; run `make docs`"
    assert old == new, "tests/README.md's catalogue differs from the files' opening comments: run `make docs`"


def test_catalogue_describes_a_file_by_its_opening_comment(tmp_path):
    (tmp_path / "tests/unit/x").mkdir(parents=True)
    (tmp_path / "tests/integration").mkdir(parents=True)
    (tmp_path / "tests/fuzz").mkdir(parents=True)
    (tmp_path / "tests/unit/x/test_a.c").write_text("/* test_a.c: the a module's b. More detail.\n */\nint x;\n")
    (tmp_path / "tests/integration/test_b.py").write_text('"""The b endpoint, from the outside."""\n')
    (tmp_path / "tests/fuzz/fuzz_c.c").write_text("int y;\n")
    with pytest.raises(update_docs.DocsError, match="fuzz_c.c"):
        update_docs.tests_block(str(tmp_path))
    (tmp_path / "tests/fuzz/fuzz_c.c").write_text("/* fuzz_c.c: libFuzzer harness for c (c/). */\n")
    text = update_docs.tests_block(str(tmp_path))
    assert "| [`x/test_a.c`](unit/x/test_a.c) | the a module's b |" in text
    assert "| [`test_b.py`](integration/test_b.py) | The b endpoint, from the outside |" in text
    assert "| [`fuzz_c.c`](fuzz/fuzz_c.c) | libFuzzer harness for c (c/) |" in text


def test_check_mode_passes_on_the_tree():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "update_docs.py"), "--check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# Links: every relative [text](target) in the docs points at a file that exists and, with a
# #fragment into a Markdown file, at one of its headings (GitHub's anchors).

LINKED_DOCS = ["README.md", "tests/README.md", "bench/README.md"]
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    seen, out = {}, set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def link_problems():
    problems = []
    pages = [ROOT / p for p in LINKED_DOCS] + sorted((ROOT / "docs").glob("**/*.md"))
    for page in pages:
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in LINK_RE.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, fragment = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                problems.append(f"{where}: no heading #{fragment}")
    return problems


def test_relative_links_resolve():
    assert link_problems() == []


# A path of the tree in backticks (`server/http/http.c`, `kvcache/`): the docs that
# describe today's code must name files that exist. Dated notes (docs/notes/) are history
# and may name files since moved; the test catalogue is generated.
TREE_FOLDERS = ("common", "quant", "sample", "gguf", "tokenizer", "template", "grammar", "gpu", "model",
                "kvcache", "scheduler", "config", "server", "cli", "tools", "bench", "tests", "systemd")
TREE_PATH = re.compile(r"`((?:" + "|".join(TREE_FOLDERS) + r")/[A-Za-z0-9_./*-]*)`")
CURRENT_DOCS = ("README.md", "bench/README.md", "docs/*.md")


def stale_paths():
    problems = []
    for pattern in CURRENT_DOCS:
        for doc in sorted(ROOT.glob(pattern)):
            for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
                for m in TREE_PATH.finditer(line):
                    path = m.group(1).rstrip("/.")
                    found = list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
                    if not found:
                        problems.append(f"{doc.relative_to(ROOT)}:{number}: `{m.group(1)}` does not exist")
    return problems


def test_paths_named_in_the_docs_exist():
    problems = stale_paths()
    assert not problems, "\n".join(problems)


def test_a_moved_file_is_caught(tmp_path, monkeypatch):
    fake = tmp_path / "docs"
    fake.mkdir()
    (fake / "x.md").write_text("see `server/server.h` and `server/api/api.h`\n", encoding="utf-8")
    (tmp_path / "server" / "api").mkdir(parents=True)
    (tmp_path / "server" / "api" / "api.h").write_text("", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = stale_paths()
    assert problems == ["docs/x.md:1: `server/server.h` does not exist"]
