"""YAML in two speeds: PyYAML's C loader to read many files fast, ruamel.yaml to edit one
file without losing its comments, key order or quoting."""

from __future__ import annotations

import io
import re
from typing import Any


class YamlProblem(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


_DUPLICATE = re.compile(r'found duplicate key "(.*?)" with value')
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def safe_problem(problem: str) -> str:
    """A parser's message without the values it quotes: they may be keys. A duplicate key
    is named by its key only (ruamel quotes both values), other quoted text longer than a
    character or two becomes '…'."""
    duplicate = _DUPLICATE.search(problem)
    if duplicate:
        return f"duplicate key {duplicate.group(1)!r}"
    return _QUOTED.sub(lambda m: m.group(0) if len(m.group(0)) <= 4 else "'…'", problem)


def _problem(exc: Exception, text: str) -> YamlProblem:
    """The parser's complaint, at the line a person looks at: where it noticed, unless that is
    the end of the text (an unclosed `[`, `{` or quote), then where what is unclosed began."""
    problem_mark, context_mark = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    problem = safe_problem(str(getattr(exc, "problem", None) or "the file is not valid YAML"))
    at_end = problem_mark is not None and not text[getattr(problem_mark, "index", 0):].strip()
    context = getattr(exc, "context", None)
    if context_mark is not None and (problem_mark is None or at_end):
        mark = context_mark
        what = re.sub(r"^while (parsing|scanning) ", "", str(context or "")) or "what"
        problem = f"{what} begun here is not closed by the end of the text ({problem})" if at_end else problem
    else:
        mark = problem_mark or context_mark
    line = mark.line + 1 if mark is not None else None
    where = f"line {line}: " if line else ""
    return YamlProblem(f"{where}{problem}", line)


_fast_loader: Any = None


def _loader() -> Any:
    """PyYAML's C loader, reading booleans as YAML 1.2 does (true/false only), and refusing
    duplicate keys, like the ruamel.yaml editor: whichever of the two reads a file, it
    means the same (`description: no` is the text "no"; `api_key` twice is an error)."""
    global _fast_loader
    if _fast_loader is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        bool_tag = "tag:yaml.org,2002:bool"
        loader = type("FwLoader", (base,), {})
        loader.yaml_implicit_resolvers = {
            first: [(tag, rx) for tag, rx in resolvers if tag != bool_tag]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }
        loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
        loader.construct_mapping = _mapping_without_duplicates
        _fast_loader = loader
    return _fast_loader


def _mapping_without_duplicates(self: Any, node: Any, deep: bool = False) -> Any:
    import yaml

    seen: set[str] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f'found duplicate key "{key_node.value}" with value', key_node.start_mark
                )
            seen.add(key_node.value)
    return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep)


def fast_load(text: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise _problem(exc, text) from None


def _rt():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


def rt_load(text: str) -> Any:
    from ruamel.yaml.error import YAMLError

    try:
        return _rt().load(text)
    except YAMLError as exc:
        raise _problem(exc, text) from None


def rt_dump(doc: Any) -> str:
    if doc is None or doc == {}:
        return ""
    buf = io.StringIO()
    _rt().dump(doc, buf)
    return buf.getvalue()


def to_commented(data: Any) -> Any:
    """Plain data as ruamel's round-trip types, so that new values dump in block style."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(data, dict):
        out = CommentedMap()
        for key, value in data.items():
            out[key] = to_commented(value)
        return out
    if isinstance(data, list):
        return CommentedSeq(to_commented(v) for v in data)
    return data


def to_plain(data: Any) -> Any:
    if isinstance(data, dict):
        return {str(k): to_plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [to_plain(v) for v in data]
    if isinstance(data, str):
        return str(data)  # ruamel's quoted strings are str subclasses
    if isinstance(data, bool) or data is None:
        return data
    if isinstance(data, int):
        return int(data)
    if isinstance(data, float):
        return float(data)
    return data


FENCE = "---"


def split_front_matter(text: str) -> tuple[str, str]:
    """(front matter YAML, body) of a Markdown file; no front matter gives ("", text)."""
    if not (text.startswith(FENCE + "\n") or text.startswith(FENCE + "\r\n")):
        return "", text
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n") == FENCE:
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    raise YamlProblem("line 1: front matter opened with '---' is never closed", 1)


def join_front_matter(front: str, body: str) -> str:
    if front and not front.endswith("\n"):
        front += "\n"
    return f"{FENCE}\n{front}{FENCE}\n{body}"
