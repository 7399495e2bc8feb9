"""Loading libqwinfer and its declarations (cffi, ABI mode: no compiler).

The declarations come from qwinfer_cdef.h, which `make cdef` generates from
the public header, so no enum value or struct layout is copied by hand.
Looked up in this order:
  cdef:    $QWINFER_CDEF; the package's copy (pip install from the
           repository); include/qwinfer_cdef.h of the repository this file
           sits in; <prefix>/include/qwinfer_cdef.h beside the library found.
  library: $QWINFER_LIBRARY; a libqwinfer.so* in the package; the repository's
           build/ folder; the system (ctypes.util.find_library, pkg-config).
"""
import ctypes.util
import glob
import os
import subprocess

import cffi

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))


def _pkg_config_libdir():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "qwinfer"], capture_output=True,
                             text=True, timeout=10, check=False)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _find_library():
    env = os.environ.get("QWINFER_LIBRARY")
    if env:
        return env
    for pattern in (os.path.join(_HERE, "libqwinfer.so*"), os.path.join(_REPO, "build", "libqwinfer.so")):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    libdir = _pkg_config_libdir()
    if libdir and os.path.exists(os.path.join(libdir, "libqwinfer.so")):
        return os.path.join(libdir, "libqwinfer.so")
    name = ctypes.util.find_library("qwinfer")
    if name:
        return name
    raise OSError("libqwinfer not found: set QWINFER_LIBRARY to the path of libqwinfer.so, "
                  "or install the library (make install) where the system finds it")


def _find_cdef(library):
    candidates = [os.environ.get("QWINFER_CDEF"), os.path.join(_HERE, "qwinfer_cdef.h"),
                  os.path.join(_REPO, "include", "qwinfer_cdef.h")]
    if library and os.path.isabs(library):
        libdir = os.path.dirname(os.path.realpath(library))
        candidates.append(os.path.join(libdir, "..", "include", "qwinfer_cdef.h"))
    for c in candidates:
        if c and os.path.exists(c):
            return c
    raise OSError("qwinfer_cdef.h not found: set QWINFER_CDEF, or install the package from the "
                  "repository (pip install ./bindings/python), or `make install` the library")


ffi = cffi.FFI()
LIBRARY_PATH = _find_library()
CDEF_PATH = _find_cdef(LIBRARY_PATH)
with open(CDEF_PATH, encoding="utf-8") as _f:
    ffi.cdef(_f.read())
lib = ffi.dlopen(LIBRARY_PATH)
