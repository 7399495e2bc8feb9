"""qwinfer: Python binding of libqwinfer (cffi, ABI mode over qwinfer_cdef.h).

    from qwinfer import Engine, SamplingParams
    with Engine(model="path/to/qwen3") as llm:
        out = llm.generate(["Hello"], SamplingParams(max_tokens=32, temperature=0))
        print(out[0].outputs[0].text)
"""
from ._ffi import ffi, lib, LIBRARY_PATH, CDEF_PATH
from .aio import AsyncEngine
from .engine import (CompletionOutput, Engine, Logprob, QwError, RequestOutput, SamplingParams,
                     StreamChunk)

__all__ = ["Engine", "AsyncEngine", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "StreamChunk",
           "QwError", "ffi", "lib", "LIBRARY_PATH", "CDEF_PATH", "version"]


def version() -> str:
    """The library's version string."""
    return ffi.string(lib.qw_version_string()).decode()
