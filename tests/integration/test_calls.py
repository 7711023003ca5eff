"""tools/check_calls.py (`make calls`, run by `make layers`): the objects of scheduler/,
server/api, server/http and kvcache/ pass tools/calls.txt and the graph it prints has the
leaves it promises; nm output with one call against the order (a leaf calling a phase, a
phase calling across, http_send.c calling back up into a generation), a cycle, an
unlisted file or a list with a cycle fails, naming the call and the rule; nested folder
names (server/http) are sections of their own."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_calls.py"
RULES = ROOT / "tools" / "calls.txt"
OBJS = ROOT / "build" / "obj"


def run_checker(*args, nm=None):
    return subprocess.run([sys.executable, str(CHECKER), *map(str, args)], input=nm, capture_output=True, text=True,
                          timeout=60)


def listed_objects():
    """The objects of the files tools/calls.txt lists, as the build wrote them."""
    objects, folder = [], None
    for line in RULES.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("["):
            folder = line.strip("[]")
        elif ":" in line:
            objects.append(OBJS / folder / (line.split(":", 1)[0].strip()[:-2] + ".o"))
    return objects


@pytest.fixture(scope="module")
def real_nm():
    """`nm -A` of the listed folders' objects (the build's), to break on purpose."""
    objects = listed_objects()
    missing = [o for o in objects if not o.exists()]
    if missing:
        pytest.skip(f"{missing[0]} missing: run make first")
    return subprocess.run(["nm", "-A", *map(str, objects)], capture_output=True, text=True, check=True).stdout


def test_real_objects_pass_and_the_leaves_call_nothing(real_nm):
    r = run_checker("--objs", OBJS, *listed_objects())
    assert r.returncode == 0, r.stderr
    graph = {}
    for line in r.stdout.splitlines():
        if "->" in line:
            name, callees = line.split("->", 1)
            graph[name.strip()] = callees.split()
    for leaf in ["clock.c", "running.c", "draw.c", "stop_match.c", "policy.c"]:
        assert graph[f"scheduler/{leaf}"] == [], f"{leaf} is a leaf:\n{r.stdout}"
    assert "tick.c" in graph["scheduler/sched.c"] and "sched.c" not in graph["scheduler/tick.c"]
    assert "clock.c" in graph["scheduler/tick.c"], "the phases read the clock from its leaf"
    for leaf in ["server/api/json_text.c", "server/api/random.c", "server/http/http_send.c", "server/http/metrics.c",
                 "kvcache/kvtier_entries.c"]:
        assert graph[leaf] == [], f"{leaf} is a leaf:\n{r.stdout}"
    assert "http_send.c" in graph["server/http/http_generation.c"], "a generation answers through http_send.c"
    assert "http.c" not in graph["server/http/http_generation.c"] and "http.c" not in graph["server/http/ui.c"]
    assert "openai_fields.c" not in graph["server/api/errors.c"] and "openai_request.c" not in graph[
        "server/api/tools.c"]
    assert graph["kvcache/kvtier_disk.c"] == ["kvtier_entries.c"], "the disk tier never calls back into kvtier.c"
    for folder in ["scheduler", "server/api", "server/http", "kvcache"]:
        assert f"{folder}/: " in r.stdout, f"no graph of {folder}/:\n{r.stdout}"


def test_copy_of_the_real_nm_passes_before_it_is_broken(real_nm):
    r = run_checker("--objs", OBJS, "--nm", "-", nm=real_nm)
    assert r.returncode == 0, r.stderr


def obj(name, folder="scheduler"):
    return f"{OBJS}/{folder}/{name}.o"


BROKEN_CALLS = {
    "leaf_calling_a_phase": ([f"{obj('clock')}:                  U sched__tick"], [
        "scheduler/clock.c: calls sched__tick (scheduler/tick.c), but clock.c does not call down to tick.c",
        "call cycle between files of scheduler/",
    ]),
    "phase_calling_across": ([f"{obj('embed')}:                  U sched__spec_plan"], [
        "scheduler/embed.c: calls sched__spec_plan (scheduler/spec_tick.c), but embed.c does not call down to "
        "spec_tick.c",
    ]),
    "cycle_between_a_leaf_and_its_caller": ([f"{obj('running')}:                  U sched__request_end"], [
        "scheduler/running.c: calls sched__request_end (scheduler/end_tick.c)",
        "call cycle between files of scheduler/: end_tick.c -> running.c -> end_tick.c",
    ]),
    "unlisted_file": ([f"{obj('extra')}: 0000000000000000 T sched__extra"],
                      ["scheduler/extra.c: not listed in tools/calls.txt [scheduler]"]),
    # server/http: the responses' leaf calling back up into a generation
    "http_send_calling_back_up": ([f"{obj('http_send', 'server/http')}:                  U srv__generation_start"], [
        "server/http/http_send.c: calls srv__generation_start (server/http/http_generation.c), but http_send.c does "
        "not call down to http_generation.c: the call runs back up or across",
        "call cycle between files of server/http/: http_generation.c -> http_send.c -> http_generation.c",
    ]),
    "http_answer_calling_across": ([f"{obj('ui', 'server/http')}:                  U srv__generation_start"], [
        "server/http/ui.c: calls srv__generation_start (server/http/http_generation.c), but ui.c does not call down "
        "to http_generation.c",
    ]),
    "http_unlisted_file": ([f"{obj('http_extra', 'server/http')}: 0000000000000000 T srv__extra"],
                           ["server/http/http_extra.c: not listed in tools/calls.txt [server/http]"]),
    # server/api: the JSON text leaf calling errors.c, the cycle the split broke
    "api_leaf_calling_back_up": ([f"{obj('json_text', 'server/api')}:                  U srv__fail"], [
        "server/api/json_text.c: calls srv__fail (server/api/errors.c), but json_text.c does not call down to "
        "errors.c",
        "call cycle between files of server/api/",
    ]),
    # kvcache: the entries calling the disk tier
    "kvcache_leaf_calling_back_up": ([f"{obj('kvtier_entries', 'kvcache')}:                  U kvt__disk_remove"], [
        "kvcache/kvtier_entries.c: calls kvt__disk_remove (kvcache/kvtier_disk.c), but kvtier_entries.c does not "
        "call down to kvtier_disk.c",
        "call cycle between files of kvcache/: kvtier_disk.c -> kvtier_entries.c -> kvtier_disk.c",
    ]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CALLS))
def test_call_against_the_order_fails(real_nm, case):
    extra, expected = BROKEN_CALLS[case]
    r = run_checker("--objs", OBJS, "--nm", "-", nm=real_nm + "\n".join(extra) + "\n")
    assert r.returncode == 1, r.stdout
    for text in expected:
        assert text in r.stderr, f"{text!r} not in:\n{r.stderr}"


SYNTHETIC_RULES = """
[pkg]
leaf.c:
mid.c: leaf.c
top.c: mid.c
"""


def synthetic_nm(objs, calls):
    """nm -A lines for pkg/{leaf,mid,top}.o: each defines fn_<name>; calls: (caller, callee)."""
    lines = [f"{objs}/pkg/{n}.o: 0000000000000000 T fn_{n}" for n in ("leaf", "mid", "top")]
    lines += [f"{objs}/pkg/{a}.o:                  U fn_{b}" for a, b in calls]
    lines += [f"{objs}/pkg/leaf.o:                  U memcpy"]  # outside the folder: ignored
    return "\n".join(lines) + "\n"


def test_synthetic_order_down_passes_transitively(tmp_path):
    (tmp_path / "calls.txt").write_text(SYNTHETIC_RULES)
    nm = synthetic_nm(tmp_path, [("top", "mid"), ("top", "leaf"), ("mid", "leaf")])
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=nm)
    assert r.returncode == 0, r.stderr
    assert "pkg/top.c -> leaf.c mid.c" in r.stdout


def test_synthetic_back_call_and_cycle_fail(tmp_path):
    (tmp_path / "calls.txt").write_text(SYNTHETIC_RULES)
    nm = synthetic_nm(tmp_path, [("top", "mid"), ("mid", "leaf"), ("leaf", "top")])
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=nm)
    assert r.returncode == 1
    assert "pkg/leaf.c: calls fn_top (pkg/top.c), but leaf.c does not call down to top.c" in r.stderr
    assert "call cycle between files of pkg/: leaf.c -> top.c -> mid.c -> leaf.c" in r.stderr


def test_list_with_a_cycle_fails(tmp_path):
    (tmp_path / "calls.txt").write_text("[pkg]\nleaf.c: top.c\nmid.c: leaf.c\ntop.c: mid.c\n")
    nm = synthetic_nm(tmp_path, [])
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=nm)
    assert r.returncode == 1
    assert "the list has a cycle" in r.stderr


def test_listed_file_without_an_object_fails(tmp_path):
    (tmp_path / "calls.txt").write_text(SYNTHETIC_RULES + "gone.c: leaf.c\n")
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=synthetic_nm(tmp_path, []))
    assert r.returncode == 1
    assert "[pkg] gone.c is listed but has no object" in r.stderr


NESTED_RULES = """
[srv/api]
fields.c:
request.c: fields.c

