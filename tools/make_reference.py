#!/usr/bin/env python3
"""Make spindle's reference data with llama.cpp itself (tests/data/reference_*.json).

The generator is llama.cpp as carried by the llama-cpp-python sdist that tools/peer_build.sh
downloads and builds. The Python bindings are used straight from the extracted sdist (its
directory goes on sys.path, LLAMA_CPP_LIB_PATH points at the built libllama.so), so nothing is
pip-installed and llama.cpp is not compiled a second time.

For every prompt it records: the prompt token ids (llama.cpp's tokenizer, BOS by the model's own
rule), the 32-token greedy continuation (argmax each step, never stopping on EOS; decoded in
2-token steps so it shares the arithmetic of llama.cpp's batched passes, with the classic
1-token decode recorded beside it), its text, and teacher-forced data from one pass over prompt+continuation with logits at
every position: for each position p the log-softmax log-prob of token p+1 and the top-5.

Usage (from the repository root):
    tools/make_reference.py                      # both models, default paths
    tools/make_reference.py --which smollm2      # one model
    PEER_DIR=/work/peer tools/make_reference.py  # peer built elsewhere
See tests/data/README.md for the format.
"""

import argparse
import glob
import hashlib
import importlib
import json
import math
import os
import subprocess
import sys
import time

N_GREEDY = 32
TOP_K = 5
SETTINGS = {
    "n_ctx": 2048,
    "n_threads": 2,
    "n_threads_batch": 2,
    "n_batch": 512,
    "n_ubatch": 512,
    "logits_all": True,
    "flash_attn": False,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": 0,
    "sampling": "greedy (argmax; ties -> lowest id)",
    "n_greedy": N_GREEDY,
}

LONG_PASSAGE = (
    "The lighthouse stood at the edge of the northern cliffs for more than two hundred years. "
    "Its keepers came and went, each one leaving a small mark on the place: a painted door, a "
    "garden of hardy herbs, a shelf of books swollen by the salt air. The last keeper, a quiet "
    "woman named Margaret, kept a journal in which she wrote down the weather every morning and "
    "every evening. She noted the direction of the wind, the colour of the sea, the number of "
    "ships that passed, and the birds that rested on the railing of the gallery. Over the years "
    "the journal grew into a record that scientists later used to study how the climate of the "
    "coast had changed. When the light was finally automated, Margaret moved to a cottage in "
    "the village below, but she still walked up the path each day to look at the sea. Children "
    "from the school would follow her and ask questions about storms, shipwrecks and the great "
    "lamp that had once turned all night long. She answered patiently, and sometimes she let "
    "them read a page or two from the old journals. One winter afternoon, a boy asked her why "
    "she had stayed so long in such a lonely place. Margaret smiled, looked out at the grey "
    "water, and said that"
)

