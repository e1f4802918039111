"""String ops, TfIdfVectorizer and ImageDecoder: what a static pass can know of them.

- String ops (StringConcat, StringSplit, StringNormalizer, RegexFullMatch) do no
  floating-point arithmetic: 0 FLOPs, and the node's note says that their work (copying,
  matching characters) is not counted. A string tensor has no fixed size: its bytes are
  unknown, listed with the analysis' unknown-size tensors (`unknown_size_values`), never
  counted as 0 B silently. StringSplit's and StringNormalizer's output lengths are data.
- TfIdfVectorizer [.., n] ints or strings -> [.., pool size] floats: each input position
  starts one n-gram per length in [min_gram_length, max_gram_length] and per skip in
  [0, max_skip_count], each found n-gram adds 1 to its count (an upper bound: every one
  found); the IDF and TFIDF modes then weight each output once (1 multiply).
- ImageDecoder: the decoded height and width are in the encoded bytes: shape inference names
  them as free dims (the output's bytes are then a formula in them, to bind with --dim) or
  leaves them unknown (the node is then reported with an unknown shape). Decoding (entropy
  decoding, an integer inverse DCT) is not floating-point arithmetic: 0 FLOPs, and the
  node's note says so.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    input_numel,
    output_numel,
    register,
)

STRING_OPS = ("StringConcat", "StringSplit", "StringNormalizer", "RegexFullMatch")
STRING_NOTE = "string op: no arithmetic counted; string tensors' bytes are unknown"
DECODE_NOTE = "image decoding (entropy decoding, integer IDCT) is not counted as FLOPs"
WEIGHT_FLOPS = 1  # IDF or TFIDF: count * weight


@register(*STRING_OPS)
def string_op(node: Node) -> OpCost:
    return OpCost.zero().noted(STRING_NOTE)


@register("TfIdfVectorizer")
def tfidf_vectorizer(node: Node) -> OpCost:
    lengths = node.attr_int("max_gram_length", 1) - node.attr_int("min_gram_length", 1) + 1
    skips = node.attr_int("max_skip_count", 0) + 1
    counts = input_numel(node, 0) * (max(lengths, 1) * skips)
    weights = output_numel(node) * WEIGHT_FLOPS if node.attr_str("mode", "TF") != "TF" else 0
    return OpCost.from_flops(counts + weights).noted("an upper bound: every n-gram counted")


@register("ImageDecoder")
def image_decoder(node: Node) -> OpCost:
    # encoded bytes [n] uint8 -> [h, w, c] uint8: h and w are data
    if not node.outputs[0].shape_known:
        raise ShapeUnknownError(f"{node.describe()}: the image size is in the encoded bytes")
    return OpCost.zero().noted(DECODE_NOTE)
