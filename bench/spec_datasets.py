"""The prompts of bench/bench_spec.py: three deterministic datasets, generated from a seed with
no files or network, so every run and every server sees the same text.

  copy      single requests whose answer mostly copies the prompt, in turn: rename a function
            in a given Python file and reply with the whole file; reformat a given minified JSON
            document with indentation; copy the paragraph about a topic, word for word, from a
            given document
  agentic   coding-agent conversations of several turns, sent one turn after another (each
            turn's prompt holds the previous turns and the server's own answers): the same
            system prompt and tool outputs (`cat` of a file from one small repository,
            a pytest failure log quoting that file) recur across turns and across
            conversations, as when many agents work on one repository
  prose     open-ended story prompts (little to copy: speculation should not lose here)

conversations(name, n, seed) gives n conversations of that dataset, each a list of user turns
(the single-request datasets have one); the same (name, seed) always gives the same first n.
"""
import json
import random

# max_tokens per dataset: a copy answer repeats a whole file or document (100-500 tokens)
MAX_TOKENS = {"copy": 512, "agentic": 128, "prose": 128}
NOUNS = ["order", "invoice", "customer", "payment", "shipment", "ticket", "report", "account", "session",
         "message", "record", "event", "profile", "product", "review", "batch", "schedule", "device"]
VERBS = ["load", "parse", "validate", "merge", "export", "summarize", "normalize", "filter", "archive",
         "render", "count", "group", "fetch", "score"]
FIELDS = ["id", "name", "total", "status", "created", "owner", "region", "priority", "count", "label"]
NAMES = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia", "Kofi", "Lena"]
CITIES = ["Lisbon", "Osaka", "Denver", "Nairobi", "Oslo", "Lima", "Hanoi", "Dublin", "Perth", "Quito"]
STATUSES = ["open", "closed", "pending", "shipped", "failed", "paid"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "September", "October"]
SYSTEMS = ["billing service", "search index", "mobile app", "data warehouse", "login flow", "support portal"]
TECHS = ["PostgreSQL", "Kafka", "Redis", "Kubernetes", "a new CDN", "the shared queue"]


# ---- a small repository of Python files ---------------------------------------------------

def _function(rng, noun, verb):
    """One function of 8-12 lines over records of a noun, from one of a few shapes."""
    field, other = rng.sample([f for f in FIELDS if f != "total"], 2)
    limit = rng.choice([10, 50, 100, 500])
    shape = rng.randrange(3)
    name = f"{verb}_{noun}s"
    if shape == 0:
        body = [f"def {name}(path, limit={limit}):",
                f'    """Read {noun}s from a CSV file, at most limit of them."""',
                f"    {noun}s = []",
                "    with open(path) as f:",
                "        for line in f:",
                '            fields = line.strip().split(",")',
                "            if len(fields) < 3:",
                "                continue",
                f'            {noun}s.append({{"{field}": fields[0], "{other}": fields[1], "total": float(fields[2])}})',
                f"            if len({noun}s) >= limit:",
                "                break",
                f"    return {noun}s"]
    elif shape == 1:
        body = [f"def {name}({noun}s, min_{field}=0):",
                f'    """Group {noun}s by {other}, keeping those with {field} at least min_{field}."""',
                "    groups = {}",
                f"    for item in {noun}s:",
                f'        if item.get("{field}", 0) < min_{field}:',
                "            continue",
                f'        key = item["{other}"]',
                "        groups.setdefault(key, []).append(item)",
                "    return groups"]
    else:
        body = [f"def {name}({noun}, strict=False):",
                f'    """Check one {noun}; raise ValueError when strict and it is invalid."""',
                "    errors = []",
                f'    if not {noun}.get("{field}"):',
                f'        errors.append("missing {field}")',
                f'    if {noun}.get("{other}") is None:',
                f'        errors.append("missing {other}")',
                "    if strict and errors:",
                f'        raise ValueError("; ".join(errors))',
                "    return not errors"]
    return name, body


def repo_files(seed, n=6):
    """n Python modules of the fictional repository: [(path, text, [function names])]."""
    rng = random.Random(f"repo-{seed}")
    files = []
    nouns = rng.sample(NOUNS, n)
    for noun in nouns:
        verbs = rng.sample(VERBS, 2)
        lines = [f'"""Helpers for {noun}s: reading, grouping and checking them."""', "import csv", "import json", ""]
        names = []
        for verb in verbs:
            name, body = _function(rng, noun, verb)
            names.append(name)
            lines += body + ["", ""]
        files.append((f"src/{noun}s.py", "\n".join(lines).rstrip() + "\n", names))
    return files


