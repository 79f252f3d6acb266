"""Locations: each op's ``loc(...)`` (inline or a ``#locN`` alias) resolved to source frames
and names; an alias never defined is a parse error."""

from __future__ import annotations

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


def resolve_locations(module: Module, source: str, ops: list[Op]) -> None:
    aliases = module.loc_aliases
    memo: dict[str, Location] = {}
    path = module.path

    def check_refs(node, pos_hint: int) -> None:
        kind = node[0]
        if kind == "ref":
            if node[1] not in aliases:
                raise error_at(source, path, node[2], f"loc alias {node[1]} is never defined")
        elif kind == "name" and node[2] is not None:
            check_refs(node[2], pos_hint)
        elif kind == "callsite":
            check_refs(node[1], pos_hint)
            check_refs(node[2], pos_hint)
        elif kind == "fused":
            for c in node[1]:
                check_refs(c, pos_hint)

    for node in aliases.values():
        check_refs(node, 0)

    def resolve_alias(name: str, stack: tuple[str, ...]) -> Location:
        if name in memo:
            return memo[name]
        if name in stack:
            return UNKNOWN  # a cycle MLIR would reject; keep going without a location
        loc = resolve(aliases[name], stack + (name,))
        memo[name] = loc
        return loc

    def resolve(node, stack: tuple[str, ...] = ()) -> Location:
        kind = node[0]
        if kind == "file":
            return Location((FileLoc(node[1], node[2], node[3]),), ())
        if kind == "ref":
            return resolve_alias(node[1], stack)
        if kind == "name":
            inner = resolve(node[2], stack) if node[2] is not None else UNKNOWN
            return Location(inner.frames, (node[1],) + inner.names)
        if kind == "callsite":
            callee, caller = resolve(node[1], stack), resolve(node[2], stack)
            return Location(callee.frames + caller.frames, callee.names + caller.names)
        if kind == "fused":
            parts = [resolve(c, stack) for c in node[1]]
            return Location(tuple(f for p in parts for f in p.frames),
                            tuple(n for p in parts for n in p.names))
        return UNKNOWN

    for op in ops:
        if op.loc_ref is not None:
            if op.loc_ref not in aliases:
                raise error_at(source, path, op.end - len(op.loc_ref) - 1,
                                f"loc alias {op.loc_ref} is never defined")
            op.location = resolve_alias(op.loc_ref, ())
        elif op.loc_node is not None:
            check_refs(op.loc_node, op.start)
            op.location = resolve(op.loc_node)


# ---- errors -------------------------------------------------------------------
