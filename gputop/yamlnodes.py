"""YAML as a node tree, whose marks let errors name FILE:LINE; nodes differ by ``node.id``.

pyyaml is imported lazily: ``gputop --once`` without a config file must not load it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


def line_of(node: Any) -> int:
    return int(node.start_mark.line) + 1


def compose(text: str, name: str, error_cls: type[Exception]) -> Any | None:
    """The root node of ``text``; None for a file with no document (empty, only comments)."""
    import yaml

    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", 0) + 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error_cls(f"{name}:{line}: not valid YAML: {problem}") from None


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
            raise error_cls(f"{at} '{full}': unknown key (expected one of: {', '.join(known)})")
        first[text] = line_of(knode)
        out.append((text, knode, vnode, full))
    return out


def scalar_value(node: Any, name: str, error_cls: type[Exception]) -> Any:
    """A scalar node typed as ``yaml.safe_load`` types it (int, float, bool, None, str...)."""
    import yaml

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