def _pytest_log(rng, path, text, fn):
    """A pytest failure report for fn in path, quoting its lines as pytest does."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"def {fn}("))
    body = lines[start:start + 6]
    mod = path.split("/")[-1][:-3]
    quoted = "\n".join("    " + l for l in body)
    return (f"============================= test session starts ==============================\n"
            f"collected 12 items\n\n"
            f"tests/test_{mod}.py ....F.......                                       [100%]\n\n"
            f"=================================== FAILURES ===================================\n"
            f"_______________________________ test_{fn} _______________________________\n\n"
            f">       result = {fn}(sample)\n\n{path}:{start + 1}: in {fn}\n{quoted}\n"
            f"E       KeyError: '{rng.choice(FIELDS)}'\n\n"
            f"=========================== short test summary info ============================\n"
            f"FAILED tests/test_{mod}.py::test_{fn} - KeyError\n"
            f"========================= 1 failed, 11 passed in 0.{rng.randrange(10, 99)}s =========================")


# ---- copy-heavy single requests ----------------------------------------------------------

def _json_doc(rng):
    rows = [{"id": 1000 + rng.randrange(9000), "name": rng.choice(NAMES), "city": rng.choice(CITIES),
             "status": rng.choice(STATUSES), "total": round(rng.uniform(5, 900), 2)}
            for _ in range(rng.randrange(5, 8))]
    return {"report": f"R-{rng.randrange(100, 999)}", "items": rows}


def _document(rng):
    """A few paragraphs of project notes; returns (text, a topic one paragraph is about)."""
    paras = []
    topics = rng.sample(SYSTEMS, 4)
    for topic in topics:
        who, who2 = rng.sample(NAMES, 2)
        paras.append(f"The {topic} team, led by {who}, will move the {topic} to {rng.choice(TECHS)} by "
                     f"{rng.choice(MONTHS)}. {who2} reported that the current setup in {rng.choice(CITIES)} "
                     f"fails about {rng.randrange(2, 40)} times a week. The budget for this work is "
                     f"{rng.randrange(10, 90)} thousand dollars, approved on {rng.choice(MONTHS)} "
                     f"{rng.randrange(1, 28)}.")
    return "\n\n".join(paras), rng.choice(topics)


def _copy_request(seed, i):
    rng = random.Random(f"copy-{seed}-{i}")
    kind = i % 3
    if kind == 0:
        path, text, names = rng.choice(repo_files(seed + 1000 + i, n=1))
        old = rng.choice(names)
        new = old.replace("_", "_all_", 1)
        return (f"Rename the function `{old}` to `{new}` in the file {path} below. Reply with the complete "
                f"updated file in a ```python block and nothing else.\n\n```python\n{text}```")
    if kind == 1:
        doc = json.dumps(_json_doc(rng), separators=(",", ":"))
        return (f"Reformat this JSON document with an indentation of 2 spaces. Keep every key and value "
                f"exactly as it is and print only the JSON.\n\n{doc}")
    text, topic = _document(rng)
    return f'Document:\n"""\n{text}\n"""\n\nCopy the paragraph about the {topic} from the document, word for word.'


# ---- agentic conversations -----------------------------------------------------------------

AGENT_SYSTEM = ("You are a coding agent working in a Python repository. You can run tools: `cat PATH` prints a "
                "file, `pytest -q` runs the tests, `apply_patch` edits files. Tool outputs are given to you in "
                "the user turns. When you change code, print the complete new function or file.")


def _agentic_conversation(seed, i, turns):
    files = repo_files(seed)  # one repository for every conversation: tool outputs recur
    rng = random.Random(f"agent-{seed}-{i}")
    path, text, names = files[i % len(files)]
    fn = rng.choice(names)
    log = _pytest_log(random.Random(f"log-{seed}-{path}-{fn}"), path, text, fn)
    steps = [
        f"Task: the test test_{fn} fails. I ran `cat {path}`:\n\n```python\n{text}```\n\nPrint the function "
        f"`{fn}` as it is now in a ```python block, then explain what it does.",
        f"I ran `pytest -q`:\n\n```\n{log}\n```\n\nPrint the corrected function `{fn}` in a ```python block.",
        f"I ran `cat {path}` again:\n\n```python\n{text}```\n\nReply with the complete file, your fix applied, "
        f"in a ```python block and nothing else.",
        f"I ran `pytest -q` again:\n\n```\n{log}\n```\n\nIt still fails. Print `{fn}` once more, fixed.",
    ]
    return steps[:turns]


PROSE_SUBJECTS = ["a lighthouse keeper", "a retired astronaut", "a young baker", "a lost robot", "a street musician",
                  "a beekeeper", "a night-shift nurse", "a chess prodigy", "a mapmaker", "a ferry captain"]
PROSE_TWISTS = ["finds a letter addressed to the future", "has to cross a frozen lake", "loses their voice",
                "meets their double", "inherits a silent clock", "must win back a friend's trust",
                "discovers a door that was never there"]
PROSE_PLACES = ["a mountain village", "a flooded city", "a desert train station", "an island in winter",
                "a crowded market", "a space station"]


def _prose_request(seed, i):
    rng = random.Random(f"prose-{seed}-{i}")
    return (f"Write a short story about {rng.choice(PROSE_SUBJECTS)} in {rng.choice(PROSE_PLACES)} who "
            f"{rng.choice(PROSE_TWISTS)}. Use vivid details and a surprising ending.")


DATASETS = ("copy", "agentic", "prose")


def conversations(name, n, seed=0, turns=3):
    """n conversations of dataset name, each a list of user messages sent one after another."""
    if name == "copy":
        return [[_copy_request(seed, i)] for i in range(n)]
    if name == "agentic":
        return [_agentic_conversation(seed, i, turns) for i in range(n)]
    if name == "prose":
        return [[_prose_request(seed, i)] for i in range(n)]
    raise ValueError(f"unknown dataset {name} (known: {', '.join(DATASETS)})")


def system_prompt(name):
    return AGENT_SYSTEM if name == "agentic" else None
