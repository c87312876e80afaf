"""Builds the dsa PyTorch extension against the installed PyTorch (no network needed):

    pip install --no-build-isolation ./python

The C++/CUDA library is built by the project's CMake (target dsa, sm_90a) and linked in; only
the thin binding (csrc/torch_ops.cpp) is compiled here. DSA_PREBUILT_LIB=/path/libdsa.a skips
the CMake step.
"""
import os
import pathlib
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def libdsa():
    prebuilt = os.environ.get("DSA_PREBUILT_LIB")
    if prebuilt:
        return prebuilt
    build = pathlib.Path(os.environ.get("DSA_CMAKE_BUILD_DIR", ROOT / "build-python"))
    generator = ["-G", "Ninja"] if subprocess.call(["ninja", "--version"], stdout=subprocess.DEVNULL) == 0 else []
    subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
                           "-DDSA_BUILD_TESTS=OFF", "-DDSA_BUILD_TOOLS=OFF"])
    subprocess.check_call(["cmake", "--build", str(build), "--target", "dsa", "-j", str(os.cpu_count() or 4)])
    return str(build / "libdsa.a")


setup(
    name="dsa",
    version="0.1.0",
    description="Sparse MLA attention (DeepSeek Sparse Attention) for Hopper, as PyTorch ops",
    packages=["dsa"],
    ext_modules=[
        CUDAExtension(
            name="dsa._C",
            sources=["csrc/torch_ops.cpp"],
            include_dirs=[str(ROOT / "include")],
            extra_objects=[libdsa()],
            extra_compile_args={"cxx": ["-O2"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
