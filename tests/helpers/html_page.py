"""The HTML report's structure checker (well formed, offline) and a model with a long node
table."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def relu_chain(node_count: int, name_of: Callable[[int], str] = "relu{}".format) -> onnx.ModelProto:
    """x[batch, 8] -> MatMul(8x8) -> Relu -> ... -> Relu: `node_count` nodes in a line."""
    weight = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t0"], name=name_of(0))]
    nodes += [helper.make_node("Relu", [f"t{i - 1}"], [f"t{i}"], name=name_of(i))
              for i in range(1, node_count)]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info(f"t{node_count - 1}", TensorProto.FLOAT, ["batch", 8])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ----- a small checker for the page's structure ----------------------------------------------

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}
# Start tags that a browser's parser lets close an open <p>: inside a <p> they split the text.
_BLOCKS = {"address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset",
           "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
           "main", "nav", "ol", "p", "pre", "section", "table", "ul"}


class PageChecker(HTMLParser):
    """Records tags, external references and nesting errors of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: dict[str, int] = {}
        self.references: list[tuple[str, str, str]] = []  # (tag, attribute, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record(tag, attrs)
        if tag in _BLOCKS and "p" in self.stack:
            self.errors.append(f"<{tag}> inside <p> at {self.getpos()}")
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record(tag, attrs)  # <rect .../> in SVG: opens and closes

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
                               f" at {self.getpos()}")
            return
        self.stack.pop()

    def _record(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                self.references.append((tag, name, value or ""))
            if tag == "link" and name == "rel" and value and "stylesheet" in value:
                self.errors.append("<link rel=stylesheet>: the CSS must be inline")


def check_page(page: str) -> PageChecker:
    checker = PageChecker()
    checker.feed(page)
    checker.close()
    assert checker.errors == []
    assert checker.stack == [], f"unclosed tags: {checker.stack}"
    for tag in ("html", "head", "body", "main", "section", "table", "svg", "details", "style"):
        assert checker.tags.get(tag, 0) >= 1, f"no <{tag}>"
    for tag, attribute, value in checker.references:
        assert not re.match(r"\s*(https?:|//|ftp:|file:)", value, re.IGNORECASE), (
            f"<{tag} {attribute}={value!r}> would leave the page")
        assert not (tag == "script" and attribute == "src"), "scripts must be inline"
    assert "@import" not in page
    assert not re.search(r"url\(\s*['\"]?\s*(https?:|//)", page), "CSS must not load URLs"
    return checker