[srv/http]
send.c:
http.c: send.c
"""


def nested_nm(objs, calls):
    """nm -A lines for srv/api/{fields,request}.o and srv/http/{send,http}.o, each defining
    fn_<name>; calls: (caller object, callee function)."""
    lines = [f"{objs}/srv/api/{n}.o: 0000000000000000 T fn_{n}" for n in ("fields", "request")]
    lines += [f"{objs}/srv/http/{n}.o: 0000000000000000 T fn_{n}" for n in ("send", "http")]
    lines += [f"{objs}/{a}.o:                  U {b}" for a, b in calls]
    return "\n".join(lines) + "\n"


def test_nested_folders_are_sections_of_their_own(tmp_path):
    """[srv/http] reads srv/http/ only: a call from it into srv/api (another folder, the
    layer check's business) is not a call between its files, and a file of srv/api with
    the name of one of srv/http is not confused with it."""
    (tmp_path / "calls.txt").write_text(NESTED_RULES)
    nm = nested_nm(tmp_path, [("srv/http/http", "fn_send"), ("srv/http/send", "fn_request"),
                              ("srv/api/request", "fn_fields")])
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=nm)
    assert r.returncode == 0, r.stderr
    assert "srv/http/http.c -> send.c" in r.stdout and "srv/http/send.c ->\n" in r.stdout + "\n"
    assert "srv/api/request.c -> fields.c" in r.stdout
    assert "srv/http/: 2 files, 1 calls between files" in r.stdout


def test_nested_folder_back_call_and_cycle_fail(tmp_path):
    (tmp_path / "calls.txt").write_text(NESTED_RULES)
    nm = nested_nm(tmp_path, [("srv/http/http", "fn_send"), ("srv/http/send", "fn_http")])
    r = run_checker("--objs", tmp_path, "--rules", tmp_path / "calls.txt", "--nm", "-", nm=nm)
    assert r.returncode == 1
    assert "srv/http/send.c: calls fn_http (srv/http/http.c), but send.c does not call down to http.c" in r.stderr
    assert "call cycle between files of srv/http/: http.c -> send.c -> http.c" in r.stderr
    assert "srv/api" not in r.stderr
