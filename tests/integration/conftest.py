"""Shared fixtures for the integration tests: the real binary and the real models."""
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).parent))


def testdata_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("SPINDLE_TESTDATA") or ROOT.parent / "shared" / "testdata")


@pytest.fixture(scope="session")
def spindle_bin() -> str:
    path = pathlib.Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))
    if not path.is_absolute():
        path = ROOT / path
    assert path.exists(), f"{path} missing: run make first"
    return str(path)


@pytest.fixture(scope="session")
def stories_model() -> str:
    path = testdata_dir() / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"fixture {path} absent")
    return str(path)


@pytest.fixture(scope="session")
def default_model() -> str:
    path = pathlib.Path(os.environ.get("SPINDLE_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not path.exists():
        pytest.skip(f"default model {path} absent (run tools/setup.sh)")
    return str(path)


@pytest.fixture(scope="module")
def stories_server(spindle_bin, stories_model):
    """spindle serving stories260K (fast) with the default settings."""
    from spindle_server import Server

    server = Server(spindle_bin, stories_model)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="session")
def smol_server(spindle_bin, default_model):
    """spindle serving the default model (SmolLM2-135M-Instruct Q4_1) with its own chat template."""
    from spindle_server import Server

    server = Server(spindle_bin, default_model)
    yield server
    assert server.stop() == 0
