"""BERT WordPiece tokenization for the text_embedding ensemble: TEXT (BYTES, one sentence per
element) -> input_ids and attention_mask (INT64, [sentences, tokens]), padded with [PAD] (id 0)
to the request's longest sentence and cut at the config's max_tokens (with [CLS] and [SEP]). With
the parameter pad_to_lengths ("16,32,64,128"), padded further to the first of those lengths that
holds the longest sentence: an encoder on the GPU takes those lengths (its nereid.open_dims)."""
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import BertWordPieceTokenizer


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        max_tokens = int(config["parameters"]["max_tokens"]["string_value"])
        vocab = os.path.join(args["model_repository"], args["model_version"], "vocab.txt")
        self.tokenizer = BertWordPieceTokenizer(vocab, lowercase=True)
        self.tokenizer.enable_truncation(max_length=max_tokens)
        lengths = config["parameters"].get("pad_to_lengths", {}).get("string_value", "")
        self.lengths = sorted(int(v) for v in lengths.split(",")) if lengths else []
        if self.lengths and self.lengths[-1] < max_tokens:
            raise ValueError(f"pad_to_lengths must reach max_tokens ({max_tokens}): {lengths}")
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            try:
                sentences = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in text]
            except UnicodeDecodeError as e:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"TEXT is not UTF-8: {e}")))
                continue
            if not sentences:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("TEXT holds no sentence")))
                continue
            encoded = self.tokenizer.encode_batch(sentences)
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            if self.lengths:
                extra = next(n for n in self.lengths if n >= ids.shape[1]) - ids.shape[1]
                ids, mask = (np.pad(a, ((0, 0), (0, extra))) for a in (ids, mask))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]))
        return responses
