"""TTGIR parsing: a Lark grammar and the op tree it produces."""

from .parser import parse, parse_file
from .tree import Block, FileLoc, Function, Location, Module, Op, Region

__all__ = ["parse", "parse_file", "Module", "Op", "Region", "Block", "Function", "Location",
           "FileLoc"]
