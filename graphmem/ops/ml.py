"""ai.onnx.ml: the classic machine-learning operators (scikit-learn converters write them).

X is [N, F] (or [F]: one row). From the ops' attributes:
- linear models (LinearClassifier, LinearRegressor, and SVMs without support vectors):
  `coefficients` holds classes x F weights: N * len(coefficients) MACs;
- SVMs with support vectors: the kernel of each row with each of the S support vectors
  (F MACs; RBF: F differences squared and summed, 3 FLOPs each, then exp(-gamma d), 2;
  POLY and SIGMOID: (gamma k + coef0)^degree or tanh(.), 3), then the dual coefficients:
  N * len(coefficients) MACs;
- tree ensembles: a bound: every row takes the deepest path of every tree, one compare per
  interior node on it, and one add per tree into its target (the node says it is a bound);
- the scores' post_transform, per score: SOFTMAX and SOFTMAX_ZERO 5, LOGISTIC 4, PROBIT 1
  (one inverse-erf evaluation), NONE 0 (normalization.py's and elementwise.py's counts);
- per element: Binarizer 1 (compare), Imputer 2 (compare, select), Scaler 2 ((x - offset) *
  scale), Normalizer MAX 2 (compare into the row's max, divide), L1 and L2 3 (|x| or x*x,
  add, divide; the row's sqrt not counted).
Lookups and rearrangements (ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder,
LabelEncoder, CategoryMapper) are 0 FLOPs; those over maps, sequences of maps or strings
(CastMap, DictVectorizer, ZipMap, CategoryMapper, string LabelEncoder) also have a size only
the data knows: their bytes are unknown and listed as such; the node's note says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from graphmem.core.ir import DType, Node
from graphmem.core.symbolic import SymInt
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    input_numel,
    known_dim,
    known_rank,
    output_numel,
    register,
)

ML = "ai.onnx.ml"
POST_TRANSFORM_FLOPS = {"NONE": 0, "SOFTMAX": 5, "SOFTMAX_ZERO": 5, "LOGISTIC": 4, "PROBIT": 1}
RBF_PER_FEATURE_FLOPS = 3  # difference, square, add
RBF_PER_VECTOR_FLOPS = 2  # * -gamma, exp
KERNEL_PER_VECTOR_FLOPS = {"POLY": 3, "SIGMOID": 3}
PER_ELEMENT_FLOPS = {"Binarizer": 1, "Imputer": 2, "Scaler": 2}
NORMALIZER_FLOPS = {"MAX": 2, "L1": 3, "L2": 3}
MAP_NOTE = "a lookup or a map's rearrangement: no arithmetic; sizes of maps and strings unknown"
TREE_NOTE = "a bound: every row takes each tree's deepest path"


def rows_and_features(node: Node) -> tuple[SymInt, SymInt]:
    x = node.input(0)
    features = known_dim(x, -1, node)
    rows = known_dim(x, 0, node) if known_rank(x, node) > 1 else SymInt.const(1)
    return rows, features


def post_transform(node: Node, scores: int) -> OpCost:
    per_score = POST_TRANSFORM_FLOPS.get(node.attr_str("post_transform", "NONE"), 0)
    if not per_score or scores >= len(node.outputs):
        return OpCost.zero()
    return OpCost.from_flops(output_numel(node, scores) * per_score)


def attr_length(node: Node, name: str) -> int:
    """How many values a list attribute holds (0 when absent or not a list)."""
    value = node.attributes.get(name, ())
    return len(value) if isinstance(value, tuple) else 0


def coefficient_macs(node: Node, rows: SymInt) -> OpCost:
    return OpCost.from_macs(rows * attr_length(node, "coefficients"))


@register("LinearClassifier", "LinearRegressor", domain=ML)
def linear_model(node: Node) -> OpCost:
    # scores [N, classes] = X [N, F] @ coefficients^T [F, classes] (+ intercepts)
    rows, _ = rows_and_features(node)
    scores = 1 if node.op_type == "LinearClassifier" else 0
    return coefficient_macs(node, rows) + post_transform(node, scores)


@register("SVMClassifier", "SVMRegressor", domain=ML)
def svm(node: Node) -> OpCost:
    rows, features = rows_and_features(node)
    vectors = attr_length(node, "support_vectors")
    scores = 1 if node.op_type == "SVMClassifier" else 0
    cost = coefficient_macs(node, rows) + post_transform(node, scores)
    if not vectors:
        return cost  # a linear SVM: the coefficients are the weights
    if not features.is_constant or int(features) <= 0:
        raise ShapeUnknownError(f"{node.describe()}: feature count {features} is not a constant")
    count = vectors // int(features)
    kernel = node.attr_str("kernel_type", "LINEAR")
    if kernel == "RBF":
        per_vector = OpCost.from_flops(features * RBF_PER_FEATURE_FLOPS + RBF_PER_VECTOR_FLOPS)
    else:
        per_vector = (OpCost.from_macs(features)
                      + OpCost.from_flops(SymInt.const(KERNEL_PER_VECTOR_FLOPS.get(kernel, 0))))
    scale = rows * count
    return cost + OpCost(per_vector.macs * scale, per_vector.flops * scale)


def deepest(children: Mapping[int, Sequence[int]], root: int) -> int:
    """Interior nodes on the longest path from `root` (children: interior nodes only)."""
    depth, stack, seen = 0, [(root, 1)], set()
    while stack:
        current, level = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        depth = max(depth, level)
        stack.extend((child, level + 1) for child in children.get(current, ()))
    return depth


def tree_depths_v5(node: Node) -> list[int]:
    # TreeEnsemble (ai.onnx.ml 5): interior nodes by position; a branch is a leaf index when
    # its *leafs flag is 1
    branches = zip(node.attr_ints("nodes_truenodeids"), node.attr_ints("nodes_trueleafs"),
                   node.attr_ints("nodes_falsenodeids"), node.attr_ints("nodes_falseleafs"),
                   strict=False)  # a malformed model's lists of other lengths: the common part
    children = {i: [c for c, leaf in ((true_id, true_leaf), (false_id, false_leaf)) if not leaf]
                for i, (true_id, true_leaf, false_id, false_leaf) in enumerate(branches)}
    return [deepest(children, root) for root in node.attr_ints("tree_roots")]


def tree_depths_v1(node: Node) -> list[int]:
    # TreeEnsembleClassifier/Regressor: (tree id, node id) pairs, mode b"LEAF" for leaves
    trees, ids = node.attr_ints("nodes_treeids"), node.attr_ints("nodes_nodeids")
    trees, ids = trees[:len(ids)], ids[:len(trees)]
    given = node.attributes.get("nodes_modes", ())
    modes = [m.decode(errors="replace") if isinstance(m, bytes) else str(m)
             for m in (given if isinstance(given, tuple) else ())]
    interior = {(t, n) for t, n, m in zip(trees, ids, modes, strict=False) if m != "LEAF"}
    branches = zip(node.attr_ints("nodes_truenodeids"), node.attr_ints("nodes_falsenodeids"),
                   strict=False)
    children: dict[int, list[int]] = {}
    index = {key: i for i, key in enumerate(zip(trees, ids, strict=False))}
    for i, (tree, node_id, (true_id, false_id)) in enumerate(zip(trees, ids, branches,
                                                                strict=False)):
        if (tree, node_id) in interior:
            children[i] = [index[(tree, c)] for c in (true_id, false_id) if (tree, c) in interior]
    roots = {t: i for i, t in reversed(list(enumerate(trees)))}  # each tree's first node
    return [deepest(children, r) if (trees[r], ids[r]) in interior else 0
            for r in roots.values()]


@register("TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor", domain=ML)
def tree_ensemble(node: Node) -> OpCost:
    rows, _ = rows_and_features(node)
    depths = tree_depths_v5(node) if node.op_type == "TreeEnsemble" else tree_depths_v1(node)
    scores = 1 if node.op_type == "TreeEnsembleClassifier" else 0
    walk = OpCost.from_flops(rows * (sum(depths) + len(depths)))
    return (walk + post_transform(node, scores)).noted(TREE_NOTE)


@register("Binarizer", "Imputer", "Scaler", domain=ML)
def per_element(node: Node) -> OpCost:
    return OpCost.from_flops(input_numel(node, 0) * PER_ELEMENT_FLOPS[node.op_type])


@register("Normalizer", domain=ML)
def normalizer(node: Node) -> OpCost:
    return OpCost.from_flops(input_numel(node, 0) * NORMALIZER_FLOPS[node.attr_str("norm", "MAX")])


@register("ArrayFeatureExtractor", "FeatureVectorizer", "OneHotEncoder", domain=ML)
def rearrangement(node: Node) -> OpCost:
    return OpCost.zero()


@register("LabelEncoder", "CategoryMapper", "CastMap", "DictVectorizer", "ZipMap", domain=ML)
def lookup(node: Node) -> OpCost:
    strings = any(v.dtype in (DType.STRING, DType.UNKNOWN) for v in (*node.present_inputs,
                                                                    *node.outputs))
    return OpCost.zero().noted(MAP_NOTE) if strings else OpCost.zero()
