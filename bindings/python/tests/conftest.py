"""Fixtures: a tiny random Qwen3 model made by the build's qw-makemodel.
QWINFER_BUILD (default: the repository's build/) names the build directory;
QWINFER_LIBRARY is set to its libqwinfer.so unless given."""
import os
import subprocess

import pytest

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("QWINFER_BUILD", os.path.join(REPO, "build"))
os.environ.setdefault("QWINFER_LIBRARY", os.path.join(BUILD, "libqwinfer.so"))
os.environ.setdefault("QWINFER_CDEF", os.path.join(REPO, "include", "qwinfer_cdef.h"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny"
    subprocess.run([os.path.join(BUILD, "bin", "qw-makemodel"), "--shape", "tiny", "--dtype", "bf16",
                    "--seed", "7", "--out", str(out)], check=True, capture_output=True)
    return str(out)
