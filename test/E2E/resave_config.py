"""Writes CONFIG.json as the installed transformers saves it
(save_pretrained): with transformers 5, `rope_theta` and `rope_scaling`
become `rope_parameters`.

    HF_PYTHON resave_config.py CONFIG.json OUT_DIR
"""

import json
import sys

import transformers

with open(sys.argv[1]) as f:
    transformers.AutoConfig.for_model(**json.load(f)).save_pretrained(
        sys.argv[2])
