#!/usr/bin/env python3
"""Make the expected chat-template renders (tests/data/templates/jinja_expected.json) with jinja2.

Every chat template in $SPINDLE_TESTDATA/templates/*.jinja, plus the default model's own
(tokenizer.chat_template in models/SmolLM2-135M-Instruct.Q4_1.gguf), is rendered over a fixed set
of conversations by real jinja2, set up the way Hugging Face transformers' apply_chat_template
sets it up (chat_template_utils._compile_jinja_template):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[<{% generation %} tag>, jinja2.ext.loopcontrols])
    filters["tojson"]       = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys=False)
    globals["raise_exception"] = raise TemplateError(message)
    globals["strftime_now"]    = datetime.now().strftime(format)

The context of a render is exactly conversation.context updated with the template's special_tokens
(tests/unit/template/test_template_cases.c builds the same). Unlike apply_chat_template nothing else
is added: a conversation without "tools" leaves tools undefined (one conversation sets it to null,
as transformers does).

strftime_now is the only source of non-determinism. Here it reads a fixed clock (FIXED_CLOCK); every
expected entry whose render called it lists {"format", "value"} under "strftime_now", and the C test
replaces each value by strftime(format) of its own clock before comparing. The script checks that
this substitution is exact by rendering again with a second clock.

A render that fails is expected data too: {"error": message} when the template itself called
raise_exception(message), {"error": str(e), "error_kind": "<class>"} for any other exception.

Usage (from the repository root; deterministic: running it again writes the same file):
    python3 tools/make_template_cases.py [--check]   # --check: compare with the committed file
See tests/data/templates/README.md.
"""

