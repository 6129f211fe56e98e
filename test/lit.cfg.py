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
     "fsdp-runtime-program-basics"],
    [config.fsdp_tools_dir, config.llvm_tools_dir])

# Runtime tests launch several ranks; the tests run as root in containers and
# may ask for more ranks than there are cores.
mpirun = shutil.which("mpirun")
if mpirun:
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", mpirun + " --allow-run-as-root --oversubscribe"))

# The interpreter of the test scripts: Debian's python3, which has the torch
# and numpy that .ci/setup installs (FSDP_PYTHON overrides it), in place of
# lit's default %python (whichever interpreter runs lit).
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
config.substitutions.append(
    ("%python", os.environ.get("FSDP_PYTHON", "/usr/bin/python3")))

# Hugging Face transformers (a pinned version in the virtual environment
# that .ci/setup makes, over Debian's torch): tests against it need it.
hf_python = os.environ.get(
    "FSDP_HF_PYTHON",
    os.path.expanduser("~/.cache/fsdp-mlir/venv-transformers-4.46.3/bin/python"))
if os.path.exists(hf_python):
    config.available_features.add("transformers")
    config.substitutions.append(("%hf_python", hf_python))

# PyTorch 2.x with transformers (the pinned virtual environment .ci/setup
# makes): torch.export, which fsdp_mlir.export needs.
torch_python = os.environ.get(
    "FSDP_TORCH_PYTHON",
    os.path.expanduser("~/.cache/fsdp-mlir/venv-torch-2.11.0/bin/python"))
if os.path.exists(torch_python):
    config.available_features.add("torch-export")
    config.substitutions.append(("%torch_python", torch_python))
