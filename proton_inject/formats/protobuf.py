"""A tiny protobuf encoder for the native trace writer (``trace_perfetto.py``): single fields as
bytes, and many messages of the same fields at once, column-wise with numpy (``Col``,
``encode_packets``): each field of every message laid out in a byte matrix, then the real bytes
taken row by row, so no step works message by message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v > 0x7F:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def int_field(field: int, v: int) -> bytes:
    return tag(field, 0) + varint(int(v))


def msg(field: int, body: bytes) -> bytes:
    return tag(field, 2) + varint(len(body)) + body


def str_field(field: int, s: str) -> bytes:
    return msg(field, s.encode())


_THRESH = [1 << (7 * k) for k in range(1, 10)]


def vlen(v: np.ndarray) -> np.ndarray:
    """Varint byte count of each uint64 value (one comparison per byte the largest needs)."""
    n = np.ones(len(v), np.int64)
    top = int(v.max()) if len(v) else 0
    for t in _THRESH:
        if top < t:
            break
        n += v >= np.uint64(t)
    return n


def _u64(v: Any, n: int) -> np.ndarray:
    """A varint column as uint64 (negative int64 as two's complement, as protobuf does)."""
    if np.isscalar(v):
        return np.full(n, int(v) & ((1 << 64) - 1), np.uint64)
    return np.asarray(v, np.int64).view(np.uint64)


class Col:
    """One field of a message over many rows: a varint column (or scalar), a constant body,
    a byte-string column (``table[idx]``), or a sub-message (a list of ``Col``); ``rows``
    (bool per row) says which rows have it (all when None). Columns hold a value for every row.

    Encoding lays each field out in fixed columns of a (rows x width) byte matrix, as wide as
    its widest value, with a mask of the bytes that are real; the packets are the matrix's
    masked bytes in row order. So no step works row by row."""

    def __init__(self, tag: bytes, *, value: Any = None, const: bytes | None = None,
                 table: Sequence[bytes] | None = None, idx: np.ndarray | None = None,
                 sub: list[Col] | None = None, rows: np.ndarray | None = None):
        self.tag, self.value, self.const, self.sub, self.rows = tag, value, const, sub, rows
        self.table, self.idx = table, idx

    def sizes(self, n: int) -> np.ndarray:
        """Bytes of this field in each of ``n`` rows (0 where absent); sets its width."""
        if self.const is not None:
            own = np.full(n, len(self.tag) + len(self.const), np.int64)
            self.width = int(own[0]) if n else 0
        elif self.table is not None:
            tl = np.array([len(t) for t in self.table] or [0], np.int64)
            w = self.tw = int(tl.max())
            self.tb = np.zeros((max(1, len(self.table)), max(1, w)), np.uint8)
            for i, t in enumerate(self.table):
                self.tb[i, :len(t)] = np.frombuffer(t, np.uint8)
            self.blen = tl[self.idx]
            self.lv = self.blen.astype(np.uint64)
            self.ln = vlen(self.lv)
            own = len(self.tag) + self.ln + self.blen
            self.width = len(self.tag) + int(self.ln.max(initial=1)) + w
        elif self.sub is not None:
            inner = np.zeros(n, np.int64)
            for c in self.sub:
                inner += c.sizes(n)
            self.lv = inner.astype(np.uint64)
            self.ln = vlen(self.lv)
            own = len(self.tag) + self.ln + inner
            self.width = len(self.tag) + int(self.ln.max(initial=1)) + sum(c.width for c in self.sub)
        else:
            self.v = _u64(self.value, n)
            self.ln = vlen(self.v)
            own = len(self.tag) + self.ln
            self.width = len(self.tag) + int(self.ln.max(initial=1))
        if self.rows is not None:
            own = np.where(self.rows, own, 0)
        return own

    def put(self, mat: np.ndarray, mask: np.ndarray, a: int, rows: np.ndarray | None) -> int:
        """Write the field's columns from column ``a`` on; returns the next free column."""
        here = self.rows if rows is None else (rows if self.rows is None else rows & self.rows)
        on = True if here is None else here
        for k, b in enumerate(self.tag):
            mat[:, a + k] = b
            mask[:, a + k] = on
        a += len(self.tag)
        if self.const is not None:
            mat[:, a:a + len(self.const)] = np.frombuffer(self.const, np.uint8)
            mask[:, a:a + len(self.const)] = on if here is None else here[:, None]
            return a + len(self.const)
        v = self.lv if self.sub is not None or self.table is not None else self.v
        a = _put_varint(mat, mask, a, v, self.ln, here)
        if self.table is not None:
            w = self.tw  # (the longest string's bytes: the table's matrix has a column even for none)
            mat[:, a:a + w] = self.tb[self.idx][:, :w]
            m = np.arange(w) < self.blen[:, None]
            mask[:, a:a + w] = m if here is None else m & here[:, None]
            return a + w
        if self.sub is not None:
            for c in self.sub:
                a = c.put(mat, mask, a, here)
        return a


def _put_varint(mat: np.ndarray, mask: np.ndarray, a: int, v: np.ndarray, n: np.ndarray,
                rows: np.ndarray | None) -> int:
    """Varints of ``v`` (``n`` bytes each) in columns ``a``..; returns the next free column."""
    width = int(n.max(initial=1))
    q = v.astype(np.uint32) if width <= 4 else v.copy()
    seven = q.dtype.type(7)
    for k in range(width):
        b = (q & q.dtype.type(0x7F)).astype(np.uint8)
        if k + 1 < width:
            b |= (n > k + 1).view(np.uint8) << np.uint8(7)
            q >>= seven
        mat[:, a + k] = b
        m = n > k if k else True
        mask[:, a + k] = (m if rows is None else rows) if k == 0 else (m if rows is None else m & rows)
    return a + width


PACKET = 1  # each message is framed as this field of the one around it (``Trace.packet``)

# Up to this many messages, encoded one by one: the columns' numpy calls (a dozen a field)
# cost more than the bytes (a small launch's track descriptors and sequence heads: 2-8 rows,
# 0.25 ms a call column-wise on the 2-core VM, a fifth of a small launch's report).
ROW_BY_ROW = 16


def _put_row(c: Col, i: int, out: bytearray) -> None:
    """Field ``c`` of row ``i`` onto ``out`` (nothing where the row lacks it), as the columns
    lay it out."""
    if c.rows is not None and not c.rows[i]:
        return
    out += c.tag
    if c.const is not None:
        out += c.const
    elif c.table is not None:
        t = c.table[int(c.idx[i])]
        out += varint(len(t))
        out += t
    elif c.sub is not None:
        body = bytearray()
        for f in c.sub:
            _put_row(f, i, body)
        out += varint(len(body))
        out += body
    else:
        out += varint(int(c.value if np.ndim(c.value) == 0 else c.value[i]))


def encode_packets(n: int, fields: list[Col]) -> np.ndarray:
    """``n`` messages of ``fields`` (each framed as field 1 of the message around them:
    ``Trace.packet``) as one byte array; one by one up to ROW_BY_ROW messages, else
    column-wise (the same bytes)."""
    if n == 0:
        return np.zeros(0, np.uint8)
    top = Col(tag(PACKET, 2), sub=fields)
    if n <= ROW_BY_ROW:
        out = bytearray()
        for i in range(n):
            _put_row(top, i, out)
        return np.frombuffer(out, np.uint8)
    top.sizes(n)
    # column by column into the transposed matrix (each column contiguous), then rows out
    mat = np.empty((top.width, n), np.uint8)
    mask = np.empty((top.width, n), bool)
    top.put(mat.T, mask.T, 0, None)
    return mat.T[mask.T]
