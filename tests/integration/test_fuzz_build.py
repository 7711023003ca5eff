"""The libFuzzer harnesses build and run (`make fuzz-build`, tools/fuzz.sh): every
tests/fuzz/fuzz_*.c links against the instrumented library and runs clean over its
committed seeds plus a few mutations (`tools/fuzz.sh --runs`), so a harness that stops
linking or crashes on a seed fails `make test`; a missing fixture is a counted SKIP, a
failure under CI=true. tools/fuzz.sh itself, on throwaway harnesses: it names the one that
does not link and the one that crashes, goes on with the others, and prints a summary.

fuzz_mask's seeds include hostile constraints such as `(.*){10}x`, which took seconds per mask
before the grammar compiled repeated loops as one loop and bounded every mask's work: they
must stay within the harness's time bound per mask. Needs clang and its compiler-rt
(tools/setup.sh installs them)."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FUZZ_SH = ROOT / "tools" / "fuzz.sh"
HARNESSES = sorted(p.stem[len("fuzz_"):] for p in (ROOT / "tests" / "fuzz").glob("fuzz_*.c"))
REQUIRE = os.environ.get("CI") == "true" or os.environ.get("SPINDLE_REQUIRE_FIXTURES") == "1"
# The build `make test` makes (build/fuzz-O0: a quarter of -O1's compile time, the same sanitizers).
FUZZ_OPT = os.environ.get("FUZZ_OPT") or "-O0"

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("FUZZ_CC", "clang")) is None and not REQUIRE,
                                reason="clang absent (tools/setup.sh installs it)")


def fuzz_sh(*args, env=None, timeout=600):
    e = dict(os.environ)
    e.pop("MAKEFLAGS", None)  # pytest under make: fuzz.sh runs its own make with -j
    e.pop("MAKELEVEL", None)
    e["FUZZ_OPT"] = FUZZ_OPT
    e.update(env or {})
    return subprocess.run([str(FUZZ_SH), *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)


def fuzz_dir():
    e = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    e["FUZZ_OPT"] = FUZZ_OPT
    out = subprocess.run(["make", "-s", "--no-print-directory", "fuzz-dir"], cwd=ROOT, env=e, capture_output=True,
                         text=True, check=True).stdout.strip()
    return ROOT / out


def summary(stdout):
    """{name: (build, run)} from fuzz.sh's summary rows."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"  fuzz_(\S+)\s+(built|BUILD FAILED)\s+(ran, partly skipped|ran|skipped|CRASHED|-)", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


@pytest.fixture(scope="module")
def built():
    """Every harness built (make fuzz-build through fuzz.sh --build-only)."""
    r = fuzz_sh("--build-only")
    rows = summary(r.stdout)
    assert set(rows) == set(HARNESSES), r.stdout + r.stderr
    failed = [n for n, (b, _) in rows.items() if b != "built"]
    assert not failed, f"harnesses that do not build: {failed}\n{r.stderr[-4000:]}"
    assert r.returncode == 0, r.stdout + r.stderr
    return rows


def test_every_harness_builds(built):
    assert "mask" in built and "request" in built and "gbnf" in built


def test_every_harness_runs_clean_over_its_seeds(built):
    # bounds for an instrumented -O0 build on a loaded machine: 1 s a mask, 5 s the preparation
    bounds = {"SPINDLE_FUZZ_MASK_MS": os.environ.get("SPINDLE_FUZZ_MASK_MS", "1000"),
              "SPINDLE_FUZZ_PREPARE_MS": os.environ.get("SPINDLE_FUZZ_PREPARE_MS", "5000")}
    r = fuzz_sh("--runs", "20", env=bounds, timeout=300)
    rows = summary(r.stdout)
    assert set(rows) == set(HARNESSES), r.stdout + r.stderr
    logs = fuzz_dir() / "logs"
    crashed = {n for n, (_, run) in rows.items() if run == "CRASHED"}
    assert not crashed, f"harnesses that crashed on their seeds: {sorted(crashed)}\n{r.stderr[-4000:]}"
    skipped = {n: run for n, (_, run) in rows.items() if "skipped" in run}
    if REQUIRE:
        assert not skipped, f"skipped under CI: {skipped}\n{r.stdout}"
    for name, run in skipped.items():
        assert "SKIP fuzz_" in (logs / f"{name}.run.log").read_text(errors="replace"), name