SMOLLM2_CASES = [
    {"prompt": "The capital of France is"},
    {"prompt": "Once upon a time, in a small village by the sea, there lived"},
    {"prompt": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
               "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water?"
               "<|im_end|>\n<|im_start|>assistant\n"},
    {"prompt": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
               "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water?"
               "<|im_end|>\n<|im_start|>assistant\n", "parse_special": True},
    {"prompt": "<|im_start|>user\nWrite a haiku about autumn leaves.<|im_end|>\n"
               "<|im_start|>assistant\n", "parse_special": True},
    {"prompt": "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello! How can I help "
               "you today?<|im_end|>\n<|im_start|>user\nName three primary colours.<|im_end|>\n"
               "<|im_start|>assistant\n", "parse_special": True},
    {"prompt": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
    {"prompt": "#include <stdio.h>\n\nint main(void) {\n    int i;\n    for (i = 0; i < 10; i++)"},
    {"prompt": "Question: What is 17 * 23?\nAnswer:"},
    {"prompt": "1, 1, 2, 3, 5, 8, 13, 21, 34,"},
    {"prompt": "pi = 3.14159265358979, e = 2.718281828, and 1234567 + 7654321 ="},
    {"prompt": "Ingredients for pancakes:\n1. Flour\n2. Milk\n3."},
    {"prompt": "Il était une fois une petite fille qui habitait"},
    {"prompt": "Die Hauptstadt von Deutschland ist Berlin. Die Stadt ist bekannt für"},
    {"prompt": "从前有一座山，山上有一座庙，庙里有"},
    {"prompt": "I love pizza 🍕 and ice cream 🍦! My favourite emoji is 😂 because"},
    {"prompt": "{\"name\": \"Alice\", \"age\": 30, \"languages\": [\"English\", "},
    {"prompt": LONG_PASSAGE},
    {"prompt": "Hello"},
    {"prompt": "   Indented   text\n\n\n\twith\ttabs  and    spaces   \n  \n"},
    {"prompt": "Visit https://example.com/path?query=1&x=2 for more, or e-mail info@example.org."},
]

STORIES_CASES = [
    {"prompt": "Once upon a time"},
    {"prompt": "Once upon a time, there was a little girl named Lily. She liked to"},
    {"prompt": "Tom and his mom went to the park."},
    {"prompt": "One day, a little bird"},
    {"prompt": "The cat was very hungry."},
    {"prompt": "Tim had a big red ball. He"},
    {"prompt": "The sun was shining and the sky was blue."},
    {"prompt": "Mom said, \"Be careful!\""},
    {"prompt": "Hello"},
    {"prompt": "  two  spaces\nand a newline"},
]

MODELS = {
    "smollm2": {
        "model": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "out": "tests/data/reference_smollm2.json",
        "cases": SMOLLM2_CASES,
    },
    "stories260k": {
        "model": os.path.join(os.environ.get("SPINDLE_TESTDATA", "../shared/testdata"),
                              "models/stories260K.gguf"),
        "out": "tests/data/reference_stories260k.json",
        "cases": STORIES_CASES,
    },
}

PY_DEPS = {"numpy": "numpy", "typing_extensions": "typing_extensions",
           "diskcache": "diskcache", "jinja2": "jinja2"}


def die(msg):
    sys.exit(f"make_reference: {msg}")


def find_sdist(peer_dir):
    found = sorted(glob.glob(os.path.join(peer_dir, "llama_cpp_python-*/llama_cpp/__init__.py")))
    if not found:
        die(f"{peer_dir}: no extracted llama_cpp_python-*/ (run tools/peer_build.sh {peer_dir})")
    return os.path.dirname(os.path.dirname(found[-1]))


def find_lib_dir(peer_dir):
    for cand in ("build/bin", "build/src", "build"):
        d = os.path.join(peer_dir, cand)
        if os.path.isfile(os.path.join(d, "libllama.so")):
            return d
    found = glob.glob(os.path.join(peer_dir, "build/**/libllama.so"), recursive=True)
    if not found:
        die(f"{peer_dir}/build: no libllama.so (run tools/peer_build.sh {peer_dir})")
    return os.path.dirname(found[0])


def ensure_py_deps():
    missing = []
    for mod, pkg in PY_DEPS.items():
        try:
            importlib.import_module(mod)
        except ImportError:
            missing.append(pkg)
    if missing:
        print(f"make_reference: pip install {' '.join(missing)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", *missing], check=True)


