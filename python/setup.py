"""Packages fsdp_mlir with the native module `_fsdp_mlir` of a CMake build
(build/python_packages/fsdp_mlir; FSDP_MLIR_BUILD_DIR names the build tree,
../build by default). The module loads that build's libFsdpMlir.so and the
programs it compiles link that build's runtime, so the build stays where it
is. Metadata is in pyproject.toml."""

import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def native_module():
    build = os.environ.get("FSDP_MLIR_BUILD_DIR",
                           os.path.join(HERE, "..", "build"))
    pattern = os.path.join(build, "python_packages", "fsdp_mlir",
                           "_fsdp_mlir*.so")
    found = glob.glob(pattern)
    if len(found) != 1:
        raise SystemExit(f"expected one native module {pattern}, found "
                         f"{len(found)}: build the project (ninja -C build) "
                         f"or set FSDP_MLIR_BUILD_DIR to its build tree")
    return found[0]


class BuildPy(build_py):
    """The Python files, then the native module beside them."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "fsdp_mlir")
        self.mkpath(package)
        self.copy_file(native_module(), package)


class NativeDistribution(Distribution):
    """A distribution with a native module: a platform-specific wheel."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=NativeDistribution)
