# fsdp_mlir.data end to end with a tokenizer trained here (BPE, 200 tokens,
# with the `tokenizers` library): a JSONL corpus and a text file become
# tokens.bin, which must hold, document after document, exactly the
# tokenizer's ids of each text followed by the end-of-document token; the
# summary counts them. Then the errors: a malformed JSONL line, a missing
# field, a missing tokenizer, an --eos outside the vocabulary.
#
# Usage: HF_PYTHON data_check.py --work DIR

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

TEXTS = ["the cat sat on the mat", "a dog", "", "packed rows hold many "
         "documents back to back, each ending with its own token",
         "x" * 50]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    path = lambda *p: os.path.join(args.work, *p)  # noqa: E731
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        TEXTS * 20, trainers.BpeTrainer(vocab_size=200,
                                        special_tokens=["<unk>", "</s>"]))
    model = path("model")
    os.makedirs(model, exist_ok=True)
    tokenizer.save(os.path.join(model, "tokenizer.json"))
    with open(path("corpus.jsonl"), "w") as f:
        for t in TEXTS[:4] * 8:
            f.write(json.dumps({"text": t, "id": 1}) + "\n")
    with open(path("more.txt"), "w") as f:
        f.write(TEXTS[4] + "\n\n" + TEXTS[0] + "\n")

    def tool(*argv):
        return subprocess.run([sys.executable, "-m", "fsdp_mlir.data", *argv],
                              capture_output=True, text=True)

    r = tool(model, path("corpus.jsonl"), path("more.txt"), "--lines", "-o",
             path("tokens.bin"))
    if r.returncode != 0:
        sys.exit(f"fsdp_mlir.data failed:\n{r.stdout}{r.stderr}")
    print(r.stdout.splitlines()[0].replace(args.work + "/", ""))
    eos = tokenizer.token_to_id("</s>")
    want = []
    for t in TEXTS[:4] * 8 + [TEXTS[4], TEXTS[0]]:
        want += tokenizer.encode(t, add_special_tokens=False).ids + [eos]
    got = np.fromfile(path("tokens.bin"), dtype="<i4").tolist()
    print(f"tokens.bin {'equals' if got == want else 'FAIL differs from'} "
          f"the tokenizer's ids with </s> ({eos}) after each document "
          f"({len(got)} tokens)")
    print("progress bar on stderr:", "tokenizing" in r.stderr)
    print("histogram lines:", sum(1 for l in r.stdout.splitlines()
                                  if l.strip() and l.strip()[0].isdigit()))

    with open(path("bad.jsonl"), "w") as f:
        f.write('{"text": "fine"}\n{"text": broken\n')
    with open(path("nofield.jsonl"), "w") as f:
        f.write('{"body": "x"}\n')
    for label, argv in (
            ("malformed", [model, path("bad.jsonl"), "-o", path("x.bin")]),
            ("no field", [model, path("nofield.jsonl"), "-o", path("x.bin")]),
            ("no tokenizer", [path("none"), path("more.txt"), "-o",
                              path("x.bin")]),
            ("eos range", [model, path("more.txt"), "--eos", "999", "-o",
                           path("x.bin")])):
        r = tool(*argv, "--no-progress")
        print(f"{label}: exit {r.returncode}: "
              f"{r.stderr.strip().replace(args.work + '/', '')}")


if __name__ == "__main__":
    main()
