"""Prepares a dataset for the runtime's --data: documents (JSONL with a
`text` field, or plain text) tokenized with a Hugging Face tokenizer (the
`tokenizer.json` of a model directory), each followed by the end-of-document
token, written as little-endian int32 (`tokens.bin`). Train on it with
`--data tokens.bin --eos ID` (packed rows need a packed graph:
`fsdp-graphgen --packed`).

    python -m fsdp_mlir.data MODEL_DIR_OR_TOKENIZER.json -o tokens.bin \\
        corpus.jsonl more.txt [--field text] [--lines] [--eos ID]

A `.jsonl` file holds one document per line (its `--field`); another file is
one document, or one per non-empty line with `--lines`. The end-of-document
token is `--eos`, else the model directory's `eos_token_id` (config.json),
else the tokenizer's `</s>`, `<|endoftext|>` or `<eos>`. Prints a progress
bar and then a summary: documents, tokens, the length histogram.
"""

import argparse
import array
import json
import os
import sys

# The end-of-document tokens tried, in order, when neither --eos nor the
# model's config names one.
EOS_NAMES = ("</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>")


class DataError(Exception):
    """Bad input: the message names the file, line or field."""


def load_tokenizer(where):
    """The tokenizers.Tokenizer of `where`: a tokenizer.json, or a model
    directory holding one; and the directory's config.json (or {})."""
    from tokenizers import Tokenizer
    path = where
    config = {}
    if os.path.isdir(where):
        path = os.path.join(where, "tokenizer.json")
        config_path = os.path.join(where, "config.json")
        if os.path.exists(config_path):
            with open(config_path) as f:
                config = json.load(f)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such tokenizer file (a model directory "
                        f"needs tokenizer.json)")
    try:
        return Tokenizer.from_file(path), config
    except Exception as e:  # tokenizers raises its own exception types
        raise DataError(f"{path}: not a tokenizer.json: {e}") from None


def end_of_document(tokenizer, config, given):
    """The end-of-document token id."""
    if given is not None:
        if not 0 <= given < tokenizer.get_vocab_size():
            raise DataError(f"--eos {given} is outside the tokenizer's "
                            f"vocabulary [0, {tokenizer.get_vocab_size()})")
        return given
    eos = config.get("eos_token_id")
    if isinstance(eos, list) and eos:
        eos = eos[0]
    if isinstance(eos, int):
        return eos
    for name in EOS_NAMES:
        found = tokenizer.token_to_id(name)
        if found is not None:
            return found
    raise DataError("no end-of-document token: give --eos ID (the model's "
                    "config.json has no eos_token_id and the tokenizer none "
                    f"of {', '.join(EOS_NAMES)})")


def documents(path, field, lines):
    """(where, text) of each document of `path`."""
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{where}: malformed JSON: {e.msg}") \
                        from None
                if not isinstance(record, dict) or field not in record:
                    raise DataError(f"{where}: no field '{field}'")
                if not isinstance(record[field], str):
                    raise DataError(f"{where}: field '{field}' is not a "
                                    f"string")
                yield where, record[field]
        return
    with open(path, encoding="utf-8") as f:
        if not lines:
            yield path, f.read()
            return
        for number, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{number}", line.rstrip("\n")


def histogram(lengths):
    """Lines of a power-of-two length histogram."""
    if not lengths:
        return []
    counts = {}
    for n in lengths:
        bucket = 1 << max(0, (n - 1).bit_length())
        counts[bucket] = counts.get(bucket, 0) + 1
    widest = max(counts.values())
    out = []
    for bucket in sorted(counts):
        low = bucket // 2 + 1 if bucket > 1 else 1
        bar = "#" * max(1, round(40 * counts[bucket] / widest))
        out.append(f"  {low:>7}-{bucket:<7} {counts[bucket]:>9}  {bar}")
    return out


def prepare(tokenizer_path, inputs, output, field="text", lines=False,
            eos=None, progress=True):
    """Tokenizes `inputs` into `output`; returns the summary (a dict)."""
    tokenizer, config = load_tokenizer(tokenizer_path)
    eos = end_of_document(tokenizer, config, eos)
    for path in inputs:
        if not os.path.isfile(path):
            raise DataError(f"{path}: no such file")
    total_bytes = sum(os.path.getsize(p) for p in inputs)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total_bytes, unit="B", unit_scale=True,
                   desc="tokenizing", file=sys.stderr)
    lengths, empty = [], 0
    with open(output, "wb") as out:
        for path in inputs:
            for where, text in documents(path, field, lines):
                ids = tokenizer.encode(text, add_special_tokens=False).ids
                if not ids:
                    empty += 1
                ids.append(eos)
                words = array.array("i", ids)
                if sys.byteorder != "little":
                    words.byteswap()
                out.write(words.tobytes())
                lengths.append(len(ids))
                if bar:
                    bar.update(len(text.encode("utf-8")))
    if bar:
        bar.close()
    tokens = sum(lengths)
    return {"output": output, "documents": len(lengths), "tokens": tokens,
            "eos": eos, "empty": empty,
            "mean": tokens / len(lengths) if lengths else 0.0,
            "max": max(lengths, default=0), "lengths": lengths}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m fsdp_mlir.data",
        description="Tokenize documents into tokens.bin for --data.")
    parser.add_argument("tokenizer",
                        help="a model directory with tokenizer.json, or the "
                             "file itself")
    parser.add_argument("inputs", nargs="+",
                        help=".jsonl files (one document per line) or text "
                             "files")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--field", default="text",
                        help="the JSONL field holding the text")
    parser.add_argument("--lines", action="store_true",
                        help="one document per non-empty line of a text file")
    parser.add_argument("--eos", type=int, default=None,
                        help="the end-of-document token id")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        summary = prepare(args.tokenizer, args.inputs, args.output,
                          args.field, args.lines, args.eos,
                          progress=not args.no_progress)
    except DataError as e:
        print(f"fsdp_mlir.data: error: {e}", file=sys.stderr)
        return 1
    print(f"{summary['output']}: {summary['documents']} documents, "
          f"{summary['tokens']} tokens (end-of-document token "
          f"{summary['eos']} included), mean length {summary['mean']:.1f}, "
          f"longest {summary['max']}" +
          (f", {summary['empty']} empty" if summary["empty"] else ""))
    print("document length (tokens)  documents")
    for line in histogram(summary["lengths"]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
