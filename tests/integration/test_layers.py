"""tools/check_layers.py (`make layers`): the real tree passes and prints its folder graph;
a copy of the tree with one include against the layers, a cycle, the device API reached
from the HTTP side through another header, another folder's internal header or an
unlisted folder fails, naming the file and the rule. The sub-folder layers server/api and
server/http are checked the same way (http uses api, never the reverse), and at the link
level too: an object of server/api that uses a symbol of server/http fails (--objects)."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"
SOURCE_SUFFIXES = {".c", ".h", ".cu", ".cuh"}


def run_checker(root, *args):
    return subprocess.run([sys.executable, str(CHECKER), str(root), *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def tree(tmp_path):
    """A copy of the repository's sources and its layer list, to break on purpose."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [p for p in listed.splitlines() if pathlib.Path(p).suffix in SOURCE_SUFFIXES]
    assert len(files) > 100, "the source listing looks wrong"
    for rel in files + ["tools/layers.txt"]:
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, dst)
    return tmp_path


def add_include(path, header):
    text = path.read_text()
    path.write_text(f'#include "{header}"\n' + text)


def test_real_tree_passes_and_prints_one_line_per_folder():
    r = run_checker(ROOT)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split("->", 1) for line in r.stdout.splitlines())
    lines = {k.strip(): v.split() for k, v in lines.items()}
    for folder in ["common/", "quant/", "sample/", "gguf/", "tokenizer/", "template/", "gpu/", "model/",
                   "scheduler/", "config/", "server/api/", "server/http/", "cli/"]:
        assert folder in lines, f"{folder} missing from the graph:\n{r.stdout}"
    assert "server/" not in lines, "server/ is two layers, server/api and server/http"
    assert "gpu/" in lines["model/"] and "model/" not in lines["gpu/"]
    assert "model/" in lines["scheduler/"]
    for side in ["server/api/", "server/http/"]:
        assert "gpu/" not in lines[side] and "model/" not in lines[side], "the HTTP side must not see the device API"
    assert "server/api/" in lines["server/http/"] and "server/http/" not in lines["server/api/"]
    assert "server/http/" in lines["cli/"]


def test_copy_passes_before_it_is_broken(tree):
    r = run_checker(tree)
    assert r.returncode == 0, r.stderr


def test_include_from_gpu_into_model_fails(tree):
    add_include(tree / "gpu" / "device.c", "model/model.h")
    r = run_checker(tree)
    assert r.returncode == 1
    assert "gpu/device.c: includes model/model.h, but gpu/ does not use model/" in r.stderr
    assert "include cycle between folders" in r.stderr and "gpu -> model" in r.stderr.replace("/", "")


BROKEN_INCLUDES = {
    "upward_without_a_cycle": ("quant/quant.c", "tokenizer/tokenizer.h",
                               ["quant/quant.c: includes tokenizer/tokenizer.h, but quant/ does not use tokenizer/"]),
    "another_folders_internal_header": (
        "scheduler/queue.c", "model/model_internal.h",
        ["scheduler/queue.c: includes model/model_internal.h, an internal header of model/"]),
    "http_side_reaching_the_model_through_sched_h": (
        "scheduler/sched.h", "model/model.h", ["scheduler/sched.h -> model/model.h", "must never see model/"]),
    "sub_folder_header_from_outside_its_top_folder": (
        "model/forward.c", "gpu/cuda/cuda_backend.h",
        ["model/forward.c: includes gpu/cuda/cuda_backend.h, an internal header of gpu/"]),
    "api_layer_including_the_transport": (
        "server/api/chat.c", "server/http/http.h",
        ["server/api/chat.c: includes server/http/http.h, but server/api/ does not use server/http/",
         "include cycle between folders"]),
    "api_public_header_including_the_transport": (
        "server/api/api.h", "server/http/http.h",
        ["server/api/api.h: includes server/http/http.h, but server/api/ does not use server/http/"]),
    "transport_internal_header_from_the_api_layer": (
        "server/api/tools.c", "server/http/http_internal.h",
        ["server/api/tools.c: includes server/http/http_internal.h, an internal header of server/http/"]),
    "api_internal_header_from_the_transport": (
        "server/http/http_generation.c", "server/api/api_internal.h",
        ["server/http/http_generation.c: includes server/api/api_internal.h, an internal header of server/api/"]),
    "cli_skipping_to_the_api_internals": (
        "cli/cmd_serve.c", "server/api/api_internal.h",
        ["cli/cmd_serve.c: includes server/api/api_internal.h, an internal header of server/api/"]),
    "transport_reaching_the_model": (
        "server/http/http.h", "model/model.h",
        ["server/http/http.h: reaches model/model.h", "server/http/ must never see model/"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_INCLUDES))
def test_include_against_the_rules_fails(tree, case):
    file, header, messages = BROKEN_INCLUDES[case]
    add_include(tree / file, header)
    r = run_checker(tree)
    assert r.returncode == 1
    for message in messages:
        assert message in r.stderr, r.stderr


def test_file_left_in_the_parent_of_two_layers_fails(tree):
    (tree / "server" / "stray.c").write_text('#include "server/api/api.h"\n')
    r = run_checker(tree)
    assert r.returncode == 1
    assert "server/: has sources but is not in" in r.stderr


def compile_object(tmp_path, objects, rel, source):
    src = tmp_path / (pathlib.Path(rel).stem + ".c")
    src.write_text(source)
    out = objects / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-c", str(src), "-o", str(out)], check=True, timeout=60)


def test_api_object_calling_into_the_transport_fails(tree, tmp_path):
    objects = tmp_path / "obj"
    compile_object(tmp_path, objects, "server/http/http.o", "int srv__send_json(int status) { return status; }\n")
    compile_object(tmp_path, objects, "server/api/responses.o",
                   "int srv__send_json(int status);\nint stored(void) { return srv__send_json(200); }\n")
    compile_object(tmp_path, objects, "server/http/http_generation.o",
                   "int stored(void);\nint answer(void) { return stored(); }\n")
    r = run_checker(tree, "--objects", str(objects))
    assert r.returncode == 1
    assert ("server/api/responses.o: uses srv__send_json, defined in server/http/http.o, but server/api/ does not "
            "use server/http/") in r.stderr, r.stderr
    assert "http_generation.o" not in r.stderr, "http calling down into api is the rule, not a problem"


def test_built_objects_pass_the_symbol_check():
    objects = ROOT / "build" / "obj"
    if not (objects / "server" / "api").is_dir() or not (objects / "server" / "http").is_dir():
        pytest.skip("build/obj has no server/api and server/http objects (run make first)")
    r = run_checker(ROOT, "--objects", str(objects), "--only", "server")
    assert r.returncode == 0, r.stderr


def test_unlisted_folder_fails(tree):
    (tree / "newthing").mkdir()
    (tree / "newthing" / "newthing.c").write_text('#include "common/status.h"\n')
    r = run_checker(tree)
    assert r.returncode == 1
    assert "newthing/: has sources but is not in" in r.stderr


def test_layer_list_with_a_cycle_fails(tree):
    layers = tree / "tools" / "layers.txt"
    layers.write_text(layers.read_text().replace("quant: common", "quant: common model"))
    r = run_checker(tree)
    assert r.returncode == 1
    assert "the layers themselves form a cycle" in r.stderr
