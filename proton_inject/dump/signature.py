"""Kernel signatures and constexpr values as the user types them for an AOT dump.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from proton_inject.errors import UserError

_SCALAR_TYPES = {
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64",
}  # fmt: skip


# Scalars the JIT never specializes on divisibility (it passes no attribute for them).
_UNSPECIALIZED_SCALARS = {"u1", "fp16", "bf16", "fp32", "fp64"}


_NAME_RE = re.compile(r"[A-Za-z_]\w*")


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside ``<...>`` and ``[...]`` (tensordesc types contain commas)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _check_type(name: str, ty: str) -> None:
    base = ty.split(":", 1)[0] if not ty.startswith("tensordesc") else ty
    if base.lower() == "none":  # the argument is passed as None: the JIT makes it a constexpr
        return
    if base.startswith("*"):
        pointee = base.lstrip("*")
        if base.startswith("*k"):  # const pointer, as the JIT writes it
            pointee = base[2:]
        if pointee in _SCALAR_TYPES:
            return
    elif base in _SCALAR_TYPES:
        return
    elif re.fullmatch(r"tensordesc<\w+\[[\d, ]+\](?:,.*)?>", base):
        return
    raise UserError(
        f"signature: {name}={ty}: unknown type {base!r}; use a Triton type string such as "
        "*fp16, *fp32, i32, i64, fp32 or tensordesc<fp16[128, 64]> (none for an argument passed "
        "as None), optionally with a divisibility hint :16 (or :1 for none)"
    )


def parse_signature(text: str) -> dict[str, str]:
    """``"a_ptr=*fp16,b_ptr=*fp16:16,M=i32"`` -> ``{"a_ptr": "*fp16", "b_ptr": "*fp16:16", ...}``.

    A type may end in a divisibility hint: ``:16`` (divisible by 16 / 16-byte aligned) or
    ``:1`` (no assumption). Without one, pointers are taken as 16-byte aligned (what the JIT
    sees for any torch tensor) and integers as not divisible by 16.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError("signature is empty: expected NAME=TYPE pairs such as 'a_ptr=*fp16,M=i32'")
    sig: dict[str, str] = {}
    for raw in _split_top_level(text):
        item = raw.strip()
        if not item:
            raise UserError(f"signature {text!r}: empty entry (two commas in a row?)")
        if "=" not in item:
            raise UserError(f"signature entry {item!r}: expected NAME=TYPE, e.g. 'a_ptr=*fp16'")
        name, ty = (p.strip() for p in item.split("=", 1))
        if not _NAME_RE.fullmatch(name):
            raise UserError(f"signature entry {item!r}: {name!r} is not a parameter name")
        if name in sig:
            raise UserError(f"signature: parameter {name!r} is given twice")
        if not ty:
            raise UserError(f"signature entry {item!r}: missing type after '='")
        _split_hint(name, ty)  # validates the hint
        _check_type(name, ty)
        sig[name] = ty
    return sig


def _split_hint(name: str, ty: str) -> tuple[str, int | None]:
    """``"*fp16:16"`` -> ``("*fp16", 16)``; no hint -> ``(ty, None)``."""
    if ty.startswith("tensordesc"):
        return ty, None
    if ":" not in ty:
        return ty, None
    base, hint = ty.rsplit(":", 1)
    if hint not in ("16", "1"):
        raise UserError(
            f"signature: {name}={ty}: divisibility hint must be :16 or :1 (none); an argument "
            "equal to 1 is a constexpr: pass --constexpr NAME=1"
        )
    return base, int(hint)


def parse_constexpr_value(text: str) -> Any:
    """``"128"`` -> 128, ``"0.5"`` -> 0.5, ``"true"`` -> True, ``"None"`` -> None, ``"tl.fp16"``
    -> the dtype, ``"'none'"`` (quoted, single or double) -> the string ``none``; anything
    else -> the string. A quoted value is never converted, so a string that looks like another
    type (none, true, 1e-5, 08) can be given; an integer with a leading zero is refused
    rather than guessed at."""
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    if re.fullmatch(r"[+-]?0\d+", s):
        raise UserError(f"--constexpr value {s!r}: an integer with a leading zero is ambiguous; "
                        f"write {int(s)} for the integer or '{s}' (quoted) for the string")
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        pass
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    if s.lower() == "none":  # `if MASK is not None:` needs Python's None, not the string
        return None
    if s.startswith("tl."):  # a dtype constexpr (hashed as a dtype, not as a string)
        import triton.language as tl

        dt = getattr(tl, s[3:], None)
        if isinstance(dt, tl.dtype):
            return dt
    return s


def constexpr_type(v: Any) -> str:
    """The Python type a constexpr value was read as, for summaries (``str``, ``int``, ...)."""
    import triton.language as tl

    return "dtype" if isinstance(v, tl.dtype) else type(v).__name__


def constexpr_text(v: Any) -> str:
    """The ``--constexpr`` text that ``parse_constexpr_value`` reads back as ``v``."""
    import triton.language as tl

    if v is None:
        return "None"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tl.dtype):
        name = next((n for n in dir(tl) if isinstance(getattr(tl, n), tl.dtype)
                     and getattr(tl, n) == v), str(v))
        return f"tl.{name}"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):  # quoted when unquoted it would read back as another value
        try:
            same = parse_constexpr_value(v) == v
        except UserError:
            same = False
        return v if same else repr(v)
    return str(v)


def parse_constexprs(items: Iterable[str]) -> dict[str, Any]:
    """``["BM=128", "EVEN_K=true"]`` -> ``{"BM": 128, "EVEN_K": True}``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"constexpr {item!r}: expected NAME=VALUE, e.g. BLOCK_M=128")
        name, value = (p.strip() for p in item.split("=", 1))
        if not _NAME_RE.fullmatch(name):
            raise UserError(f"constexpr {item!r}: {name!r} is not a parameter name")
        if not value:
            raise UserError(f"constexpr {item!r}: missing value after '='")
        if name in out:
            raise UserError(f"constexpr {name!r} is given twice")
        out[name] = parse_constexpr_value(value)
    return out