def import_llama_cpp(peer_dir):
    sdist = find_sdist(peer_dir)
    lib_dir = find_lib_dir(peer_dir)
    os.environ["LLAMA_CPP_LIB_PATH"] = os.path.abspath(lib_dir)
    sys.path.insert(0, os.path.abspath(sdist))
    ensure_py_deps()
    import llama_cpp  # noqa: E402  (path set just above)
    loaded = os.path.realpath(llama_cpp.llama_cpp._lib._name)
    if not loaded.startswith(os.path.realpath(lib_dir)):
        die(f"loaded {loaded}, expected a library under {lib_dir}")
    return llama_cpp, sdist, loaded


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def peer_commit(sdist):
    """Upstream llama.cpp commit of the vendored tree (the sdist ships a shallow .git)."""
    try:
        out = subprocess.run(["git", "-C", os.path.join(sdist, "vendor/llama.cpp"),
                              "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def log_softmax(row, np):
    row = row.astype(np.float64)
    m = row.max()
    return row - (m + math.log(np.exp(row - m).sum()))


def top_k(lp, k, np):
    # Sort by log-prob descending, ties by id ascending (stable sort on -lp).
    idx = np.argsort(-lp, kind="stable")[:k]
    return [[int(i), round(float(lp[i]), 6)] for i in idx]


def argmax(row, np):
    return int(np.argmax(row))  # first maximum = lowest id on ties


def run_case(llm, case, add_bos, np):
    special = bool(case.get("parse_special", False))
    prompt_ids = llm.tokenize(case["prompt"].encode("utf-8"), add_bos=add_bos, special=special)
    n_vocab = llm.n_vocab()

    # Greedy continuations, two ways. llama.cpp's attention sums in a different order for
    # 1-token steps (ggml_vec_dot_f16) than for steps of 2+ tokens (tinyBLAS), so its own
    # token-by-token decode and its one-pass logits disagree at near-ties (see self_check).
    # "greedy_ids" is decoded in 2-token steps (the last token is evaluated again with the
    # new one), so every logit comes from the same arithmetic as the teacher-forced pass;
    # "greedy_ids_single_steps" is the classic 1-token decode, kept for comparison.
    def greedy(two_token_steps):
        llm.reset()
        llm.eval(prompt_ids)
        ids, lps = [], []
        for _ in range(N_GREEDY):
            row = llm.scores[llm.n_tokens - 1, :n_vocab]
            tok = argmax(row, np)
            ids.append(tok)
            lps.append(round(float(log_softmax(row, np)[tok]), 6))
            if two_token_steps:
                prev = llm.input_ids[llm.n_tokens - 1]
                llm.n_tokens -= 1  # eval() drops the cache past n_tokens and recomputes prev
                llm.eval([int(prev), tok])
            else:
                llm.eval([tok])
        return ids, lps

    greedy_ids, greedy_lp = greedy(True)
    single_ids, single_lp = greedy(False)
    greedy = greedy_ids

    # Teacher-forced: one pass over prompt + continuation, logits at every position.
    seq = prompt_ids + greedy
    llm.reset()
    llm.eval(seq)
    scores = llm.scores[: len(seq), :n_vocab]
    positions = []
    tf_argmax_agrees = 0
    for p in range(len(seq) - 1):
        lp = log_softmax(scores[p], np)
        nxt = seq[p + 1]
        positions.append({"pos": p, "next_token": nxt, "logprob": round(float(lp[nxt]), 6),
                          "top": top_k(lp, TOP_K, np)})
        if p >= len(prompt_ids) - 1 and argmax(scores[p], np) == nxt:
            tf_argmax_agrees += 1

    full = llm.detokenize(seq)
    pre = llm.detokenize(prompt_ids)
    text_bytes = full[len(pre):] if full.startswith(pre) else llm.detokenize(greedy)
    out = {"prompt": case["prompt"], "add_bos": add_bos}
    if special:
        out["parse_special"] = True
    out.update({
        "prompt_ids": prompt_ids,
        "greedy_ids": greedy,
        "greedy_text": text_bytes.decode("utf-8", errors="replace"),
        # Log-prob of each greedy token as the incremental decode saw it; the same numbers from
        # the one-pass logits are in "positions". Their gap is llama.cpp's own noise floor.
        "greedy_logprobs": greedy_lp,
        "greedy_ids_single_steps": single_ids,
        "greedy_logprobs_single_steps": single_lp,
        # How many of the 32 greedy tokens are also the argmax of the one-pass logits; below 32
        # means a near-tie that batch shape alone flips (check "top" at those positions).
        "teacher_forced_argmax_agrees": tf_argmax_agrees,
        "positions": positions,
    })
    return out


def dumps_layout(doc):
    """JSON with one header key, one case key and one position per line (small, diffable)."""
    def j(v):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    lines = ["{"]
    head = [k for k in doc if k != "cases"]
    for k in head:
        lines.append(f" {j(k)}:{j(doc[k])},")
    lines.append(' "cases":[')
    for ci, case in enumerate(doc["cases"]):
        lines.append("  {")
        keys = list(case)
        for ki, k in enumerate(keys):
            sep = "," if ki + 1 < len(keys) else ""
            if k == "positions":
                lines.append('   "positions":[')
                pos = case[k]
                for pi, item in enumerate(pos):
                    lines.append("    " + j(item) + ("," if pi + 1 < len(pos) else ""))
                lines.append("   ]" + sep)
            else:
                lines.append(f"   {j(k)}:{j(case[k])}{sep}")
        lines.append("  }" + ("," if ci + 1 < len(doc["cases"]) else ""))
    lines.append(" ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == doc
    return text


def kernel_set(system_info):
    """The CPU kernel set llama.cpp ran, in spindle's words (dev_cpu_isa_rounding()): its
    AVX-512 kernels round differently from its AVX2 ones, so the reference is only
    bit-comparable with a spindle running the same set."""
    flags = dict(part.strip().split(" = ") for part in system_info.split("|") if " = " in part)
    if flags.get("AVX512") == "1":
        return "avx512"
    if flags.get("AVX2") == "1":
        return "avx2"
    return "generic"


def make_one(llama_cpp, sdist, lib, name, spec, np):
    model_path = spec["model"]
    if not os.path.isfile(model_path):
        die(f"{model_path}: model not found")
    llm = llama_cpp.Llama(
        model_path=model_path, n_ctx=SETTINGS["n_ctx"], n_batch=SETTINGS["n_batch"],
        n_ubatch=SETTINGS["n_ubatch"], n_threads=SETTINGS["n_threads"],
        n_threads_batch=SETTINGS["n_threads_batch"], logits_all=True,
        flash_attn=SETTINGS["flash_attn"], n_gpu_layers=0, verbose=False)
    add_bos = bool(llm._model.add_bos_token())
    commit = peer_commit(sdist)
    cases = []
    t0 = time.time()
    for case in spec["cases"]:
        cases.append(run_case(llm, case, add_bos, np))
    dt = time.time() - t0
    gaps, two_token_gaps, single_same = [], [], 0
    for c in cases:
        first = len(c["prompt_ids"]) - 1
        single_same += c["greedy_ids_single_steps"] == c["greedy_ids"]
        for i, lp in enumerate(c["greedy_logprobs_single_steps"]):
            if c["greedy_ids_single_steps"][: i + 1] == c["greedy_ids"][: i + 1]:
                gaps.append(abs(lp - c["positions"][first + i]["logprob"]))
        for i, lp in enumerate(c["greedy_logprobs"]):
            two_token_gaps.append(abs(lp - c["positions"][first + i]["logprob"]))
    self_check = {
        "two_token_steps_vs_one_pass_max": round(max(two_token_gaps), 6),
        "single_token_steps_identical_to_greedy_ids": single_same,
        "what": "|greedy_logprobs_single_steps[i] - positions[len(prompt_ids)-1+i].logprob| over all "
                "cases while the two decodes agree: 1-token steps vs one pass, same llama.cpp build",
        "max": round(max(gaps), 6),
        "mean": round(sum(gaps) / len(gaps), 6),
        "teacher_forced_argmax_agrees": sum(c["teacher_forced_argmax_agrees"] for c in cases),
        "of": N_GREEDY * len(cases),
    }
    system_info = llama_cpp.llama_print_system_info().decode().strip()
    doc = {
        "model": os.path.basename(model_path),
        "model_sha256": sha256_file(model_path),
        "generator": f"llama-cpp-python {llama_cpp.__version__} (sdist), llama.cpp "
                     f"ggml-org/llama.cpp@{commit[:9]}, tools/make_reference.py",
        "llama_cpp_commit": commit,
        "system_info": system_info,
        "kernel_set": kernel_set(system_info),
        "settings": dict(SETTINGS, add_bos=add_bos),
        "top_k": TOP_K,
        "self_check": self_check,
        "cases": cases,
    }
    llm.close()
    os.makedirs(os.path.dirname(spec["out"]), exist_ok=True)
    with open(spec["out"], "w", encoding="utf-8") as f:
        f.write(dumps_layout(doc))
    size = os.path.getsize(spec["out"])
    print(f"{spec['out']}: {len(cases)} cases, {size} bytes, {dt:.1f} s ({lib})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--which", choices=["all", *MODELS], default="all")
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR", "build/peer-avx2"),
                    help="llama.cpp build (PEER_ISA=avx2 tools/peer_build.sh build/peer-avx2)")
    args = ap.parse_args()
    llama_cpp, sdist, lib = import_llama_cpp(args.peer_dir)
    import numpy as np
    names = list(MODELS) if args.which == "all" else [args.which]
    for name in names:
        make_one(llama_cpp, sdist, lib, name, MODELS[name], np)


if __name__ == "__main__":
    main()
