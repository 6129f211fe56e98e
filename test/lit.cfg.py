# -*- Python -*-
# lit configuration for the fsdp-mlir regression tests.

import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "FSDP"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "models", "CMakeLists.txt", "README.md",
                   "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.fsdp_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%fsdp_bin", config.fsdp_tools_dir))
config.substitutions.append(("%fsdp_build", config.fsdp_obj_root))
config.substitutions.append(("%fsdp_src", config.fsdp_src_root))
config.substitutions.append(("%models", os.path.join(config.fsdp_src_root,
                                                      "test", "models")))
# FileCheck variables do not leak between CHECK-LABEL blocks.
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["fsdp-opt", "fsdp-translate", "fsdp-graphgen", "fsdp-compile",
     "fsdp-embed-pipeline",
     "fsdp-runtime-kernel-test", "fsdp-runtime-collectives-program",
     "fsdp-runtime-program-basics", "fsdp-runtime-kernel-test-cuda",
     "fsdp-runtime-collectives-program-cuda", "fsdp-emulated-kernels",
     "fsdp-runtime-kernel-test-sanitized", "fsdp-runtime-kernel-test-avx2",
     "fsdp-runtime-collectives-program-sanitized",
     "fsdp-emulated-kernels-sanitized"],
    [config.fsdp_tools_dir, config.llvm_tools_dir])

# Runtime tests launch several ranks; the tests run as root in containers and
# may ask for more ranks than there are cores.
mpirun = shutil.which("mpirun")
if mpirun:
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", mpirun + " --allow-run-as-root --oversubscribe"))

# `cuda`: this build links --target cuda programs (the CUDA toolkit was
# found at configure time). `cuda-gpu`: a GPU is visible too, so they run.
# Tests that need a GPU say REQUIRES: cuda-gpu and are reported UNSUPPORTED
# on a machine without one, never passed.
if config.fsdp_cuda_runtime_lib:
    config.available_features.add("cuda")
    config.substitutions.append(("%fsdp_cuda_lib",
                                 config.fsdp_cuda_runtime_lib))
    config.substitutions.append(("%nvcc", config.fsdp_cuda_compiler))
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi:
        import subprocess
        listed = subprocess.run([nvidia_smi, "-L"], capture_output=True,
                                text=True)
        if listed.returncode == 0 and "GPU" in listed.stdout:
            config.available_features.add("cuda-gpu")

# `sanitized-runtime`: fsdp-compile --sanitize links programs against the
# CPU runtime built with ASan and UBSan.
if config.fsdp_sanitized_runtime_lib:
    config.available_features.add("sanitized-runtime")

# `avx2-runtime`: fsdp-compile --max-cpu-isa=avx2 links programs against the
# CPU kernels built without AVX-512. FSDP_MAX_CPU_ISA=avx2 in lit's
# environment compiles every program of the suite that way: the whole suite
# as a machine without AVX-512 runs it.
if config.fsdp_avx2_runtime_lib:
    config.available_features.add("avx2-runtime")
llvm_config.with_system_environment(["FSDP_MAX_CPU_ISA"])

# The interpreter of the test scripts: Debian's python3, which has the torch
# and numpy that .ci/setup installs (FSDP_PYTHON overrides it), in place of
# lit's default %python (whichever interpreter runs lit).
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
python = os.environ.get("FSDP_PYTHON", "/usr/bin/python3")
config.substitutions.append(("%python", python))
# The same interpreter with the build's Python package importable
# (build/python_packages: fsdp_mlir and its native module).
config.substitutions.append(
    ("%fsdp_python", "env PYTHONPATH=" +
     os.path.join(config.fsdp_obj_root, "python_packages") + " " + python))


def venv_feature(variable, venv, feature, substitution):
    """Adds `feature` and `substitution` (its interpreter) when the
    interpreter that $`variable` names, or the one of `venv` under
    ~/.cache/fsdp-mlir, exists."""
    python = os.environ.get(
        variable,
        os.path.expanduser(f"~/.cache/fsdp-mlir/{venv}/bin/python"))
    if os.path.exists(python):
        config.available_features.add(feature)
        config.substitutions.append((substitution, python))


# The pinned virtual environment .ci/setup makes: the current PyTorch and
# transformers, for the tests against Hugging Face models (%hf_python) and
# torch.export, which fsdp_mlir.export needs (%torch_python).
venv_feature("FSDP_HF_PYTHON", "venv-torch-2.15.0", "transformers",
             "%hf_python")
venv_feature("FSDP_TORCH_PYTHON", "venv-torch-2.15.0", "torch-export",
             "%torch_python")
