"""Locations: each op's ``loc(...)`` (inline or a ``#locN`` alias) resolved to source frames
and names; an alias never defined is a parse error."""

from __future__ import annotations

from itertools import islice

from .parse_errors import error_at
from .tree import UNKNOWN, FileLoc, Location, Module, Op


def all_ops(module: Module) -> list[Op]:
    """Every op, without the cost of nested generators (order does not matter here)."""
    out: list[Op] = []
    stack = list(module.items)
    while stack:
        op = stack.pop()
        out.append(op)
        for region in op.regions:
            for block in region.blocks:
                stack.extend(block.ops)
    return out


# Frames (and names) kept per location, innermost first. Real IR has a handful (an inlined
# call adds one); aliases that each name the one before twice would double them per line.
MAX_PARTS = 32


def _children(node) -> tuple:
    kind = node[0]
    if kind == "name":
        return () if node[2] is None else (node[2],)
    if kind == "callsite":
        return (node[1], node[2])
    if kind == "fused":
        return tuple(node[1])
    return ()


def _combine(node, parts: list[Location]) -> Location:
    kind = node[0]
    if kind == "file":
        return Location((FileLoc(node[1], node[2], node[3]),), ())
    if kind == "ref":
        return parts[0]
    frames = tuple(islice((f for p in parts for f in p.frames), MAX_PARTS))
    names = tuple(islice((n for p in parts for n in p.names), MAX_PARTS))
    if kind == "name":
        names = ((node[1],) + names)[:MAX_PARTS]
    elif kind not in ("callsite", "fused"):
        return UNKNOWN
    return Location(frames, names)


def resolve_locations(module: Module, source: str, ops: list[Op]) -> None:
    """Each op's ``location``, through the loc aliases: without recursion (a chain of 10^5
    aliases), each node once (aliases naming one another many times), at most MAX_PARTS frames
    each; a cycle, which MLIR would reject, resolves to no location."""
    aliases = module.loc_aliases
    path = module.path
    done: dict[int, Location] = {}  # id of a node (aliases' nodes live as long as this) -> location
    open_: set[int] = set()  # nodes whose parts are being resolved: reaching one again is a cycle

    def parts_of(node) -> tuple:
        if node[0] != "ref":
            return _children(node)
        if node[1] not in aliases:
            raise error_at(source, path, node[2], f"loc alias {node[1]} is never defined")
        return (aliases[node[1]],)

    def resolve(root) -> Location:
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if ready:
                open_.discard(key)
                done[key] = _combine(node, [done.get(id(c), UNKNOWN) for c in parts_of(node)])
            elif key not in done and key not in open_:
                open_.add(key)
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(parts_of(node)) if id(c) not in done)
        return done[id(root)]

    for node in aliases.values():  # every alias, used or not: one never defined is an error
        resolve(node)
    for op in ops:
        if op.loc_ref is not None:
            if op.loc_ref not in aliases:
                raise error_at(source, path, op.end - len(op.loc_ref) - 1,
                                f"loc alias {op.loc_ref} is never defined")
            op.location = done[id(aliases[op.loc_ref])]
        elif op.loc_node is not None:
            op.location = resolve(op.loc_node)

