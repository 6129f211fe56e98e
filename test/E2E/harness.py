# What the end-to-end drivers (tp_matrix.py, hf_load.py, ckpt_check.py)
# share: the model config they generate a graph from, their work directory,
# the tools' directory and how to launch ranks.


def add_run_arguments(parser):
    """Adds CONFIG, --work, --bin and --mpirun to `parser`."""
    parser.add_argument("config")
    parser.add_argument("--work", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mpirun", required=True)
