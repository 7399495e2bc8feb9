"""Copies include/qwinfer_cdef.h (generated from qwinfer.h by `make cdef`) into
the package when it is built from the repository, so `pip install
./bindings/python` ships the declarations that match the header of this
checkout. Everything else is in pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
CDEF = os.path.join(HERE, "..", "..", "include", "qwinfer_cdef.h")


class BuildPy(build_py):
    def run(self):
        if os.path.exists(CDEF):
            shutil.copyfile(CDEF, os.path.join(HERE, "qwinfer", "qwinfer_cdef.h"))
        super().run()


setup(cmdclass={"build_py": BuildPy})