NOOP = "int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d, (void)n; return 0; }\n"
SELFTEST = {
    "selftest_ok": NOOP,
    "selftest_nolink": ("int sp_no_such_function_anywhere(void);\n"
                        "int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) {\n"
                        "    (void)d, (void)n; return sp_no_such_function_anywhere(); }\n"),
    "selftest_crash": ("#include <stdlib.h>\n#include <string.h>\n"
                       "int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) {\n"
                       "    if (n >= 4 && memcmp(d, \"boom\", 4) == 0) abort();\n    return 0; }\n"),
    "selftest_skip": ('#include "tests/fuzz/fuzz_skip.h"\n'
                      "int LLVMFuzzerInitialize(int *c, char ***v) { (void)c, (void)v;\n"
                      '    fuzz_skip("fuzz_selftest_skip", "no /nonexistent/fixture"); fuzz_skip_all(); return 0; }\n'
                      + NOOP),
}


@pytest.fixture
def selftest_harnesses(tmp_path, built):
    for name, src in SELFTEST.items():
        (tmp_path / f"fuzz_{name}.c").write_text(src)
    seeds = tmp_path / "corpus" / "selftest_crash"
    seeds.mkdir(parents=True)
    (seeds / "boom").write_bytes(b"boom")
    yield tmp_path
    out = fuzz_dir()
    for name in SELFTEST:
        for p in [out / f"fuzz_{name}", out / f"fuzz_{name}.d", out / "logs" / f"{name}.build.log",
                  out / "logs" / f"{name}.run.log"]:
            p.unlink(missing_ok=True)
        for d in [out / "crashes" / name, out / "scratch" / name]:
            shutil.rmtree(d, ignore_errors=True)


def test_fuzz_sh_names_each_failure_and_goes_on(selftest_harnesses):
    env = {"FUZZ_HARNESS_DIR": str(selftest_harnesses), "CI": "", "SPINDLE_REQUIRE_FIXTURES": "0"}
    r = fuzz_sh("--runs", "5", env=env, timeout=120)
    rows = summary(r.stdout)
    assert rows == {"selftest_crash": ("built", "CRASHED"), "selftest_nolink": ("BUILD FAILED", "-"),
                    "selftest_ok": ("built", "ran"), "selftest_skip": ("built", "skipped")}, r.stdout + r.stderr
    assert "fuzz_selftest_nolink failed to build" in r.stderr and "sp_no_such_function_anywhere" in r.stderr
    assert "fuzz_selftest_crash crashed" in r.stderr
    assert "SKIP fuzz_selftest_skip: no /nonexistent/fixture" in r.stdout
    assert "4 harnesses: 3 built, 1 ran, 1 crashed, 1 skipped (whole or in part), 1 failed to build" in r.stdout
    assert r.returncode == 1


def test_a_skip_fails_under_ci(selftest_harnesses):
    env = {"FUZZ_HARNESS_DIR": str(selftest_harnesses)}
    r = fuzz_sh("--runs", "5", "selftest_ok", "selftest_skip", env={**env, "CI": "", "SPINDLE_REQUIRE_FIXTURES": "0"},
                timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 harnesses: 2 built, 1 ran, 0 crashed, 1 skipped" in r.stdout
    r = fuzz_sh("--runs", "5", "selftest_ok", "selftest_skip", env={**env, "CI": "true"}, timeout=120)
    assert r.returncode == 1 and "skips are failures here" in r.stderr, r.stdout + r.stderr