import argparse
import datetime
import json
import os
import struct
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_PATH = os.path.join(REPO, "tests", "data", "templates", "jinja_expected.json")
DEFAULT_MODEL = os.path.join("models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIXED_CLOCK = datetime.datetime(2024, 7, 26, 9, 30, 0)
CHECK_CLOCK = datetime.datetime(2031, 11, 3, 17, 45, 12)
DATE_STRING = "26 Jul 2024"

# ---- special tokens per shared template file (what each model's tokenizer_config names) ----------

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
DEEPSEEK_R1 = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
SPECIAL_TOKENS = {
    "HuggingFaceTB-SmolLM3-3B.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": MISTRAL,
    "Qwen-Qwen2.5-7B-Instruct.jinja": QWEN,
    "Qwen-Qwen3-0.6B.jinja": QWEN,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": DEEPSEEK_R1,
    "google-gemma-2-2b-it.jinja": {
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    },
    "llama-cpp-deepseek-r1.jinja": DEEPSEEK_R1,
    "meta-llama-Llama-3.1-8B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct.jinja": LLAMA3,
    "microsoft-Phi-3.5-mini-instruct.jinja": {
        "bos_token": "<s>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<unk>",
        "pad_token": "<|endoftext|>",
    },
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": MISTRAL,
}

# ---- conversations -------------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given city",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city, e.g. \"Paris, FR\""},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web — returns the top results",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "default": 5},
                    "safe": {"type": "boolean"},
                    "threshold": {"type": "number"},
                },
                "required": ["query"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def conv(name, messages, add_generation_prompt=True, **extra):
    context = {"messages": messages}
    context.update(extra)
    context["add_generation_prompt"] = add_generation_prompt
    context["date_string"] = DATE_STRING
    return {"name": name, "context": context}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = [
    conv("single_user", [{"role": "user", "content": "Hello"}]),
    conv("system_and_user", [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]),
    conv(
        "multi_turn",
        [
            SYSTEM,
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help you today?"},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the scarecrow win an award? He was outstanding in his field."},
            {"role": "user", "content": "Another one, please."},
        ],
    ),
    conv(
        "multi_turn_no_generation_prompt",
        [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3 + 3?"},
            {"role": "assistant", "content": "6"},
            {"role": "user", "content": "Thanks."},
            {"role": "assistant", "content": "You're welcome."},
        ],
        add_generation_prompt=False,
    ),
    conv(
        "tools_defined",
        [SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}],
        tools=TOOLS,
    ),
    conv(
        "tools_defined_no_system",
        [{"role": "user", "content": "Find recent news about Mars rovers."}],
        tools=TOOLS,
    ),
    conv(
        "tools_null",
        [SYSTEM, {"role": "user", "content": "No tools today."}],
        tools=None,
    ),
    conv(
        "tool_call_dict_arguments",
        [
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    tool_call("call0A1b2", "get_weather", {"location": "Paris, FR", "unit": "celsius", "days": 2})
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call0A1b2",
                "name": "get_weather",
                "content": "{\"temperature\": 22, \"sky\": \"sunny\"}",
            },
        ],
        tools=TOOLS,
    ),
    conv(
        "tool_call_string_arguments",
        [
            SYSTEM,
            {"role": "user", "content": "Search for the tallest building."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    tool_call(
                        "abcDEF123",
                        "search_web",
                        "{\"query\": \"tallest building in the world\", \"max_results\": 3, \"threshold\": 0.5}",
                    )
                ],
            },
            {"role": "tool", "tool_call_id": "abcDEF123", "name": "search_web", "content": "Burj Khalifa, 828 m"},
            {"role": "assistant", "content": "The tallest building is the Burj Khalifa (828 m)."},
            {"role": "user", "content": "Thanks!"},
        ],
        tools=TOOLS,
    ),
    conv(
        "parallel_tool_calls",
        [
            {"role": "user", "content": "Weather in Paris and in Tokyo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    tool_call("call00001", "get_weather", {"location": "Paris"}),
                    tool_call("call00002", "search_web", {"query": "Tokyo weather", "safe": True, "threshold": 0.75}),
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "18 C, cloudy"},
            {"role": "tool", "tool_call_id": "call00002", "name": "search_web", "content": "Tokyo: 25 C, clear"},
        ],
        tools=TOOLS,
    ),
    conv(
        "content_parts",
        [
            {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Describe this "}, {"type": "text", "text": "in one word."}],
            },
        ],
    ),
    conv(
        "enable_thinking_true",
        [{"role": "user", "content": "Prove that sqrt(2) is irrational."}],
        enable_thinking=True,
    ),
    conv(
        "enable_thinking_false",
        [SYSTEM, {"role": "user", "content": "Quick: 7 * 8?"}],
        enable_thinking=False,
    ),
    conv(
        "reasoning_content",
        [
            {"role": "user", "content": "Is 17 prime?"},
            {
                "role": "assistant",
                "content": "Yes, 17 is prime.",
                "reasoning_content": "17 is not divisible by 2, 3 or 4, and 5*5 > 17.",
            },
            {"role": "user", "content": "And 21?"},
            {"role": "assistant", "content": "No: 21 = 3 * 7.", "reasoning_content": "21 / 3 = 7."},
        ],
        add_generation_prompt=False,
        enable_thinking=True,
    ),
    conv(
        "think_tags_in_content",
        [
            {"role": "user", "content": "What is 10 / 4?"},
            {"role": "assistant", "content": "<think>\n10 divided by 4 is 2.5.\n</think>\n\nIt is 2.5."},
            {"role": "user", "content": "Round it."},
        ],
    ),
    conv(
        "unicode_and_special_characters",
        [
            {"role": "system", "content": "Réponds en français. «Guillemets» et 'apostrophes'."},
            {
                "role": "user",
                "content": "Quotes \" and ', a backslash \\ and \\n (not a newline),\na real newline,\ttab, "
                "emoji 😀🚀, CJK 你好世界, こんにちは, {{ not_jinja }} {% raw %} <|im_end|>",
            },
            {"role": "assistant", "content": "Ça marche ✓ — 中文 \"ok\" \\o/"},
            {"role": "user", "content": "Ünïcödé ñ ß Ω ≠ ∞ 🇫🇷"},
        ],
    ),
    conv(
        "whitespace_in_content",
        [
            {"role": "system", "content": "  \n  Be brief.  \n"},
            {"role": "user", "content": "   leading and trailing spaces   "},
            {"role": "assistant", "content": "\n\nanswer with newlines\n\n"},
            {"role": "user", "content": "\tTabbed\t"},
        ],
    ),
    conv(
        "empty_content",
        [
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "Now with text."},
        ],
    ),
    conv(
        "roles_not_alternating",
        [
            {"role": "user", "content": "First."},
            {"role": "user", "content": "Second, without an answer in between."},
        ],
    ),
]

# ---- llama.cpp's table (chat-template-cases.json) where jinja2 disagrees with it ------------------------

