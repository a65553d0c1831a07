"""YAML as a node tree, whose marks let errors name FILE:LINE; nodes differ by ``node.id``.

Config and hosts files walk the nodes (``compose``, ``mapping_items``, ``scalar_value``);
sim scenarios, thousands of values checked by path, take the data with a line map
(``load_with_lines``).  Either way a syntax error is ``FILE:LINE: not valid YAML: ...`` and
a key given twice is an error, never silently the last one.

pyyaml is imported lazily: ``gputop --once`` without a config file must not load it, and
this module is shipped to remote hosts with the probe (stdlib only at module level).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator
from typing import Any

# Caps for files anybody could hand us (a hosts file from a colleague, a scenario): each
# keeps parsing under a second.  Real files are a few KiB, a few levels deep.
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000  # after aliases are expanded: a "billion laughs" stops here


def _yaml() -> Any:
    # Without pyyaml's type stubs the module is Any anyway; saying so keeps mypy quiet.
    import yaml  # type: ignore[import-untyped, unused-ignore]

    return yaml


def line_of(node: Any) -> int:
    return int(node.start_mark.line) + 1


def _not_valid(exc: Exception, name: str, error_cls: type[Exception]) -> Exception:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return error_cls(f"{name}:{line}: not valid YAML: {problem}")


def _too_big(name: str) -> str:
    return f"{name}: larger than {MAX_FILE_BYTES // 1024} KiB; is it the right file?"


def read_file(path: str | os.PathLike[str], name: str, error_cls: type[Exception]) -> str:
    """The text of a file a user named, refused unless it is a regular file of at most
    MAX_FILE_BYTES: a FIFO or a device must not hang us, a huge file not keep us busy."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever.
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error_cls(f"{name}: no such file; check the path") from None
    except OSError as exc:
        raise error_cls(f"{name}: cannot read it: {(exc.strerror or str(exc)).lower()}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error_cls(f"{name}: not a regular file; name a YAML file")
        if info.st_size > MAX_FILE_BYTES:
            raise error_cls(_too_big(name))
        raw = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise error_cls(f"{name}: cannot read it: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:  # grew since fstat
        raise error_cls(_too_big(name))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error_cls(f"{name}:{line}: not valid UTF-8") from None


def _check_depth(
    yaml: Any, loader_cls: Any, text: str, name: str, error_cls: type[Exception]
) -> None:
    """Refuse deep nesting from the event stream, before the recursive composer and
    constructor hit Python's recursion limit."""
    depth = 0
    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        for event in yaml.parse(text, Loader=loader_cls):
            if isinstance(event, starts):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1
                    raise error_cls(f"{name}:{line}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, ends):
                depth -= 1
    except yaml.YAMLError:
        return  # the parse proper reports it, with the words the user is used to


def _check_size(root: Any, name: str, error_cls: type[Exception]) -> None:
    """Refuse a tree that aliases would expand past MAX_NODES (counted without expanding:
    each node once, its size remembered)."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a loop counts once; the loaders refuse loops themselves
        if node.id == "scalar":
            total = 1
        elif node.id == "sequence":
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        if total > MAX_NODES:
            raise error_cls(
                f"{name}:{line_of(node)}: aliases expand to more than {MAX_NODES} values"
            )
        sizes[id(node)] = total
        return total

    size(root)


def compose(text: str, name: str, error_cls: type[Exception]) -> Any | None:
    """The root node of ``text``; None for a file with no document (empty, only comments)."""
    yaml = _yaml()
    # The parser of the composer that follows: libyaml's would stop at its own limit and
    # leave the recursive pure-Python composer to fail on what it accepts.
    _check_depth(yaml, yaml.SafeLoader, text, name, error_cls)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _not_valid(exc, name, error_cls) from None
    if root is not None:
        _check_size(root, name, error_cls)
    return root


def unknown_key(key: str, known: Collection[str], listed: str = "expected one of") -> str:
    """The words for a key not in ``known``, for every file gputop reads (config, hosts,
    policy, health thresholds, scenarios): the nearest known key where one is near, then
    them all."""
    import difflib  # only for a mistyped key

    near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"unknown key{hint} ({listed}: {', '.join(known)})"


def mapping_items(
    node: Any, name: str, error_cls: type[Exception], key: str = "", known: Collection[str] = ()
) -> list[tuple[str, Any, Any, str]]:
    """[(key, key node, value node, dotted key)]: keys text, given once, in ``known`` if given.

    ``key`` is the dotted key of the mapping itself ("" at the top); errors name it.
    """
    where = key or "(top level)"
    if node.id != "mapping":
        raise error_cls(f"{name}:{line_of(node)}: key '{where}': expected a mapping")
    out: list[tuple[str, Any, Any, str]] = []
    first: dict[str, int] = {}
    for knode, vnode in node.value:
        text, at = knode.value, f"{name}:{line_of(knode)}: key"
        full = f"{key}.{text}" if key else text
        if knode.id != "scalar" or knode.tag != "tag:yaml.org,2002:str":
            # `1:` or `[a]:` is a slip, not a name; `"1":` is the way to mean one.
            raise error_cls(f"{at} '{full if knode.id == 'scalar' else where}': keys must be text")
        if text in first:
            raise error_cls(f"{at} '{full}': duplicate key (first on line {first[text]})")
        if known and text not in known:
            raise error_cls(f"{at} '{full}': {unknown_key(text, known)}")
        first[text] = line_of(knode)
        out.append((text, knode, vnode, full))
    return out


def scalar_value(node: Any, name: str, error_cls: type[Exception]) -> Any:
    """A scalar node typed as ``yaml.safe_load`` types it (int, float, bool, None, str...)."""
    yaml = _yaml()
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, AttributeError) as exc:
        # `!!int x` or `!!python/name:os.system` compose fine and fail only here.
        kind = node.tag.rsplit(":", 1)[-1]
        problem = getattr(exc, "problem", None) or f"{node.value!r} is not a valid {kind}"
        raise error_cls(f"{name}:{line_of(node)}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()


Lines = dict[tuple[Any, ...], int]


def load_with_lines(text: str, name: str, error_cls: type[Exception]) -> tuple[Any, Lines]:
    """The data ``yaml.safe_load`` gives, and the line of every key and list item by path.

    A path is the keys and list indexes from the top, like ``("gpus", 0, "name")``; keys
    are typed as in the data (``1:`` is the int 1).  Errors are ``FILE:LINE: dotted.path:
    problem``: a key given twice in one mapping, an alias inside what it names.  ``(None,
    {})`` for a file with no document.
    """
    yaml = _yaml()
    # One parse gives both the node tree (for the lines) and the data; libyaml's parser
    # when pyyaml was built with it, because the pure-Python one costs ~30 ms per built-in
    # scenario on the --once --demo path.
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    _check_depth(yaml, loader_cls, text, name, error_cls)
    loader = loader_cls(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _not_valid(exc, name, error_cls) from None
        if node is None:
            return None, {}
        _check_size(node, name, error_cls)
        lines: Lines = {}
        # The line map first: constructing the data flattens merge keys in the tree.
        _LineMap(yaml, name, error_cls, lines).walk(node, (), set())
        return _construct(yaml, loader, node, name, error_cls), lines
    finally:
        loader.dispose()


def _construct(yaml: Any, loader: Any, node: Any, name: str, error_cls: type[Exception]) -> Any:
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _not_valid(exc, name, error_cls) from None
    except (ValueError, TypeError, AttributeError) as exc:
        # `!!int x` composes fine and fails only here, without a mark: find the scalar.
        for scalar in _scalars(node):
            scalar_value(scalar, name, error_cls)
        raise error_cls(f"{name}:{line_of(node)}: not valid YAML: {exc}") from None


def _scalars(root: Any) -> Iterator[Any]:
    """The scalar nodes under ``root`` in file order, keys included, each once."""
    todo, seen = [root], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.id == "scalar":
            if node.tag != _MERGE:  # "<<" means something only as a key in a mapping
                yield node
        elif node.id == "sequence":
            todo.extend(reversed(node.value))
        else:
            todo.extend(part for pair in reversed(node.value) for part in reversed(pair))


_MERGE = "tag:yaml.org,2002:merge"


class _LineMap:
    """Fills ``lines`` from a node tree, checking keys on the way."""

    def __init__(self, yaml: Any, name: str, error_cls: type[Exception], lines: Lines) -> None:
        self.name = name
        self.error_cls = error_cls
        self.lines = lines
        self.failed = (yaml.YAMLError, ValueError, TypeError, AttributeError)
        # Keys get their own constructor: a key that fails to construct (the merge key
        # "<<") must leave no state behind in the loader that builds the data.
        self.keys = yaml.constructor.SafeConstructor()

    def key_of(self, key_node: Any) -> Any:
        try:
            return self.keys.construct_object(key_node, deep=True)
        except self.failed:
            # "<<", or a bad `!!int x` that constructing the data then reports.
            self.keys.recursive_objects.clear()
            return key_node.value

    def fail(self, path: tuple[Any, ...], problem: str) -> Exception:
        key = ".".join(str(p) for p in path)
        return self.error_cls(f"{self.name}:{self.lines[path]}: {key}: {problem}")

    def walk(self, node: Any, path: tuple[Any, ...], inside: set[int]) -> None:
        if node.id == "scalar":
            return
        if id(node) in inside:
            # safe_load builds such a list or mapping into itself; no scenario means that.
            raise self.fail(path, "an alias inside what it names (a loop)")
        inside.add(id(node))
        if node.id == "mapping":
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.id != "scalar":
                    continue  # a list or mapping as a key: constructing the data refuses it
                key = self.key_of(key_node)
                where = (*path, key)
                self.lines[where] = line = line_of(key_node)
                if key in first:
                    raise self.fail(where, f"duplicate key (first on line {first[key]})")
                first[key] = line
                self.walk(value_node, where, inside)
        else:
            for i, item in enumerate(node.value):
                at = (*path, i)
                self.lines[at] = line_of(item)
                self.walk(item, at, inside)
        inside.discard(id(node))
