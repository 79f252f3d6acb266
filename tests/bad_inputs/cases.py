"""Bad inputs a hostile user gives each command, with the one message each must get.

Every case runs in an empty directory holding only its ``files``, from that directory (so
paths in messages are the relative ones of ``argv``). The promise checked for each: exit 2,
``message`` as the last line of stderr, no traceback, and the directory byte-identical
afterwards (inputs untouched, no output written). ``message`` follows "proton-inject: error: "
(click's own option errors are put in the same form).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TT = (REPO / "ttgir_samples/cuda-90/add_kernel.ttgir").read_bytes()
MM = (REPO / "ttgir_samples/cuda-90/matmul_kernel.ttgir").read_bytes()
_RAW = REPO / "tests/data/h100-shortlaunch"
RAW_META = json.loads((_RAW / "00000-matmul_kernel.json").read_text())
RAW_BIN = (_RAW / "00000-matmul_kernel.bin.gz").read_bytes()
TRACE = (REPO / "tests/data/golden/small_trace.json").read_bytes()
# (the expected file holds the command's stderr after the JSON)
REPORT_JSON = (REPO / "tests/data/expected/h100-shortlaunch/report.json").read_bytes().split(b"--- stderr")[0]

EMPTY = ("the file is empty; expected TTGIR (a 'module attributes {...} {' holding tt.func ops), "
         "e.g. from `proton-inject dump`")


class Special:
    """A file of the case directory that is not plain bytes (made by ``make``)."""

    def make(self, path: Path) -> None:
        raise NotImplementedError


class Fifo(Special):
    """A named pipe: opening it to read blocks until a writer comes (none does)."""

    def make(self, path: Path) -> None:
        os.mkfifo(path)


@dataclass
class Link(Special):
    """A symbolic link to ``target`` (``/dev/zero``, itself: a loop, ``/proc/self/mem``: a
    regular file whose first read fails, even for root)."""

    target: str

    def make(self, path: Path) -> None:
        os.symlink(self.target, path)


@dataclass
class Sparse(Special):
    """A file of ``size`` bytes that takes no disk space: zeros after ``head``."""

    size: int
    head: bytes = b""

    def make(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.write(self.head)
            f.truncate(self.size)


@dataclass
class Case:
    name: str
    argv: list[str]
    message: str
    files: dict[str, bytes | str | Special] = field(default_factory=dict)


def dump(manifest: object = None) -> dict[str, bytes | str]:
    """A dump directory of one kernel; ``manifest`` replaces its manifest.json."""
    m = {"version": 1, "kernels": [{"name": "add_kernel", "hash": "h1",
                                    "ttgir": "h1/add_kernel.ttgir"}]}
    body = manifest if isinstance(manifest, str | bytes | Special) else json.dumps(
        m if manifest is None else manifest)
    return {"dump/h1/add_kernel.ttgir": TT, "dump/manifest.json": body}


def raw(drop: tuple[str, ...] = (), text: str | bytes | Special | None = None,
        binary: bytes | Special | None = None, **changes) -> dict[str, bytes | str | Special]:
    """One raw launch in raw/, its metadata changed (or replaced by ``text``)."""
    meta = {k: v for k, v in {**RAW_META, **changes}.items() if k not in drop}
    return {"raw/00000-matmul_kernel.json": text if text is not None else json.dumps(meta),
            "raw/00000-matmul_kernel.bin.gz": RAW_BIN if binary is None else binary}


def rules(toml: str | bytes) -> dict[str, bytes | str]:
    return {"a.ttgir": TT, "r.toml": toml}


def trace(mutate) -> dict[str, bytes | str]:
    doc = json.loads(TRACE)
    mutate(doc)
    return {"t.json": json.dumps(doc)}


INS = ["insert", "a.ttgir", "-o", "o.ttgir"]
RULES = [*INS, "--rules", "r.toml"]
REPORT = ["report", "raw"]
NFIX = "write the trace again with `proton-inject report RAW --trace DIR`"
RAWJ = "raw/00000-matmul_kernel.json"
RAWF = "raw/00000-matmul_kernel.bin.gz"
FIX = "the file is damaged; rewrite it with `proton-inject run` (or decode.save_raw)"
TFIX = "write it again with `proton-inject report RAW --trace DIR`"
MFIX = "re-run `proton-inject dump` (or `insert`) to rewrite it"
GIVE = "give a regular file or a directory"
DEEP_TOML = "r.toml: TOML nested more than 64 levels deep; not a rules file"
MiB = 2**20
RE2 = "(RE2 syntax: no backreferences or lookarounds)"
AAA = TT.replace(b"add_kernel", b"a" * 40 + b"_k")  # a kernel name (a+)+$ backtracks on
NO_SRC = ("a.ttgir: source examples/vector_add.py not found under the current directory, so its "
          "'# proton:' marks are not read; pass --source-root DIR")
NOT_OUT = ("not a regular file or a directory; writing would replace it: choose another output "
           "path")
VIA_LINK = ("writing would replace the link, not what it names: give the path it names, or remove "
            "the link")
LONG_NAME = ("a name in this path is {:,} bytes; names may have 223 (the file system's 255, less "
             "what the tool adds beside it); choose a shorter name")
LONG_PATH = "the path is longer than the 4,064 bytes the tool can write to; choose a shorter path"
VECTOR_ADD = (REPO / "examples/vector_add.py").read_bytes()
SRC_INSERT = ["insert", "dump", "-o", "o", "--region", "x=vector_add.py:20-24"]


def source_dump(source_file: str) -> dict:
    """A dump manifest whose kernel records ``source_file`` (and a hash it no longer has)."""
    return {"kernels": [{"name": "add_kernel", "hash": "h1", "ttgir": "h1/add_kernel.ttgir",
                         "source_file": source_file, "source_sha256": "0" * 64}]}


CASES: list[Case] = [
    # --- rules files ---------------------------------------------------------------------------
    Case("rules loop-depth string", RULES,
         "r.toml: loop-depth = 'two' must be an integer of 1 or more (1 = outermost loops only)",
         rules('loop-depth = "two"\n')),
    Case("rules loop-depth zero", RULES,
         "r.toml: loop-depth = 0 must be an integer of 1 or more (1 = outermost loops only)",
         rules("loop-depth = 0\n")),
    Case("rules loop-depth bool", RULES,
         "r.toml: loop-depth = True must be an integer of 1 or more (1 = outermost loops only)",
         rules("loop-depth = true\n")),
    Case("rules kernel int", RULES, "r.toml: kernel = 5 must be a non-empty string",
         rules("kernel = 5\n")),
    Case("rules kernel bad regex", RULES,
         f"r.toml: kernel = '(' is not a valid regular expression: missing ): ( {RE2}",
         rules('kernel = "("\n')),
    Case("rules op int list", RULES,
         "r.toml: op = [1, 2] must be a string or an array of strings, e.g. 'tt.dot'",
         rules("op = [1, 2]\n")),
    Case("rules op empty string", RULES,
         "r.toml: op = '' must be a string or an array of strings, e.g. 'tt.dot'",
         rules('op = ""\n')),
    Case("rules kernel-scope string false", RULES,
         "r.toml: kernel-scope = 'false' must be true or false (without quotes)",
         rules('kernel-scope = "false"\n')),
    Case("rules marks string no", RULES,
         "r.toml: marks = 'no' must be true or false (without quotes)", rules('marks = "no"\n')),
    Case("rules loops unknown", RULES,
         "r.toml: loops = 'inner' must be one of 'outer', 'iteration', 'both'",
         rules('loops = "inner"\n')),
    Case("rules loops int", RULES,
         "r.toml: loops = 1 must be one of 'outer', 'iteration', 'both'", rules("loops = 1\n")),
    Case("rules region int", RULES,
         "r.toml: region = 5 must be a string or an array of strings, e.g. "
         "'load tiles=matmul.py:41-43'", rules("region = 5\n")),
    Case("rules region bad spec", RULES,
         "r.toml: region 'oops': expected NAME=FILE:START-END, e.g. 'load tiles=matmul.py:41-43'",
         rules('region = "oops"\n')),
    Case("rules region end before start", RULES,
         "r.toml: region 'x=a.py:9-3': END line 3 is before START line 9",
         rules('region = ["x=a.py:9-3"]\n')),
    Case("rules source-root int", RULES, "r.toml: source-root = 3 must be a non-empty string",
         rules("source-root = 3\n")),
    Case("rules unknown key", RULES,
         "r.toml: unknown rule key(s) lops; known: kernel-scope, loops, loop-depth, region, op, "
         "kernel, marks, source-root, sample-ctas, branches", rules('lops = "both"\n')),
    Case("rules tool table not a table", RULES,
         "r.toml [tool.proton-inject]: expected a table of rules, not an integer",
         rules('[tool]\n"proton-inject" = 5\n')),
    Case("rules not TOML", RULES,
         "r.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, "
         "column 6)", rules("this is not toml\n")),
    Case("rules not UTF-8", RULES, "r.toml: not UTF-8 text (byte 7); not a rules file",
         rules(b"loops =\xff\xfe\n")),
    Case("rules is a directory", [*INS, "--rules", "rdir"],
         "rdir: is a directory; give the rules file", {"a.ttgir": TT, "rdir/x": "1"}),
    Case("rules missing", RULES, "r.toml: no such rules file", {"a.ttgir": TT}),
    Case("pyproject bad table", INS,
         "pyproject.toml [tool.proton-inject]: loop-depth = 'x' must be an integer of 1 or more "
         "(1 = outermost loops only)",
         {"a.ttgir": TT, "pyproject.toml": '[tool.proton-inject]\nloop-depth = "x"\n'}),
    Case("pyproject tool not a table", INS,
         "pyproject.toml [tool.proton-inject]: expected a table of rules, not a string",
         {"a.ttgir": TT, "pyproject.toml": '[tool]\n"proton-inject" = "yes"\n'}),
    # --- insert options and outputs ------------------------------------------------------------
    Case("insert no output", ["insert", "a.ttgir"],
         "insert: give -o OUT (where to write) and/or --check-against GOLDEN", {"a.ttgir": TT}),
    Case("insert missing input", INS, "a.ttgir: no such file or directory"),
    Case("insert file onto itself", ["insert", "a.ttgir", "-o", "a.ttgir"],
         "-o a.ttgir: is the input a.ttgir; writing there would destroy it; choose another "
         "output path", {"a.ttgir": TT}),
    Case("insert file onto itself via ./", ["insert", "a.ttgir", "-o", "./sub/../a.ttgir"],
         "-o ./sub/../a.ttgir: is the input a.ttgir; writing there would destroy it; choose "
         "another output path", {"a.ttgir": TT, "sub/k": "1"}),
    Case("insert dump onto itself", ["insert", "dump", "-o", "dump"],
         "-o dump: is the input dump; writing there would destroy it; choose another output path",
         dump()),
    Case("insert dump into itself", ["insert", "dump", "-o", "dump/inst"],
         "-o dump/inst: is inside the input dump; choose an output path outside it", dump()),
    Case("insert dump onto its parent", ["insert", "w/dump", "-o", "w"],
         "-o w: holds the input w/dump, which writing it would replace; choose another output path",
         {"w/dump/h1/add_kernel.ttgir": TT}),
    Case("insert over the rules file", [*INS[:3], "r.toml", "--rules", "r.toml"],
         "-o r.toml: is the --rules file r.toml; writing there would destroy it; choose another "
         "output path", rules("kernel-scope = true\n")),
    Case("insert over the golden", ["insert", "a.ttgir", "-o", "g.ttgir", "--check-against",
                                    "g.ttgir"],
         "-o g.ttgir: is the golden g.ttgir; writing there would destroy it; choose another "
         "output path", {"a.ttgir": TT, "g.ttgir": TT}),
    Case("insert file output is a directory", ["insert", "a.ttgir", "-o", "odir"],
         "-o odir: is a directory; give a file name to write", {"a.ttgir": TT, "odir/x": "1"}),
    Case("insert output under a file", ["insert", "a.ttgir", "-o", "f/o.ttgir"],
         "-o f/o.ttgir: f is a file, not a directory; choose another output path",
         {"a.ttgir": TT, "f": "x"}),
    Case("insert output unwritable", ["insert", "a.ttgir", "-o", "/proc/o.ttgir"],
         "-o /proc/o.ttgir: cannot create files in /proc (No such file or directory); choose "
         "another output path", {"a.ttgir": TT}),
    Case("insert tree output is a file", ["insert", "dump", "-o", "f"],
         "-o f: exists and is not a directory; choose a directory", {**dump(), "f": "x"}),
    Case("insert tree over a foreign directory", ["insert", "dump", "-o", "mine"],
         "-o mine: holds notes.txt, which is not TTGIR written by proton-inject; choose another "
         "-o or remove it", {**dump(), "mine/notes.txt": "keep me"}),
    Case("insert tree golden is a file", ["insert", "dump", "--check-against", "a.ttgir"],
         "--check-against a.ttgir: is a file, but the input is a tree; give the golden tree "
         "(a directory)", {**dump(), "a.ttgir": TT}),
    # Outputs that exist as something else than a file or a directory, links, names too long.
    Case("insert output links to /dev/null", INS,
         f"-o o.ttgir: is a symbolic link to /dev/null, which is a character device, {NOT_OUT}",
         {"a.ttgir": TT, "o.ttgir": Link("/dev/null")}),
    Case("insert output is a FIFO", INS, f"-o o.ttgir: is a named pipe (FIFO), {NOT_OUT}",
         {"a.ttgir": TT, "o.ttgir": Fifo()}),
    Case("insert tree output is a link to a tree", ["insert", "dump", "-o", "o"],
         f"-o o: is a symbolic link (to old); {VIA_LINK}", {**dump(), "old/h1/add_kernel.ttgir": TT,
                                                           "o": Link("old")}),
    Case("insert output name too long", ["insert", "a.ttgir", "-o", "x" * 300],
         f"-o {'x' * 60}...(300 bytes): {LONG_NAME.format(300)}", {"a.ttgir": TT}),
    Case("insert output path too long", ["insert", "a.ttgir", "-o", "x/" * 2100 + "o"],
         f"-o {'x/' * 30}...(4,201 bytes): {LONG_PATH}", {"a.ttgir": TT}),
    Case("strip output links to /dev/null", ["strip", "a.ttgir", "-o", "o.ttgir"],
         f"-o o.ttgir: is a symbolic link to /dev/null, which is a character device, {NOT_OUT}",
         {"a.ttgir": TT, "o.ttgir": Link("/dev/null")}),
    Case("strip tree output is a link", ["strip", "dump", "-o", "o"],
         f"-o o: is a symbolic link (to old); {VIA_LINK}", {**dump(), "old/x": "1", "o": Link("old")}),
    Case("strip output name too long", ["strip", "a.ttgir", "-o", "y" * 256],
         f"-o {'y' * 60}...(256 bytes): {LONG_NAME.format(256)}", {"a.ttgir": TT}),
    Case("report plot links to /dev/null", [*REPORT, "--plot", "p.png"],
         f"--plot p.png: is a symbolic link to /dev/null, which is a character device, {NOT_OUT}",
         {**raw(), "p.png": Link("/dev/null")}),
    Case("report plot name too long", [*REPORT, "--plot", "p" * 300 + ".png"],
         f"--plot {'p' * 60}...(304 bytes): {LONG_NAME.format(304)}", raw()),
    Case("report trace dir is a FIFO", [*REPORT, "--trace", "t"],
         f"--trace t: is a named pipe (FIFO), {NOT_OUT}", {**raw(), "t": Fifo()}),
    Case("dump output links to /dev/null", ["dump", "-o", "d", "--", "python", "x.py"],
         f"-o d: is a symbolic link to /dev/null, which is a character device, {NOT_OUT}",
         {"x.py": "print(1)\n", "d": Link("/dev/null")}),
    Case("insert loop-depth zero", [*INS, "--loop-depth", "0"],
         "--loop-depth 0: must be 1 or more (1 = outermost loops only)", {"a.ttgir": TT}),
    Case("insert bad --region", [*INS, "--region", "x"],
         "--region 'x': expected NAME=FILE:START-END, e.g. 'load tiles=matmul.py:41-43'",
         {"a.ttgir": TT}),
    Case("insert bad --kernel regex", [*INS, "--kernel", "[a"],
         f"--kernel '[a' is not a valid regular expression: missing ]: [a {RE2}", {"a.ttgir": TT}),
    Case("insert --kernel with a backreference", [*INS, "--kernel", "(a)\\1"],
         f"--kernel '(a)\\\\1' is not a valid regular expression: invalid escape sequence: \\1 {RE2}",
         {"a.ttgir": TT}),
    Case("insert --op matches nothing", [*INS, "--op", "tt.nothing"],
         "a.ttgir: the rules selected no region; a.ttgir: source examples/vector_add.py not "
         "found under the current directory, so its '# proton:' marks are not read; pass "
         "--source-root DIR; kernel add_kernel: --op tt.nothing matched no op; op kinds in this "
         "kernel: scf.for, tt.addptr, tt.get_program_id, tt.load, tt.make_range, tt.splat, "
         "tt.store, arith.addf, arith.addi, arith.cmpi, arith.constant, arith.muli",
         {"a.ttgir": TT}),
    Case("insert --kernel matches nothing", [*INS, "--kernel", "zzz"],
         "a.ttgir: the rules selected no region (no kernel matches --kernel 'zzz'); a.ttgir: "
         "source examples/vector_add.py not found under the current directory, so its "
         "'# proton:' marks are not read; pass --source-root DIR", {"a.ttgir": TT}),
    # A pattern that backtracks for ever in Python's re against a kernel named a...a_k: the
    # kernel filter matches in linear time wherever the pattern comes from.
    Case("insert --kernel that backtracks", [*INS, "--kernel", "(a+)+$"],
         f"a.ttgir: the rules selected no region (no kernel matches --kernel '(a+)+$'); {NO_SRC}",
         {"a.ttgir": AAA}),
    Case("rules kernel that backtracks", RULES,
         f"a.ttgir: the rules selected no region (no kernel matches --kernel '(a+)+$'); {NO_SRC}",
         {"a.ttgir": AAA, "r.toml": 'kernel = "(a+)+$"\n'}),
    Case("pyproject kernel that backtracks", INS,
         f"a.ttgir: the rules selected no region (no kernel matches --kernel '(a+)+$'); {NO_SRC}",
         {"a.ttgir": AAA, "pyproject.toml": '[tool.proton-inject]\nkernel = "(a+)+$"\n'}),
    Case("insert already instrumented", INS,
         "a.ttgir: already instrumented (it holds proton.record ops); pass --force to strip "
         "them and instrument again, or run `proton-inject strip` first",
         {"a.ttgir": TT.replace(b"    %pid = ", b'    proton.record start "x"\n'
                                b'    proton.record end "x"\n    %pid = ', 1)}),
    Case("manifest is a list", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: expected a JSON object with a \"kernels\" list, not an array; {MFIX}",
         dump([])),
    Case("manifest kernels hold a number", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0] must be an object, not an integer; {MFIX}",
         dump({"kernels": [1]})),
    Case("manifest kernels not a list", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: \"kernels\" must be a list, not an integer; {MFIX}",
         dump({"kernels": 5})),
    Case("manifest file not a string", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].ttgir must be a string, not 5; {MFIX}",
         dump({"kernels": [{"ttgir": 5}]})),
    Case("manifest not JSON", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: not valid JSON (Expecting value: line 1 column 1 (char 0)); "
         "re-run `proton-inject dump` (or `insert`) to rewrite it", dump("nope")),
    Case("manifest not UTF-8", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: not UTF-8 text (byte 0); not a manifest file", dump(b"\xff{}")),
    Case("IR garbage", INS,
         "a.ttgir:1:1: 'garbage' is not an op that can stand at the top level; expected a module "
         "like 'module attributes {...} {' (is this a TTGIR file?)\n  garbage\n  ^",
         {"a.ttgir": "garbage\n"}),
    Case("IR empty file", INS, f"a.ttgir:1:1: {EMPTY}\n  ^", {"a.ttgir": ""}),
    Case("IR whitespace only", INS, f"a.ttgir:1:1: {EMPTY}\n  ^", {"a.ttgir": " \n\t\n"}),
    Case("IR 5 MB garbage line", INS,
         f"a.ttgir:1:1: '{'x' * 40}' is not an op that can stand at the top level; expected a "
         "module like 'module attributes {...} {' (is this a TTGIR file?)\n"
         f"  {'x' * 200}...\n  ^", {"a.ttgir": "x" * 5_000_000 + "\n"}),
    Case("IR loc line number of 5,000 digits", INS,
         "a.ttgir:2:37: line or column number 999999999999... (5,000 digits) in a loc is too "
         "large (more than 9 digits); not TTGIR from Triton\n"
         f"  #loc = loc(\"examples/vector_add.py\":{'9' * 164}...\n{' ' * 38}^",
         {"a.ttgir": TT.replace(b'vector_add.py":13:0', b'vector_add.py":' + b"9" * 5000 + b":0")}),
    Case("IR inline loc line number of 5,000 digits", INS,
         "a.ttgir:2:46: line or column number 999999999999... (5,000 digits) in a loc is too "
         "large (more than 9 digits); not TTGIR from Triton\n"
         f"  #loc = loc(fused[\"examples/vector_add.py\":13:{'9' * 155}...\n{' ' * 47}^",
         {"a.ttgir": TT.replace(b'vector_add.py":13:0)', b'vector_add.py":13:' + b"9" * 5000 + b"])")
                       .replace(b'#loc = loc("', b'#loc = loc(fused["')}),
    # --- strip ---------------------------------------------------------------------------------
    Case("strip file onto itself", ["strip", "a.ttgir", "-o", "a.ttgir"],
         "-o a.ttgir: is the input a.ttgir; writing there would destroy it; choose another "
         "output path", {"a.ttgir": TT}),
    Case("strip tree onto itself", ["strip", "dump", "-o", "dump"],
         "-o dump: is the input dump; writing there would destroy it; choose another output path",
         dump()),
    Case("strip tree into itself", ["strip", "dump", "-o", "dump/s"],
         "-o dump/s: is inside the input dump; choose an output path outside it", dump()),
    Case("strip file to a directory", ["strip", "a.ttgir", "-o", "odir"],
         "-o odir: is a directory; give a file name to write", {"a.ttgir": TT, "odir/x": "1"}),
    Case("strip output under a file", ["strip", "a.ttgir", "-o", "f/x.ttgir"],
         "-o f/x.ttgir: f is a file, not a directory; choose another output path",
         {"a.ttgir": TT, "f": "x"}),
    Case("strip missing input", ["strip", "nope", "-o", "x"],
         "strip: Invalid value for 'SRC': Path 'nope' does not exist. (`strip -h` lists the options)"),
    Case("strip tree over a foreign directory", ["strip", "dump", "-o", "mine"],
         "-o mine: holds notes.txt, which is not TTGIR written by proton-inject; choose another "
         "-o or remove it", {**dump(), "mine/notes.txt": "keep me"}),
    # --- report options ------------------------------------------------------------------------
    Case("report clock nan", [*REPORT, "--clock-mhz", "nan"],
         "--clock-mhz nan: must be a positive number of MHz, e.g. 1755", raw()),
    Case("report clock inf", [*REPORT, "--clock-mhz", "inf"],
         "--clock-mhz inf: must be a positive number of MHz, e.g. 1755", raw()),
    Case("report clock negative", [*REPORT, "--clock-mhz", "-5"],
         "--clock-mhz -5.0: must be a positive number of MHz, e.g. 1755", raw()),
    Case("report merge without trace", [*REPORT, "--merge"],
         "--merge only applies to --trace DIR; add --trace DIR or drop --merge", raw()),
    Case("report gz without trace", [*REPORT, "--gz"],
         "--gz only applies to --trace DIR; add --trace DIR or drop --gz", raw()),
    Case("report no-gz without trace", [*REPORT, "--no-gz"],
         "--no-gz only applies to --trace DIR; add --trace DIR or drop --no-gz", raw()),
    Case("report plot not png", [*REPORT, "--plot", "x.json"],
         "--plot x.json: must name a .png file, e.g. --plot timeline.png", raw()),
    Case("report plot over the metadata", [*REPORT, "--plot", RAWJ],
         f"--plot {RAWJ}: must name a .png file, e.g. --plot timeline.png", raw()),
    Case("report plot is a directory", [*REPORT, "--plot", "p.png"],
         "report: Invalid value for '--plot': File 'p.png' is a directory. (`report -h` lists the "
         "options)",
         {**raw(), "p.png/x": "1"}),
    Case("report trace into the raw dir", [*REPORT, "--trace", "raw"],
         f"--trace raw: holds the input {RAWJ}, which files written there could overwrite; "
         "choose another directory", raw()),
    Case("report plot into the raw dir", [*REPORT, "--plot", "raw/p.png"],
         f"--plot raw/p.png: sits beside the input {RAWJ}; the pictures written there (one per "
         "launch, named after it) could overwrite inputs; choose another directory", raw()),
    Case("report two runs whose launches share names, with --trace", ["report", "a", "b", "--trace", "t"],
         f"--trace t: a/{RAWJ} and b/{RAWJ} are both launch 00000-matmul_kernel; their traces "
         "would overwrite each other: report the runs one at a time, or pass --merge",
         {**{f"a/{k}": v for k, v in raw().items()}, **{f"b/{k}": v for k, v in raw().items()}}),
    Case("report two runs whose launches share names, with --plot", ["report", "a", "b", "--plot", "p.png"],
         f"--plot p.png: a/{RAWJ} and b/{RAWJ} are both launch 00000-matmul_kernel; their "
         "pictures would overwrite each other: report the runs one at a time",
         {**{f"a/{k}": v for k, v in raw().items()}, **{f"b/{k}": v for k, v in raw().items()}}),
    Case("report trace onto the metadata", [*REPORT, "--trace", RAWJ],
         f"report: Invalid value for '--trace': Directory '{RAWJ}' is a file. (`report -h` lists "
         "the options)", raw()),
    Case("report trace under a file", [*REPORT, "--trace", "f/t"],
         "--trace f/t: f is a file, not a directory; choose another output path",
         {**raw(), "f": "x"}),
    Case("report missing input", ["report", "nope"], "nope: no such file or directory"),
    Case("report empty dir", ["report", "e"],
         "e: holds neither raw launches (*.json + *.bin) nor traces", {"e/x.txt": "1"}),
    # --- raw launch metadata -------------------------------------------------------------------
    Case("meta is a list", [*REPORT[:1], RAWJ],
         f"{RAWJ}: expected a JSON object, not an array; {FIX}",
         raw(text='[{"format": "proton-inject-raw"}]')),
    Case("meta not JSON", REPORT[:1] + [RAWJ],
         f"{RAWJ}: not valid JSON (Expecting ':' delimiter: line 1 column 42 (char 41)); "
         "rewrite it with `proton-inject run`",
         raw(text='{"format": "proton-inject-raw", "kernel" "k"}')),
    Case("meta not UTF-8", REPORT[:1] + [RAWJ],
         f"{RAWJ}: not UTF-8 text (byte 38); not a launch metadata file",
         raw(text=b'{"format": "proton-inject-raw", "k": "\xff"}')),
    Case("meta scopes list", REPORT,
         f"{RAWJ}: scopes must be an object of scope id -> a name, not an array", raw(scopes=[])),
    Case("meta scope key not a number", REPORT,
         f"{RAWJ}: scopes has key 'x'; scope ids are integers", raw(scopes={"x": "k"})),
    Case("meta scope name int", REPORT, f"{RAWJ}: scopes[0] = 5 must be a name",
         raw(scopes={"0": 5})),
    Case("meta scope_parents bad value", REPORT,
         f"{RAWJ}: scope_parents[1] = 'x' must be an integer scope id",
         raw(scope_parents={"1": "x"})),
    Case("meta scope_locs not an object", REPORT,
         f"{RAWJ}: scope_locs must be an object of scope id -> a string, not an integer",
         raw(scope_locs=5)),
    Case("meta config object", REPORT,
         f"{RAWJ}: config = {{'a': 1}} must be null or a string; {FIX}", raw(config={"a": 1})),
    Case("meta launch string", REPORT,
         f"{RAWJ}: launch = 'x' must be an integer from 0 to 1000000000000; {FIX}",
         raw(launch="x")),
    Case("meta launch negative", REPORT,
         f"{RAWJ}: launch = -1 must be an integer from 0 to 1000000000000; {FIX}",
         raw(launch=-1)),
    Case("meta bin escapes the directory", REPORT,
         f"{RAWJ}: bin = '../x.bin' must be the name of a .bin or .bin.gz file in the same "
         f"directory; {FIX}", raw(bin="../x.bin")),
    Case("meta bin absolute", REPORT,
         f"{RAWJ}: bin = '/etc/passwd' must be the name of a .bin or .bin.gz file in the same "
         f"directory; {FIX}", raw(bin="/etc/passwd")),
    Case("meta bin number", REPORT,
         f"{RAWJ}: bin = 7 must be the name of a .bin or .bin.gz file in the same directory; "
         f"{FIX}", raw(bin=7)),
    Case("meta grid negative", REPORT,
         f"{RAWJ}: grid x = -1 is outside 1..2147483647: no CUDA launch has that grid; {FIX}",
         raw(grid=[-1, 1, 1])),
    Case("meta grid zero", REPORT,
         f"{RAWJ}: grid y = 0 is outside 1..65535: no CUDA launch has that grid; {FIX}",
         raw(grid=[96, 0, 1])),
    Case("meta grid overflows", REPORT,
         f"{RAWJ}: grid x = 18446744073709551617 is outside 1..2147483647: no CUDA launch has "
         f"that grid; {FIX}", raw(grid=[2**64 + 1, 1, 1])),
    Case("meta grid strings", REPORT,
         f"{RAWJ}: grid = ['96'] must be a list of 1 to 3 integers; {FIX}", raw(grid=["96"])),
    Case("meta grid four dims", REPORT,
         f"{RAWJ}: grid = [1, 1, 1, 1] must be a list of 1 to 3 integers; {FIX}",
         raw(grid=[1, 1, 1, 1])),
    Case("meta num_warps huge float", REPORT,
         f"{RAWJ}: num_warps = 1000000000.0 must be an integer from 1 to 32; {FIX}",
         raw(num_warps=1e9)),
    Case("meta num_warps huge int", REPORT,
         f"{RAWJ}: num_warps = 1000000000 must be an integer from 1 to 32; {FIX}",
         raw(num_warps=10**9)),
    Case("meta num_warps missing", REPORT, f"{RAWJ}: missing field 'num_warps'; {FIX}",
         raw(drop=("num_warps",))),
    Case("meta kernel number", REPORT, f"{RAWJ}: kernel = 5 must be a string; {FIX}",
         raw(kernel=5)),
    Case("meta sampled warp out of range", REPORT,
         f"{RAWJ}: sampled_warps = [9] must be null or a non-empty list of warp ids below "
         f"num_warps=8; {FIX}", raw(sampled_warps=[9])),
    Case("meta clock bits", REPORT, f"{RAWJ}: clock_bits = 48 must be 32 or 64; {FIX}",
         raw(clock_bits=48)),
    Case("meta buffer type", REPORT,
         f"{RAWJ}: buffer_type = 'tex' must be 'shared', 'global' or 'direct'; {FIX}",
         raw(buffer_type="tex")),
    Case("meta bytes_per_cta string", REPORT,
         f"{RAWJ}: bytes_per_cta = '8320' must be an integer from 4 to 2147483648; {FIX}",
         raw(bytes_per_cta="8320")),
    Case("meta bytes_per_cta too small", REPORT,
         "launch 00000-matmul_kernel: bytes_per_cta=64 cannot hold the header of 8 warps; it "
         "must be the kernel's profile_scratch_size", raw(bytes_per_cta=64)),
    Case("meta sm clock string", REPORT,
         f"{RAWJ}: sm_clock_mhz = 'fast' must be null or a positive number of MHz up to 10000; "
         f"{FIX}",
         raw(sm_clock_mhz="fast")),
    Case("meta wrong format", ["report", RAWF],
         f"{RAWJ}: not a proton-inject raw launch (format='other')", raw(format="other")),
    Case("raw buffer missing", ["report", RAWJ],
         f"{RAWJ}: raw buffer 00000-matmul_kernel.bin not found next to it",
         {RAWJ: json.dumps(RAW_META)}),
    Case("raw gzip truncated", REPORT,
         f"{RAWF}: damaged gzip file (the stream ends early); copy it again from the run's raw/ "
         "directory", raw(binary=RAW_BIN[: len(RAW_BIN) // 2])),
    Case("raw gzip corrupted", REPORT,
         f"{RAWF}: damaged gzip file (Error -3 while decompressing data: invalid literal/lengths set); "
         "copy it again from the run's raw/ directory",
         raw(binary=RAW_BIN[:20] + b"\xff" * 64 + RAW_BIN[84:])),
    Case("raw gzip not gzip", REPORT,
         f"{RAWF}: damaged gzip file (Error -3 while decompressing data: incorrect header "
         "check); copy it again from the run's raw/ directory", raw(binary=b"plain bytes")),
    Case("raw buffer all zero", REPORT,
         "launch 00000-matmul_kernel: the profile buffer is all zeros: the instrumented binary "
         "was not used. Check that the override directory holds only .ttgir files and that the "
         "run used a private TRITON_CACHE_DIR", raw(binary=gzip.compress(bytes(96 * 8320)))),
    # --- traces --------------------------------------------------------------------------------
    Case("trace missing launches", ["report", "t.json"],
         f"t.json: otherData.launches is missing or empty; {TFIX}",
         trace(lambda d: d["otherData"].pop("launches"))),
    Case("trace event missing pid", ["report", "t.json"],
         "t.json: traceEvents[2] lacks 'pid'; write the trace again with `proton-inject report "
         "RAW --trace DIR`", trace(lambda d: [e.pop("pid") for e in d["traceEvents"][2:3]])),
    Case("trace event args lack scope", ["report", "t.json"],
         "t.json: traceEvents[2] lacks 'scope'; write the trace again with `proton-inject report "
         "RAW --trace DIR`", trace(lambda d: d["traceEvents"][2]["args"].pop("scope"))),
    Case("trace event ts string", ["report", "t.json"],
         "t.json: trace events hold a non-numeric 'ts'; write the trace again with "
         "`proton-inject report RAW --trace DIR`",
         trace(lambda d: d["traceEvents"][2].update(ts="soon"))),
    # Numbers that are not finite or not in range: one line, whichever command reads them.
    Case("trace event dur 1e308", ["report", "t.json"],
         f"t.json: trace events hold 'dur' = 1e+308, not a finite number within 1e+15; {NFIX}",
         trace(lambda d: d["traceEvents"][2].update(dur=1e308))),
    Case("trace event dur 1e400", ["report", "t.json"],
         f"t.json: trace events hold 'dur' = inf, not a finite number within 1e+15; {NFIX}",
         {"t.json": TRACE.replace(b'"dur":1.100', b'"dur":1e400', 1)}),
    Case("trace event dur NaN", ["report", "t.json"],
         f"t.json: holds NaN, which is not a number; {TFIX}",
         {"t.json": TRACE.replace(b'"dur":1.100', b'"dur":NaN', 1)}),
    Case("trace event cycles -Infinity", ["report", "t.json"],
         f"t.json: holds -Infinity, which is not a number; {TFIX}",
         {"t.json": TRACE.replace(b'"cycles":1375', b'"cycles":-Infinity', 1)}),
    Case("diff trace event dur 1e308", ["diff", "t.json", "t.json"],
         f"t.json: trace events hold 'dur' = 1e+308, not a finite number within 1e+15; {NFIX}",
         trace(lambda d: d["traceEvents"][2].update(dur=1e308))),
    Case("diff report JSON median 1e400", ["diff", "b.json", "b.json"],
         "b.json: kernel matmul_kernel, region kernel: cycles median = inf must be a finite "
         "number; write it again with `proton-inject report RUN --json > FILE`",
         {"b.json": REPORT_JSON.replace(b'"median": ', b'"median": 1e400, "x": ', 1)}),
    Case("diff report JSON median NaN", ["diff", "b.json", "b.json"],
         "b.json: holds NaN, which is not a number; write it again with `proton-inject report "
         "RUN --json > FILE`",
         {"b.json": REPORT_JSON.replace(b'"median": ', b'"median": NaN, "x": ', 1)}),
    Case("trace launch pid_base string", ["report", "t.json"],
         f"t.json: otherData.launches[0].pid_base is missing or of the wrong type; {TFIX}",
         trace(lambda d: d["otherData"]["launches"][0].update(pid_base="x"))),
    Case("trace otherData a list", ["report", "t.json"],
         "t.json: not a proton-inject trace (write it with `report --trace` or `run`)",
         trace(lambda d: d.update(otherData=[]))),
    Case("trace damaged gzip", ["report", "t.json.gz"],
         f"t.json.gz: damaged gzip file (the stream ends early); {TFIX}",
         {"t.json.gz": gzip.compress(TRACE)[:200]}),
    Case("trace not JSON", ["report", "t.json"],
         f"t.json: not valid JSON (Expecting value: line 1 column 1 (char 0)); {TFIX}",
         {"t.json": "]"}),
    # --- dump, check, run, inspect -------------------------------------------------------------
    Case("dump AOT with --kernel", ["dump", "k.py:k", "--target", "cuda:90", "--kernel", "x"],
         "--kernel x: only applies to a program's dump; k.py:k already names the one kernel to "
         "dump", {"k.py": "x = 1\n"}),
    Case("dump AOT without target", ["dump", "k.py:k"],
         "k.py:k: an ahead-of-time dump needs --target (e.g. cuda:90)", {"k.py": "x = 1\n"}),
    Case("dump AOT onto its source", ["dump", "k.py:k", "--target", "cuda:90", "-o", "k.py"],
         "dump: Invalid value for '-o' / '--out': Directory 'k.py' is a file. (`dump -h` lists "
         "the options)",
         {"k.py": "x = 1\n"}),
    Case("dump AOT into the source dir", ["dump", "k.py:k", "--target", "cuda:90", "-o", "."],
         "-o .: holds the kernel source k.py, which files written there could overwrite; "
         "choose another directory", {"k.py": "x = 1\n"}),
    Case("dump program with --target", ["dump", "--target", "cuda:90", "--", "python", "x.py"],
         "dump: --target only apply to an ahead-of-time dump of one FILE.py:KERNEL, not to "
         "'python x.py'"),
    Case("check missing", ["check", "nope.ttgir"], "nope.ttgir: no such file or directory"),
    Case("check bad target", ["check", "a.ttgir", "--target", "cuda"],
         "--target: unknown target 'cuda': expected cuda:<sm> (e.g. cuda:80, cuda:90, cuda:100) or "
         "hip:<gfx arch> (e.g. hip:gfx942)",
         {"a.ttgir": TT}),
    Case("run output onto the tree", ["run", "inst", "-o", "inst", "--", "python", "x.py"],
         "-o inst: is the instrumented tree inst; writing there would destroy it; choose another "
         "output path", {"inst/manifest.json": "{}"}),
    Case("run output inside the tree", ["run", "inst", "-o", "inst/t", "--", "python", "x.py"],
         "-o inst/t: is inside the instrumented tree inst; choose an output path outside it",
         {"inst/manifest.json": "{}"}),
    Case("run max pending zero", ["run", "inst", "--max-pending-mb", "0", "-o", "t", "--",
                                  "python", "x.py"],
         "--max-pending-mb must be > 0, got 0.0", {"inst/manifest.json": "{}", "x.py": ""}),
    Case("profile bad rules file", ["profile", "--rules", "r.toml", "--", "python", "x.py"],
         "r.toml: marks = 'no' must be true or false (without quotes)",
         {"r.toml": 'marks = "no"\n', "x.py": ""}),
    Case("profile output over the rules file", ["profile", "--rules", "r.toml", "-o", "r.toml",
                                                "--", "python", "x.py"],
         "-o r.toml: is the --rules file r.toml; writing there would destroy it; choose another "
         "output path", {"r.toml": "marks = true\n", "x.py": ""}),
    Case("profile plot not png", ["profile", "--plot", "p.json", "--", "python", "x.py"],
         "--plot p.json: must name a .png file, e.g. --plot timeline.png", {"x.py": ""}),
    Case("profile plot under a file", ["profile", "--plot", "f/p.png", "--", "python", "x.py"],
         "--plot f/p.png: f is a file, not a directory; choose another output path",
         {"x.py": "", "f": "x"}),
    Case("profile bad --loops in pyproject", ["profile", "--", "python", "x.py"],
         "pyproject.toml [tool.proton-inject]: loops = 'all' must be one of 'outer', "
         "'iteration', 'both'",
         {"x.py": "", "pyproject.toml": '[tool.proton-inject]\nloops = "all"\n'}),
    Case("inspect empty dir", ["inspect", "e"], "e: no .ttgir files in this directory",
         {"e/x.txt": "1"}),
    # --- issue 31: stray tokens around ops ---------------------------------------------------
    Case("IR stray word before the return", [*INS, "--kernel-scope"],
         "a.ttgir:35:5: 'J' is not an op name: an op name has a dialect, like 'tt.load' (is it "
         "stray text before an op?)\n      J tt.return loc(#loc17)\n      ^",
         {"a.ttgir": TT.replace(b"    tt.return loc", b"    J tt.return loc")}),
    Case("IR stray word glued to a brace", [*INS, "--kernel-scope"],
         "a.ttgir:34:6: 'J' is not an op name: an op name has a dialect, like 'tt.load' (is it "
         "stray text before an op?)\n      }J tt.return loc(#loc17)\n       ^",
         {"a.ttgir": TT.replace(b"    } loc(#loc9)\n    tt.return", b"    }J tt.return")}),
    Case("IR second return in the body", [*INS, "--kernel-scope"],
         "a.ttgir:35: kernel add_kernel: kernel-scope region 'kernel': its end record would go "
         "after tt.return, which must end its block, but more ops follow it there; MLIR refuses "
         "such IR (is the file damaged? dump the kernel again)",
         {"a.ttgir": TT.replace(b"    tt.return loc(#loc17)\n",
                                b"    tt.return loc(#loc17)\n" * 2)}),
    # --- issue 31: arguments checked before any output ------------------------------------------
    Case("inspect negative --max-ops", ["inspect", "a.ttgir", "--max-ops", "-5"],
         "inspect: Invalid value for '--max-ops': -5 is not in the range x>=0. (`inspect -h` "
         "lists the options)", {"a.ttgir": TT}),
    Case("check huge --buffer-size", ["check", "a.ttgir", "--buffer-size",
                                      "1180591620717411303424"],
         "--buffer-size 1180591620717411303424: too large; the record buffer is at most "
         "1073741824 bytes (1 GiB) per CTA, e.g. 65536", {"a.ttgir": TT}),
    Case("check 5000-digit --buffer-size", ["check", "a.ttgir", "--buffer-size", "9" * 5000],
         f"--buffer-size {'9' * 20}...(5000 digits): too large; the record buffer is at most "
         "1073741824 bytes (1 GiB) per CTA, e.g. 65536", {"a.ttgir": TT}),
    Case("check truncated file", ["check", "a.ttgir"],
         "a.ttgir:27:14: unexpected end of line; expected an op name after the results, like "
         "'tt.load'\n        %x_4 = \n               ^", {"a.ttgir": TT[:2000]}),
    Case("insert tree golden is an empty dir", ["insert", "dump", "-o", "o", "--check-against",
                                                 "g"],
         "--check-against g: holds no .ttgir file; give the golden tree that `insert -o` wrote",
         {**dump(), "g/.keep": ""}),
    Case("insert tree golden is an empty file", ["insert", "dump", "-o", "o", "--check-against",
                                                  "g.ttgir"],
         "--check-against g.ttgir: is a file, but the input is a tree; give the golden tree "
         "(a directory)", {**dump(), "g.ttgir": ""}),
    Case("insert file golden is an empty file", [*INS, "--check-against", "g.ttgir"],
         "--check-against g.ttgir: is empty; give the golden file that `insert -o` wrote",
         {"a.ttgir": TT, "g.ttgir": ""}),
    Case("insert file golden is an empty dir", [*INS, "--check-against", "g"],
         "--check-against g: holds no .ttgir file; give the golden file that `insert -o` wrote",
         {"a.ttgir": TT, "g/.keep": ""}),
    Case("insert golden missing", [*INS, "--check-against", "g.ttgir"],
         "--check-against g.ttgir: no such golden file or directory", {"a.ttgir": TT}),
    # --- inputs that are not regular files, or too big (issue 31) ------------------------------
    # Each would hang (a FIFO), eat memory (/dev/zero, a huge file) or read forever otherwise.
    Case("IR is a FIFO", INS, f"a.ttgir: is a named pipe (FIFO), not a regular file; {GIVE}",
         {"a.ttgir": Fifo()}),
    Case("IR is /dev/zero", ["insert", "/dev/zero", "-o", "o.ttgir"],
         f"/dev/zero: is a character device, not a regular file; {GIVE}"),
    Case("IR links to /dev/zero", INS,
         f"a.ttgir: is a character device, not a regular file; {GIVE}",
         {"a.ttgir": Link("/dev/zero")}),
    Case("IR symlink loop", INS, f"a.ttgir: is a symbolic link loop; {GIVE}",
         {"a.ttgir": Link("a.ttgir")}),
    Case("IR unreadable", INS,
         "a.ttgir: cannot read the TTGIR file: Input/output error",
         {"a.ttgir": Link("/proc/self/mem")}),
    Case("IR huge", INS, "a.ttgir: is larger than 64 MiB; not a TTGIR file",
         {"a.ttgir": Sparse(64 * MiB + 1, TT)}),
    Case("inspect /dev/zero", ["inspect", "/dev/zero"],
         f"/dev/zero: is a character device, not a regular file; {GIVE}"),
    Case("check a FIFO", ["check", "a.ttgir"],
         f"a.ttgir: is a named pipe (FIFO), not a regular file; {GIVE}", {"a.ttgir": Fifo()}),
    Case("strip a FIFO", ["strip", "a.ttgir", "-o", "o.ttgir"],
         f"a.ttgir: is a named pipe (FIFO), not a regular file; {GIVE}", {"a.ttgir": Fifo()}),
    Case("strip huge", ["strip", "a.ttgir", "-o", "o.ttgir"],
         "a.ttgir: is larger than 64 MiB; not a TTGIR file",
         {"a.ttgir": Sparse(64 * MiB + 1, TT)}),
    Case("tree holds a FIFO", ["insert", "dump", "-o", "o"],
         "dump: 0 of 1 kernels instrumented; left out: h1/add_kernel.ttgir: is a named pipe "
         "(FIFO), not a regular file; give a .ttgir file (e.g. from `proton-inject dump`); "
         "nothing to write", {**dump(), "dump/h1/add_kernel.ttgir": Fifo()}),
    Case("golden is a FIFO", ["insert", "a.ttgir", "--check-against", "g.ttgir"],
         "--check-against g.ttgir: is neither a file nor a directory; give the golden that "
         "`insert -o` wrote",
         {"a.ttgir": TT, "g.ttgir": Fifo()}),
    Case("golden tree manifest is /dev/zero", ["insert", "dump", "--check-against", "g"],
         "g/manifest.json: is a character device, not a regular file; give the manifest file",
         {**dump(), "g/h1/add_kernel.ttgir": TT, "g/manifest.json": Link("/dev/zero")}),
    Case("rules is a FIFO", RULES,
         "r.toml: is a named pipe (FIFO), not a regular file; give the rules file",
         rules(Fifo())),
    Case("rules is /dev/zero", [*INS, "--rules", "/dev/zero"],
         "/dev/zero: is a character device, not a regular file; give the rules file",
         {"a.ttgir": TT}),
    Case("rules symlink loop", RULES, "r.toml: is a symbolic link loop; give the rules file",
         rules(Link("r.toml"))),
    Case("rules unreadable", RULES, "r.toml: cannot read the rules file: Input/output error",
         rules(Link("/proc/self/mem"))),
    Case("rules huge", RULES, "r.toml: is larger than 1 MiB; not a rules file",
         rules(Sparse(MiB + 1, b"# "))),
    Case("rules nested 100,000 arrays deep", RULES, DEEP_TOML,
         rules("x = " + "[" * 100_000 + "]" * 100_000 + "\n")),
    Case("rules nested 100,000 tables deep", RULES, DEEP_TOML,
         rules("x = " + "{a=" * 100_000 + "1" + "}" * 100_000 + "\n")),
    Case("rules nested 100 dotted keys deep", RULES, DEEP_TOML,
         rules(".".join(["a"] * 100) + " = 1\n")),
    Case("profile rules is a FIFO", ["profile", "--rules", "r.toml", "--", "python", "x.py"],
         "r.toml: is a named pipe (FIFO), not a regular file; give the rules file",
         {"r.toml": Fifo(), "x.py": ""}),
    Case("manifest is a FIFO", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: is a named pipe (FIFO), not a regular file; give the manifest file",
         dump(Fifo())),
    Case("manifest is /dev/zero", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: is a character device, not a regular file; give the manifest file",
         dump(Link("/dev/zero"))),
    Case("manifest huge", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: is larger than 64 MiB; not a manifest file",
         dump(Sparse(64 * MiB + 1, b"{}"))),
    Case("manifest nested 100,000 deep", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: JSON nested more than 64 levels deep; {MFIX}",
         dump("[" * 100_000 + "]" * 100_000)),
    Case("manifest nested 70 deep in a field", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: JSON nested more than 64 levels deep; {MFIX}",
         dump({"kernels": [{"ttgir": "h1/add_kernel.ttgir",
                            "signature": json.loads("[" * 70 + "]" * 70)}]})),
    Case("manifest source_file int", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].source_file must be a string, not 5; {MFIX}",
         dump({"kernels": [{"ttgir": "h1/add_kernel.ttgir", "source_file": 5}]})),
    Case("manifest source_sha256 list", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].source_sha256 must be a string, not [1]; {MFIX}",
         dump({"kernels": [{"ttgir": "h1/add_kernel.ttgir", "source_sha256": [1]}]})),
    Case("manifest num_warps string", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].num_warps must be an integer from 0, not '8'; {MFIX}",
         dump({"kernels": [{"ttgir": "h1/add_kernel.ttgir", "num_warps": "8"}]})),
    Case("manifest dump not an object", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].dump must be an object, not an integer; {MFIX}",
         dump({"kernels": [{"file": "h1/add_kernel.ttgir", "dump": 5}]})),
    Case("manifest dump source_file int", ["insert", "dump", "-o", "o"],
         f"dump/manifest.json: kernels[0].dump.source_file must be a string, not 5; {MFIX}",
         dump({"kernels": [{"file": "h1/add_kernel.ttgir", "dump": {"source_file": 5}}]})),
    Case("manifest region parent_id string", ["insert", "dump", "-o", "o"],
         "dump/manifest.json: kernels[0].regions[0].parent_id must be a scope id (an integer "
         f"from 0), not 'x'; {MFIX}",
         dump({"kernels": [{"file": "h1/add_kernel.ttgir",
                            "regions": [{"scope_id": 1, "parent_id": "x"}]}]})),
    Case("manifest source_file is /dev/zero", SRC_INSERT,
         "/dev/zero: is a character device, not a regular file; dump/manifest.json names it as "
         "the source_file of kernel add_kernel; re-run `proton-inject dump` or correct that "
         "field", {**dump(source_dump("/dev/zero")), "examples/vector_add.py": VECTOR_ADD}),
    Case("manifest source_file is a FIFO", SRC_INSERT,
         "src.py: is a named pipe (FIFO), not a regular file; dump/manifest.json names it as "
         "the source_file of kernel add_kernel; re-run `proton-inject dump` or correct that "
         "field", {**dump(source_dump("src.py")), "examples/vector_add.py": VECTOR_ADD,
                   "src.py": Fifo()}),
    Case("IR names a huge source", INS,
         "big.py: is larger than 64 MiB; a.ttgir names it as its kernel's source: pass "
         "--no-marks or --source-root DIR",
         {"a.ttgir": TT.replace(b'loc("examples/vector_add.py"', b'loc("big.py"'),
          "big.py": Sparse(64 * MiB + 1, b"# proton: x\n")}),
    Case("meta is a FIFO", REPORT,
         f"{RAWJ}: is a named pipe (FIFO), not a regular file; give the launch metadata file",
         raw(text=Fifo())),
    Case("meta is a FIFO, named", ["report", RAWJ],
         f"{RAWJ}: is a named pipe (FIFO), not a regular file; {GIVE}", raw(text=Fifo())),
    Case("meta is /dev/zero", ["report", RAWF],
         f"{RAWJ}: is a character device, not a regular file; give the launch metadata file",
         raw(text=Link("/dev/zero"))),
    Case("meta symlink loop", REPORT, f"{RAWJ}: is a symbolic link loop; give the launch metadata file",
         raw(text=Link("00000-matmul_kernel.json"))),
    Case("meta huge", ["report", RAWF],
         f"{RAWJ}: is larger than 16 MiB; not a launch metadata file",
         raw(text=Sparse(16 * MiB + 1, b'{"format": "proton-inject-raw"}'))),
    Case("meta nested 100,000 deep", REPORT,
         f"{RAWJ}: JSON nested more than 64 levels deep; rewrite it with `proton-inject run`",
         raw(text='{"format": "proton-inject-raw", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")),
    Case("meta direct_loops on a shared launch", REPORT,
         f"{RAWJ}: direct_loops = 5 must be absent: it belongs to a launch with buffer_type "
         f"'direct', not 'shared'; {FIX}", raw(direct_loops=5)),
    Case("meta direct_loops table on a shared launch", REPORT,
         f"{RAWJ}: direct_loops = [[1, 2]] must be absent: it belongs to a launch with "
         f"buffer_type 'direct', not 'shared'; {FIX}", raw(direct_loops=[[1, 2]])),
    Case("meta direct_records on a global launch", REPORT,
         f"{RAWJ}: direct_records = [[0, 0], [0, 1]] must be absent: it belongs to a launch with "
         f"buffer_type 'direct', not 'global'; {FIX}",
         raw(buffer_type="global", direct_records=[[0, 0], [0, 1]])),
    Case("meta scope id 999,999,999", [*REPORT, "--trace", "t"],
         f"{RAWJ}: scopes has scope id 999999999; scope ids are 0 to 255 (a record keeps 8 bits "
         "of it)", raw(scopes={"0": "kernel", "999999999": "x"})),
    Case("meta scope parent 999,999,999", REPORT,
         f"{RAWJ}: scope_parents[1] = 999999999 is not a scope id (0 to 255)",
         raw(scope_parents={"1": 999_999_999})),
    Case("meta sm clock 1e308", [*REPORT, "--trace", "t"],
         f"{RAWJ}: sm_clock_mhz = 1e+308 must be null or a positive number of MHz up to 10000; "
         f"{FIX}", raw(sm_clock_mhz=1e308)),
    Case("meta bracket clock 1e308", [*REPORT, "--trace", "t"],
         f"{RAWJ}: clock_bracket = {{'before': {{'mhz': 1e+308, 'sem_mhz': 0, 'ctas': 1, 'sms'... "
         'must be null, {"missing": "why"} or {"before": side, "after": side} as proton-inject '
         f"run writes it; {FIX}",
         raw(clock_bracket={"before": {"mhz": 1e308, "sem_mhz": 0, "ctas": 1, "sms": 1,
                                       "spin_ns": 1, "t0": 1, "t1": 2}})),
    Case("raw buffer is a FIFO", REPORT,
         f"{RAWF}: is a named pipe (FIFO), not a regular file; give the raw buffer file",
         raw(binary=Fifo())),
    Case("raw buffer is /dev/zero", REPORT,
         "raw/00000-matmul_kernel.bin: is a character device, not a regular file; give the raw "
         "buffer file", {**raw(bin="00000-matmul_kernel.bin"),
                         "raw/00000-matmul_kernel.bin": Link("/dev/zero")}),
    Case("raw buffer huge for a huge grid", REPORT,
         "raw/00000-matmul_kernel.bin: is larger than 4 GiB; more than proton-inject decodes of "
         "one launch: profile fewer warps or CTAs (--warps, --sample-ctas)",
         {**raw(bin="00000-matmul_kernel.bin", grid=[2**31 - 1, 65535, 65535]),
          "raw/00000-matmul_kernel.bin": Sparse(4 * 2**30 + 1)}),
    Case("trace is a FIFO", ["report", "t.json"],
         f"t.json: is a named pipe (FIFO), not a regular file; {GIVE}", {"t.json": Fifo()}),
    Case("trace is /dev/zero", ["report", "t.json"],
         f"t.json: is a character device, not a regular file; {GIVE}",
         {"t.json": Link("/dev/zero")}),
    Case("trace in a directory is a FIFO", ["report", "d"],
         "d/t.json: is a named pipe (FIFO), not a regular file; move it out of d",
         {"d/t.json": Fifo()}),
    Case("trace nested 100,000 deep", ["report", "t.json"],
         f"t.json: JSON nested more than 64 levels deep; {TFIX}",
         {"t.json": "[" * 100_000 + "]" * 100_000}),
    Case("diff input is a FIFO", ["diff", "b.json", "raw"],
         f"b.json: is a named pipe (FIFO), not a regular file; {GIVE}",
         {**raw(), "b.json": Fifo()}),
    Case("diff report JSON nested 100,000 deep", ["diff", "b.json", "raw"],
         "b.json: JSON nested more than 64 levels deep; write it again with `proton-inject "
         "report RUN --json > FILE`",
         {**raw(), "b.json": '{"format": "proton-inject-report", "x": ' + "[" * 100_000
          + "]" * 100_000 + "}"}),
    Case("run index is a FIFO", ["report", "d"],
         "d/run.json: is a named pipe (FIFO), not a regular file; move it out of d",
         {"d/run.json": Fifo()}),
]