# llama.cpp's expected_output_jinja comes from minja, which differs from jinja2 on these cases. The C test
# holds spindle to jinja2 (Hugging Face) there, with the result recorded below; everywhere else it holds
# it to llama.cpp's expected string. The script stops if the set of disagreements changes.
POLYFILL = (
    "llama.cpp (minja) merges the system message into the first user message when a template does not "
    "handle the system role; jinja2 renders the template as written"
)
LLAMA_CPP_DIVERGENT = {
    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)": POLYFILL,
    "google/gemma-7b-it": POLYFILL,
    "OrionStarAI/Orion-14B-Chat": POLYFILL,
    "Phi-3-mini": POLYFILL,
    "Phi-3-medium": POLYFILL,
    "ChatGLM3": "minja drops the space between a line start and {{ message['content'] }}; jinja2 keeps it "
    "(lstrip_blocks strips only before block tags)",
}


def llama_cpp_strip(out, bos, eos):
    """What llama.cpp does to a render: drop one leading bos_token and one trailing eos_token."""
    if bos and out.startswith(bos):
        out = out[len(bos) :]
    if eos and out.endswith(eos):
        out = out[: -len(eos)]
    return out


def llama_cpp_divergent(renderer, cases_path):
    with open(cases_path, encoding="utf-8") as f:
        table = json.load(f)
    divergent = []
    for case in table["cases"]:
        if not case["supported_with_jinja"]:
            continue
        context = {
            "messages": table["conversation"],
            "add_generation_prompt": table["add_generation_prompt"],
            "bos_token": case["bos_token"],
            "eos_token": case["eos_token"],
        }
        fields, out = renderer.render(case["template_str"], context, FIXED_CLOCK)
        if "strftime_now" in fields:
            raise SystemExit(f"llama.cpp case {case['name']}: calls strftime_now; not handled")
        llama_cpp = case["expected_output_jinja"] or case["expected_output"]
        if out is not None:
            out = llama_cpp_strip(out, case["bos_token"], case["eos_token"])
            if out == llama_cpp:
                continue
            fields["output"] = out
        entry = {"name": case["name"], "reason": LLAMA_CPP_DIVERGENT.get(case["name"], "undocumented")}
        entry.update(fields)
        divergent.append(entry)
    found = {e["name"] for e in divergent}
    if found != set(LLAMA_CPP_DIVERGENT):
        raise SystemExit(
            f"llama.cpp cases where jinja2 disagrees changed: new {sorted(found - set(LLAMA_CPP_DIVERGENT))}, "
            f"gone {sorted(set(LLAMA_CPP_DIVERGENT) - found)}; update LLAMA_CPP_DIVERGENT"
        )
    return divergent


