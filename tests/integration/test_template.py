"""`spindle template`: chat templates rendered by the real binary, checked against the text
Hugging Face's apply_chat_template produces (Python's jinja2 with transformers' settings)."""
import datetime
import json
import struct
import subprocess

import pytest

import conftest

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
    {"role": "assistant", "content": "   I am an assistant   "},
    {"role": "user", "content": "Another question, with \"quotes\", ünïcödé and 漢字"},
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TOOL_CONVERSATION = [
    {"role": "system", "content": "You answer weather questions."},
    {"role": "user", "content": "What is the weather in Zürich?"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "call12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
    {"role": "tool", "name": "get_weather", "tool_call_id": "call12345", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
    {"role": "assistant", "content": "It is 21 °C and clear in Zürich."},
    {"role": "user", "content": "Thanks!"},
]


def run(args, **kw):
    """Runs the binary; stdout and stderr are bytes, so the exact output can be checked."""
    return subprocess.run(args, capture_output=True, timeout=120, **kw)


def render(spindle_bin, tmp_path, context, *source_args):
    ctx = tmp_path / "context.json"
    ctx.write_text(json.dumps(context), encoding="utf-8")
    return run([spindle_bin, "template", *source_args, "--context", str(ctx)])


def template_file(name):
    path = conftest.testdata_dir() / "templates" / name
    if not path.exists():
        pytest.skip(f"fixture {path} absent")
    return path


# ---- the reference: jinja2 set up as transformers' apply_chat_template does ----------------

def hf_render(source, context):
    """Renders source as transformers does (ImmutableSandboxedEnvironment, trim_blocks,
    lstrip_blocks, loopcontrols, its tojson and raise_exception). Raises on template errors."""
    jinja2 = pytest.importorskip("jinja2")
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source).render(**context)


# ---- GGUF: a tiny reader for the default model's keys, a tiny writer for test models ------

_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_read_kv(path, wanted):
    """The values of the keys in wanted (arrays as lists) from the GGUF at path."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the metadata comes first; the default model's is ~2 MiB
    pos = 0

    def take(fmt):
        nonlocal pos
        (v,) = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode("utf-8")

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            elem, n = take("I"), take("Q")
            return [value(elem) for _ in range(n)]
        return take(_GGUF_SCALARS[t])

    assert data[:4] == b"GGUF", f"{path} is not a GGUF file"
    pos = 4
    take("I")  # version
    take("Q")  # tensors
    out = {}
    for _ in range(take("Q")):
        key = string()
        v = value(take("I"))
        if key in wanted:
            out[key] = v
    return out


def gguf_write_vocab(path, kvs):
    """Writes a vocab-only GGUF v3 (no tensors) with kvs: {key: (type, value)}; type is a
    GGUF type id, 9 with value (elem_type, list) for arrays."""
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(t, v):
        if t == 8:
            return string(v)
        if t == 9:
            elem, items = v
            return struct.pack("<IQ", elem, len(items)) + b"".join(value(elem, x) for x in items)
        return struct.pack("<" + _GGUF_SCALARS[t], v)

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, (t, v) in kvs.items():
        out += string(key) + struct.pack("<I", t) + value(t, v)
    path.write_bytes(out)
    return str(path)


TOKENS = ["<unk>", "<s>", "</s>", "<|sep|>", "hello"]
SPECIALS_TEMPLATE = ("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ sep_token }}|"
                     "{{ cls_token is defined }}|{{ messages[0]['content'] }}")


def vocab_model(tmp_path, template=SPECIALS_TEMPLATE, **ids):
    kvs = {"general.architecture": (8, "llama"), "tokenizer.ggml.model": (8, "llama"),
           "tokenizer.ggml.tokens": (9, (8, TOKENS))}
    if template is not None:
        kvs["tokenizer.chat_template"] = (8, template)
    ids = {"bos_token_id": 1, "eos_token_id": 2, "unknown_token_id": 0, "padding_token_id": 2,
           "seperator_token_id": 3, **ids}
    for name, i in ids.items():
        kvs[f"tokenizer.ggml.{name}"] = (5 if i < 0 else 4, i)  # int32 or uint32, as converters write them
    return gguf_write_vocab(tmp_path / "vocab.gguf", kvs)


# ---- the model's own template ---------------------------------------------------------

def test_model_template_renders_smollm2_chatml(spindle_bin, default_model, tmp_path):
    msgs = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "Why?"}]
    r = render(spindle_bin, tmp_path, {"messages": msgs, "add_generation_prompt": True}, "--model", default_model)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == (
        f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n")
    assert r.stderr == b""


def test_model_template_matches_jinja2(spindle_bin, default_model, tmp_path):
    kv = gguf_read_kv(default_model, {"tokenizer.chat_template", "tokenizer.ggml.tokens",
                                      "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
    source = kv["tokenizer.chat_template"]
    tokens = kv["tokenizer.ggml.tokens"]
    specials = {"bos_token": tokens[kv["tokenizer.ggml.bos_token_id"]],
                "eos_token": tokens[kv["tokenizer.ggml.eos_token_id"]]}
    for msgs, gen in [(CONVERSATION, True), (CONVERSATION[1:], False), (CONVERSATION[1:2], True)]:
        context = {"messages": msgs, "add_generation_prompt": gen}
        r = render(spindle_bin, tmp_path, context, "--model", default_model)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode() == hf_render(source, {**specials, **context})


# ---- shared real-world templates ----------------------------------------------------------

SHARED_TEMPLATES = [
    "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "HuggingFaceTB-SmolLM3-3B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "google-gemma-2-2b-it.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "llama-cpp-deepseek-r1.jinja",
]


@pytest.mark.parametrize("name", SHARED_TEMPLATES)
def test_shared_template_matches_jinja2(spindle_bin, tmp_path, name):
    path = template_file(name)
    source = path.read_text(encoding="utf-8")
    context = {"messages": CONVERSATION[1:], "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    expected = hf_render(source, context)
    r = render(spindle_bin, tmp_path, context, "--template", str(path))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == expected


@pytest.mark.parametrize("name", ["Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
                                  "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                  "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                  "Mistral-Small-3.2-24B-Instruct-2506.jinja"])
def test_shared_template_with_tools_matches_jinja2(spindle_bin, tmp_path, name):
    path = template_file(name)
    context = {"messages": TOOL_CONVERSATION, "tools": [WEATHER_TOOL], "add_generation_prompt": True,
               "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    expected = hf_render(path.read_text(encoding="utf-8"), context)
    r = render(spindle_bin, tmp_path, context, "--template", str(path))
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out == expected
    assert "get_weather" in out and "Zürich" in out  # tojson keeps non-ASCII as is


def test_qwen_tools_block_holds_the_tool_as_json(spindle_bin, tmp_path):
    path = template_file("Qwen-Qwen2.5-7B-Instruct.jinja")
    r = render(spindle_bin, tmp_path, {"messages": TOOL_CONVERSATION, "tools": [WEATHER_TOOL]}, "--template", str(path))
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert f"<tools>\n{json.dumps(WEATHER_TOOL, ensure_ascii=False)}\n</tools>" in out
    assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}\n'
            "</tool_call><|im_end|>") in out
    assert "<|im_start|>user\n<tool_response>\n{\"temperature\": 21" in out
    assert not out.endswith("<|im_start|>assistant\n")  # add_generation_prompt absent


# ---- special tokens from the model, and the context's values winning ----------------------

def test_special_tokens_come_from_the_model(spindle_bin, tmp_path):
    model = vocab_model(tmp_path)
    r = render(spindle_bin, tmp_path, {"messages": [{"role": "user", "content": "hi"}]}, "--model", model)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"<s>|</s>|<unk>|</s>|<|sep|>|False|hi"


def test_context_values_win_over_the_models(spindle_bin, tmp_path):
    model = vocab_model(tmp_path)
    context = {"messages": [{"role": "user", "content": "hi"}], "bos_token": "[BOS]", "pad_token": "",
               "cls_token": "[CLS]"}
    r = render(spindle_bin, tmp_path, context, "--model", model)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"[BOS]|</s>|<unk>||<|sep|>|True|hi"


def test_no_token_ids_leave_the_variables_unset(spindle_bin, tmp_path):
    model = vocab_model(tmp_path, template="{{ bos_token is defined }} {{ pad_token is defined }}",
                        bos_token_id=-1, padding_token_id=0xFFFFFFFF)
    r = render(spindle_bin, tmp_path, {"messages": []}, "--model", model)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"False False"


def test_token_id_past_the_vocabulary_exits_2_naming_the_key(spindle_bin, tmp_path):
    model = vocab_model(tmp_path, bos_token_id=99)
    r = render(spindle_bin, tmp_path, {"messages": []}, "--model", model)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "vocab.gguf" in err and "tokenizer.ggml.bos_token_id" in err and "99" in err
    assert r.stdout == b""


def test_model_without_template_exits_2(spindle_bin, tmp_path):
    model = vocab_model(tmp_path, template=None)
    r = render(spindle_bin, tmp_path, {"messages": []}, "--model", model)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "vocab.gguf" in err and "tokenizer.chat_template" in err and "no chat template" in err
    assert r.stdout == b""


# ---- output is exactly the rendered text ----------------------------------------------------

@pytest.mark.parametrize("source,expected", [
    ("<{{ messages[0].content }}>", "<héllo ✓ 漢字>"),
    ("{{ messages[0].content }}\n", "héllo ✓ 漢字"),  # one trailing newline of the source is dropped
    ("{{ messages[0].content }}\n\n", "héllo ✓ 漢字\n"),
    ("  \n\t{{ 'x' }}  ", "  \n\tx  "),
    ("{% if false %}never{% endif %}", ""),
])
def test_stdout_is_exactly_the_rendered_text(spindle_bin, tmp_path, source, expected):
    tpl = tmp_path / "t.jinja"
    tpl.write_bytes(source.encode("utf-8"))
    r = render(spindle_bin, tmp_path, {"messages": [{"role": "user", "content": "héllo ✓ 漢字"}]},
               "--template", str(tpl))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == expected.encode("utf-8")
    assert r.stderr == b""


# ---- templates that fail: exit 1, the message on stderr, nothing on stdout ------------------

def test_raise_exception_exits_1_with_the_templates_message(spindle_bin, tmp_path):
    path = template_file("google-gemma-2-2b-it.jinja")
    r = render(spindle_bin, tmp_path, {"messages": CONVERSATION, "bos_token": "<bos>"}, "--template", str(path))
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.startswith("spindle: error: ") and "System role not supported" in err
    assert r.stdout == b""


def test_parse_error_exits_1_with_line_and_column(spindle_bin, tmp_path):
    tpl = tmp_path / "broken.jinja"
    tpl.write_text("hello\n{% for m in messages %}{{ m.content }}\n{% if m.role %}x\n", encoding="utf-8")
    r = render(spindle_bin, tmp_path, {"messages": []}, "--template", str(tpl))
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "broken.jinja" in err and "line" in err and "column" in err
    assert r.stdout == b""


def test_runtime_error_exits_1(spindle_bin, tmp_path):
    tpl = tmp_path / "bad.jinja"
    tpl.write_text("ok {{ messages[0].content + 1 }}", encoding="utf-8")
    r = render(spindle_bin, tmp_path, {"messages": [{"role": "user", "content": "hi"}]}, "--template", str(tpl))
    assert r.returncode == 1
    assert b"bad.jinja" in r.stderr and b"line 1" in r.stderr
    assert r.stdout == b""


def test_max_steps_stops_a_long_render(spindle_bin, tmp_path):
    tpl = tmp_path / "loop.jinja"
    tpl.write_text("{% for i in range(100000) %}{{ i }}{% endfor %}", encoding="utf-8")
    r = render(spindle_bin, tmp_path, {}, "--template", str(tpl), "--max-steps", "1000")
    assert r.returncode == 1
    assert b"loop.jinja" in r.stderr and b"1000" in r.stderr  # the limit is named
    assert r.stdout == b""
    r = render(spindle_bin, tmp_path, {}, "--template", str(tpl))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == "".join(str(i) for i in range(100000)).encode()


# ---- usage errors: exit 2 ---------------------------------------------------------------------

@pytest.mark.parametrize("text,needle", [
    ("{\"messages\": [", "not valid JSON"),
    ("", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ("\"messages\"", "JSON object"),
])
def test_bad_context_exits_2_naming_the_file(spindle_bin, tmp_path, text, needle):
    ctx = tmp_path / "ctx.json"
    ctx.write_text(text, encoding="utf-8")
    tpl = tmp_path / "t.jinja"
    tpl.write_text("x", encoding="utf-8")
    r = run([spindle_bin, "template", "--template", str(tpl), "--context", str(ctx)])
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "ctx.json" in err and needle in err
    assert r.stdout == b""


def test_invalid_json_message_has_line_and_column(spindle_bin, tmp_path):
    ctx = tmp_path / "ctx.json"
    ctx.write_text("{\n  \"messages\": [1,,]\n}", encoding="utf-8")
    tpl = tmp_path / "t.jinja"
    tpl.write_text("x", encoding="utf-8")
    r = run([spindle_bin, "template", "--template", str(tpl), "--context", str(ctx)])
    assert r.returncode == 2
    assert b"ctx.json: not valid JSON: line 2, column" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--template", "T"], "--context"),
    (["--context", "C"], "--model or --template"),
    (["--model", "M", "--template", "T", "--context", "C"], "not both"),
    (["--template", "T", "--context", "C", "extra"], "extra"),
    (["--template", "T", "--context", "C", "--max-steps", "0"], "--max-steps"),
    (["--template", "missing.jinja", "--context", "C"], "missing.jinja"),
    (["--template", "T", "--context", "missing.json"], "missing.json"),
    (["--model", "missing.gguf", "--context", "C"], "missing.gguf"),
])
def test_usage_errors_exit_2(spindle_bin, tmp_path, args, needle):
    (tmp_path / "T").write_text("x", encoding="utf-8")
    (tmp_path / "C").write_text("{}", encoding="utf-8")
    r = run([spindle_bin, "template", *args], cwd=tmp_path)
    assert r.returncode == 2
    assert needle in r.stderr.decode()
    assert r.stdout == b""


def test_oversized_template_file_exits_2(spindle_bin, tmp_path):
    tpl = tmp_path / "huge.jinja"
    tpl.write_bytes(b"x" * ((1 << 20) + 1))
    r = render(spindle_bin, tmp_path, {}, "--template", str(tpl))
    assert r.returncode == 2
    assert b"huge.jinja" in r.stderr and b"limit" in r.stderr


def test_help_prints_usage(spindle_bin):
    r = run([spindle_bin, "template", "--help"])
    assert r.returncode == 0
    assert b"usage: spindle template" in r.stdout and b"--context" in r.stdout
    r = run([spindle_bin, "help"])
    assert b"template" in r.stdout