# ---- the Hugging Face environment ------------------------------------------------------------------


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body unchanged (transformers' AssistantTracker
    only records where the body lands, which does not change the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class RaisedByTemplate(TemplateError):
    """What raise_exception raises: a TemplateError, told apart from jinja2's own errors."""


class Renderer:
    def __init__(self):
        self.clock = FIXED_CLOCK
        self.strftime_calls = []
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
        )

        def raise_exception(message):
            raise RaisedByTemplate(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def strftime_now(format):
            value = self.clock.strftime(format)
            call = {"format": format, "value": value}
            if call not in self.strftime_calls:
                self.strftime_calls.append(call)
            return value

        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        self.env = env

    def render(self, source, context, clock):
        """Returns (entry fields, raw output or None)."""
        self.clock = clock
        self.strftime_calls = []
        try:
            out = self.env.from_string(source).render(**context)
        except RaisedByTemplate as e:
            return {"error": e.message}, None
        except Exception as e:  # any other failure is expected behaviour too, recorded with its class
            return {"error": str(e), "error_kind": type(e).__name__}, None
        fields = {"output": out}
        if self.strftime_calls:
            fields["strftime_now"] = list(self.strftime_calls)
        return fields, out


# ---- GGUF metadata (v2/v3) ----------------------------------------------------------------------------

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_read_metadata(path):
    """Returns the key/value metadata of a GGUF file as a dict (arrays as lists)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata sits at the start; vocabularies fit well within this
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(data):
            raise ValueError(f"{path}: metadata runs past the bytes read (offset {pos} + {n})")
        b = data[pos : pos + n]
        pos += n
        return b

    def scalar(fmt):
        return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

    def string():
        return take(scalar("<Q")).decode("utf-8")

    def value(t):
        if t in GGUF_SCALARS:
            return scalar(GGUF_SCALARS[t])
        if t == 8:
            return string()
        if t == 9:
            elem_type = scalar("<I")
            return [value(elem_type) for _ in range(scalar("<Q"))]
        raise ValueError(f"{path}: unknown GGUF value type {t}")

    if take(4) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    version = scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} not supported")
    scalar("<Q")  # tensor count
    n_kv = scalar("<Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(scalar("<I"))
    return meta


def model_template(path):
    """The chat template and Hugging Face special-token variables of a GGUF model."""
    meta = gguf_read_metadata(path)
    tokens = meta["tokenizer.ggml.tokens"]
    special = {}
    for var, key in [
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("unk_token", "unknown_token_id"),
        ("sep_token", "seperator_token_id"),
        ("pad_token", "padding_token_id"),
        ("cls_token", "cls_token_id"),
        ("mask_token", "mask_token_id"),
    ]:
        token_id = meta.get("tokenizer.ggml." + key)
        if token_id is not None and 0 <= token_id < len(tokens):
            special[var] = tokens[token_id]
    return meta["tokenizer.chat_template"], special


# ---- main ------------------------------------------------------------------------------------------


def build(testdata):
    template_dir = os.path.join(testdata, "templates")
    templates = {}
    sources = {}
    for name in sorted(os.listdir(template_dir)):
        if not name.endswith(".jinja"):
            continue
        if name not in SPECIAL_TOKENS:
            raise SystemExit(f"{name}: no special tokens chosen for this template; add it to SPECIAL_TOKENS")
        with open(os.path.join(template_dir, name), encoding="utf-8") as f:
            sources[name] = f.read()
        templates[name] = {"file": name, "special_tokens": SPECIAL_TOKENS[name]}
    source, special = model_template(os.path.join(REPO, DEFAULT_MODEL))
    templates["default"] = {"model": "default", "special_tokens": special}
    sources["default"] = source

    # Round-trip through JSON so the contexts are exactly what the C test will load.
    conversations = json.loads(json.dumps(CONVERSATIONS, ensure_ascii=False))
    renderer = Renderer()
    expected = []
    for tname, tinfo in templates.items():
        for c in conversations:
            context = dict(c["context"])
            context.update(tinfo["special_tokens"])
            fields, out = renderer.render(sources[tname], context, FIXED_CLOCK)
            if out is not None and "strftime_now" in fields:
                # The C test swaps each fixed value for its own clock's: check that is exact.
                _, out2 = renderer.render(sources[tname], context, CHECK_CLOCK)
                swapped = out
                for call in fields["strftime_now"]:
                    swapped = swapped.replace(call["value"], CHECK_CLOCK.strftime(call["format"]))
                if swapped != out2:
                    raise SystemExit(f"{tname} / {c['name']}: strftime_now values are not substitutable")
            entry = {"template": tname, "conversation": c["name"]}
            entry.update(fields)
            expected.append(entry)
    divergent = llama_cpp_divergent(renderer, os.path.join(template_dir, "chat-template-cases.json"))
    return {
        "generated_by": "tools/make_template_cases.py",
        "jinja2_version": jinja2.__version__,
        "strftime_now_clock": FIXED_CLOCK.isoformat(),
        "templates": templates,
        "conversations": conversations,
        "expected": expected,
        "llama_cpp_divergent": divergent,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    ap.add_argument("--out", default=OUT_PATH)
    args = ap.parse_args()
    testdata = os.environ.get("SPINDLE_TESTDATA") or os.path.join(REPO, "..", "shared", "testdata")
    if not os.path.isabs(testdata):
        testdata = os.path.join(REPO, testdata)
    text = json.dumps(build(testdata), ensure_ascii=False, indent=1) + "\n"
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from a fresh run'}")
        return 0 if same else 1
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    data = json.loads(text)
    n_err = sum(1 for e in data["expected"] if "error" in e)
    print(
        f"{args.out}: {len(data['templates'])} templates x {len(data['conversations'])} conversations = "
        f"{len(data['expected'])} entries ({n_err} errors), jinja2 {jinja2.__version__}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
