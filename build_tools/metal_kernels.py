"""The kernels of a .metal file, read from their signatures: the one parser behind everything that
must agree with a kernel's parameter list (the host adapters and the recipe's binding table that
setup.py generates, the CUDA wrappers of the metal_cuda backend, the MSL lint).

A file is run through the C++ preprocessor first (with an empty <metal_stdlib>), so kernels that
macros instantiate are seen as the compiler sees them. Kernels come in two forms:

    kernel void name(params) { ... }                            a kernel named `name`
    template <...> kernel void fn(params) { ... }               a kernel template, and one kernel per
    template [[host_name("x")]] kernel T fn<args>;              explicit instantiation, named "x"

(`[[kernel]]` may stand for `kernel`). Every parameter carries one attribute: `[[buffer(i)]]` for
a buffer (`device T*`, `constant T*`) or a params struct set as bytes (`constant T&`), or a
built-in input such as `[[threadgroup_position_in_grid]]`.

A kernel "synchronises" when its body, or a function it calls (transitively, within the file and
its headers, template arguments included), uses threadgroup memory, a barrier or a simdgroup
collective: the host runner then runs its lanes as threads or fibers rather than a plain loop.

Usage: python -m build_tools.metal_kernels FILE.metal ...   (prints each kernel's signature)
"""
import bisect
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METAL_DIR = os.path.join(ROOT, "torch_argon", "metal")
CSRC = os.path.join(ROOT, "torch_argon", "csrc")
# The definitions every backend shares (params structs, block layouts), included by the kernels
# as "shared/<name>.h" from CSRC.
SHARED_DIR = os.path.join(CSRC, "shared")
# Where a shader's includes are found: its own folder's headers, then "shared/..." from csrc.
INCLUDE_DIRS = (METAL_DIR, CSRC)

# Built-in kernel inputs: attribute -> (allowed base types, vector allowed). The position and size
# inputs may be scalars or 2/3-vectors (Metal asks their vector widths to agree within a kernel);
# the index inputs are scalars.
POSITION_BUILTINS = ("threadgroup_position_in_grid", "thread_position_in_threadgroup",
                     "thread_position_in_grid", "threads_per_threadgroup",
                     "threadgroups_per_grid", "threads_per_grid")
INDEX_BUILTINS = ("thread_index_in_threadgroup", "simdgroup_index_in_threadgroup",
                  "thread_index_in_simdgroup", "threads_per_simdgroup",
                  "simdgroups_per_threadgroup", "thread_execution_width")
BUILTIN_TYPES = {"uint": 1, "ushort": 1, "uint2": 2, "ushort2": 2, "uint3": 3, "ushort3": 3}
MAX_BUFFER_INDEX = 30

# What makes a body synchronise: threadgroup memory, barriers, simdgroup and quad functions.
SYNC_RE = re.compile(r"(?<![\w.])threadgroup\s+(?!_)|\b(?:threadgroup_barrier|simdgroup_barrier)\b"
                     r"|\b(?:simd|simdgroup|quad)_\w+\s*[<(]")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype",
                 "static_assert", "catch", "defined", "__attribute__", "alignas"}


class MetalParseError(Exception):
    pass


@dataclass
class Param:
    position: int         # 0-based place in the parameter list
    name: str
    type: str             # the declaration without the name and attribute, e.g. "device const int*"
    attr: str             # "buffer", a built-in's name, or whatever else was written
    index: Optional[int]  # i of [[buffer(i)]]
    n_attrs: int          # attributes written on the parameter (Metal wants exactly one)

    @property
    def words(self):
        return self.type.replace("*", " * ").replace("&", " & ").split()

    @property
    def is_buffer(self):
        return self.attr == "buffer"

    @property
    def is_bytes(self):
        """A `constant T&`: the recipe passes a params struct by value (set_bytes)."""
        return self.is_buffer and "constant" in self.words and self.type.rstrip().endswith("&")

    @property
    def value_type(self):
        """T of `constant T&` / `device T*`, without address space and cv."""
        skip = {"device", "constant", "const", "volatile", "thread", "threadgroup", "*", "&"}
        return " ".join(w for w in self.words if w not in skip)

    @property
    def width(self):
        """Components of a built-in input's type (1 for a scalar), None if not a built-in type."""
        return BUILTIN_TYPES.get(self.type.strip())


@dataclass
class Kernel:
    name: str                # the Metal function name (host_name for an instantiation)
    call: str                # the C++ expression that names it: "plan_hist", "fn<a, b>"
    params: List[Param]
    synchronising: bool
    file: str
    line: int
    template_params: List[str] = field(default_factory=list)  # names, for an instantiation

    def buffers(self):
        return [p for p in self.params if p.is_buffer]

    def where(self):
        return f"{os.path.relpath(self.file, ROOT)}:{self.line}"


# ---- preprocessing ---------------------------------------------------------------------------

def default_include_dirs():
    return list(INCLUDE_DIRS)


def preprocess(path, include_dirs=None, cxx=None):
    """The file after the C++ preprocessor (line markers kept), with an empty <metal_stdlib>."""
    cxx = shlex.split(cxx or os.environ.get("ARGON_CPP") or os.environ.get("CXX") or "c++")
    dirs = include_dirs if include_dirs is not None else default_include_dirs()
    with tempfile.TemporaryDirectory() as stub:
        open(os.path.join(stub, "metal_stdlib"), "w").close()
        cmd = cxx + ["-E", "-x", "c++", "-std=c++17", "-D__METAL_VERSION__=310", "-I", stub]
        for d in dirs:
            cmd += ["-I", d]
        proc = subprocess.run(cmd + [path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise MetalParseError(f"preprocessing {path} failed ({' '.join(cmd)}):\n{proc.stderr}")
    return proc.stdout


class Source:
    """Preprocessed text with line markers and pragmas blanked, mapped back to file:line."""

    MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')

    def __init__(self, text, path):
        out, origin = [], []
        cur_file, cur_line = path, 1
        for raw in text.split("\n"):
            m = self.MARKER.match(raw.strip())
            if m:
                cur_line, cur_file = int(m.group(1)), m.group(2)
                out.append("")
                origin.append((cur_file, 0))
                continue
            out.append("" if raw.lstrip().startswith("#") else raw)
            origin.append((cur_file, cur_line))
            cur_line += 1
        self.text = "\n".join(out)
        self.origin = origin
        self.starts = [0]
        for line in out[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def where(self, pos):
        i = bisect.bisect_right(self.starts, pos) - 1
        f, line = self.origin[i]
        return os.path.normpath(f), line


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise MetalParseError(f"unbalanced {open_ch}{close_ch}")


def split_top(s, sep=","):
    out, depth, cur = [], 0, []
    for c in s:
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth -= 1
        if c == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


ATTR_RE = re.compile(r"\[\[\s*(\w+)\s*(?:\(\s*([^)]*?)\s*\))?\s*\]\]")


def parse_params(plist):
    params = []
    for k, prm in enumerate(split_top(plist)):
        prm = " ".join(prm.split())
        attrs = ATTR_RE.findall(prm)
        decl = ATTR_RE.sub(" ", prm).strip()
        decl = " ".join(decl.split())
        m = re.match(r"(.*?)(\w+)$", decl)
        if not m:
            raise MetalParseError(f"cannot read parameter {prm!r}")
        ty, name = m.group(1).strip(), m.group(2)
        attr, arg = (attrs[0] if attrs else ("", ""))
        index = int(arg) if attr == "buffer" and arg.isdigit() else None
        params.append(Param(k, name, ty, attr, index, len(attrs)))
    return params


# ---- functions and what synchronises -----------------------------------------------------------

def function_bodies(text):
    """name -> list of (start, end) of the bodies of functions defined in text (all overloads)."""
    out = {}
    for m in re.finditer(r"\b(\w+)\s*\(", text):
        name = m.group(1)
        if name in NOT_FUNCTIONS:
            continue
        try:
            close = matching(text, m.end() - 1, "(", ")")
        except MetalParseError:
            continue
        tail = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:\[\[[^\]]*\]\]\s*)*\{",
                        text[close:close + 200])
        if not tail:
            continue
        lbrace = close + tail.end() - 1
        out.setdefault(name, []).append((lbrace, matching(text, lbrace, "{", "}")))
    return out


def called_names(body):
    return set(re.findall(r"\b(\w+)\s*(?:<[^;{}()]*>\s*)?\(", body)) - NOT_FUNCTIONS


def sync_functions(text, bodies):
    """Names of the functions of text that synchronise, directly or through a call."""
    direct = {n for n, spans in bodies.items() if any(SYNC_RE.search(text[a:b]) for a, b in spans)}
    calls = {n: set().union(*(called_names(text[a:b]) for a, b in spans)) for n, spans in bodies.items()}
    sync = set(direct)
    changed = True
    while changed:
        changed = False
        for n, cs in calls.items():
            if n not in sync and cs & sync:
                sync.add(n)
                changed = True
    return sync


# ---- kernels ---------------------------------------------------------------------------------

KERNEL_DEF = re.compile(r"(?:\bkernel\b|\[\[\s*kernel\s*\]\])\s+void\s+(\w+)\s*\(")
INSTANTIATION = re.compile(
    r"\btemplate\s*\[\[\s*host_name\s*\(\s*((?:\"[^\"]*\"\s*)+)\)\s*\]\]\s*"
    r"(?:\bkernel\b|\[\[\s*kernel\s*\]\])\s+([^;]*?);")


def template_header(text, start):
    """The parameter names of `template <...>` right before text[start], or None."""
    before = text[:start].rstrip()
    if not before.endswith(">"):
        return None
    depth, i = 0, len(before) - 1
    while i >= 0:
        if before[i] == ">":
            depth += 1
        elif before[i] == "<":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    if not before[:i].rstrip().endswith("template"):
        return None
    names = []
    for tp in split_top(before[i + 1:-1]):
        tp = re.sub(r"=.*$", "", tp).strip()
        m = re.search(r"(\w+)\s*(?:\)\s*\([^)]*\))?$", tp)       # `T`, `uint N`, `void (*F)(...)`
        fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", tp)
        names.append(fp.group(1) if fp else m.group(1) if m else tp)
    return names


def parse_file(path, include_dirs=None, text=None):
    """The kernels of one .metal file, in source order. `text` (preprocessed) skips the compiler."""
    path = os.path.normpath(os.path.abspath(path))
    src = Source(text if text is not None else preprocess(path, include_dirs), path)
    t = src.text
    bodies = function_bodies(t)
    sync = sync_functions(t, bodies)

    def is_here(pos):
        f, _ = src.where(pos)
        return os.path.normpath(os.path.abspath(f)) == path

    kernels, templates = [], {}
    for m in KERNEL_DEF.finditer(t):
        name = m.group(1)
        close = matching(t, m.end() - 1, "(", ")")
        params = parse_params(t[m.end():close - 1])
        lbrace = t.index("{", close)
        body = t[lbrace:matching(t, lbrace, "{", "}")]
        synchronising = bool(SYNC_RE.search(body)) or bool(called_names(body) & sync)
        f, line = src.where(m.start())
        tparams = template_header(t, m.start())
        k = Kernel(name, name, params, synchronising, f, line, tparams or [])
        if tparams is not None:
            templates[name] = k
        elif is_here(m.start()):
            kernels.append(k)
    for m in INSTANTIATION.finditer(t):
        if not is_here(m.start()):
            continue
        host_name = "".join(re.findall(r'"([^"]*)"', m.group(1)))
        decl = " ".join(m.group(2).split())
        # `T fn<args>`, `void fn<args>(params)` or `decltype(fn<args>) fn<args>`: the last
        # `fn<` of a kernel template of this file
        f, line = src.where(m.start())
        uses = [u for u in re.finditer(r"(\w+)\s*<", decl) if u.group(1) in templates]
        if not uses:
            raise MetalParseError(f"{f}:{line}: explicit instantiation {host_name!r} names no "
                                  f"kernel template of this file: {decl!r}")
        fn, lt = uses[-1].group(1), uses[-1].end() - 1
        args = decl[lt:matching(decl, lt, "<", ">")]
        tk = templates[fn]
        arg_names = set(re.findall(r"\w+", args))
        synchronising = tk.synchronising or bool(arg_names & sync)
        kernels.append(Kernel(host_name, f"{fn}{args}", tk.params, synchronising, f, line,
                              tk.template_params))
    return kernels


def check_kernel(k):
    """What a kernel's signature breaks of the rules the generators rely on (Metal's too)."""
    problems, seen, widths = [], {}, {}
    for p in k.params:
        where = f"{k.where()}: kernel {k.name}: parameter {p.name}"
        if p.n_attrs != 1:
            problems.append(f"{where}: expected exactly one [[attribute]], found {p.n_attrs}")
            continue
        if p.attr == "buffer":
            if p.index is None or p.index > MAX_BUFFER_INDEX:
                problems.append(f"{where}: buffer index must be 0..{MAX_BUFFER_INDEX}")
            elif p.index in seen:
                problems.append(f"{where}: [[buffer({p.index})]] already used by {seen[p.index]}")
            else:
                seen[p.index] = p.name
            words = p.words
            if "*" not in words and "&" not in words:
                problems.append(f"{where}: [[buffer]] on a non-pointer, non-reference")
            if not {"device", "constant"} & set(words):
                problems.append(f"{where}: a buffer needs the device or constant address space")
            if "&" in words and "constant" not in words:
                problems.append(f"{where}: a reference buffer must be `constant T&` (set as bytes)")
        elif p.attr in POSITION_BUILTINS:
            if p.width is None:
                problems.append(f"{where}: [[{p.attr}]] must be uint/ushort or a 2/3-vector of them")
            else:
                widths[p.name] = (p.attr, p.width)
        elif p.attr in INDEX_BUILTINS:
            if p.width != 1:
                problems.append(f"{where}: [[{p.attr}]] must be uint or ushort")
        elif p.attr == "threadgroup":
            problems.append(f"{where}: [[threadgroup(n)]] parameters are not supported by the "
                            f"recipe's encoder (declare threadgroup arrays in the body)")
        else:
            problems.append(f"{where}: unknown kernel input attribute [[{p.attr}]]")
    ws = {w for _, w in widths.values()}
    if len(ws) > 1:
        problems.append(f"{k.where()}: kernel {k.name}: position/size inputs of different widths "
                        f"{ {n: a for n, (a, _) in widths.items()} } (Metal wants them to agree; "
                        f"use [[thread_index_in_threadgroup]] for a scalar lane index)")
    return problems


def parse_files(paths, include_dirs=None):
    """Kernels of several files (one library): raises MetalParseError on any rule broken or a
    kernel name defined twice."""
    kernels, problems, names = [], [], {}
    for path in paths:
        for k in parse_file(path, include_dirs):
            problems += check_kernel(k)
            if k.name in names:
                problems.append(f"{k.where()}: kernel {k.name} already defined at {names[k.name]}")
            names[k.name] = k.where()
            kernels.append(k)
    if problems:
        raise MetalParseError("\n".join(problems))
    return kernels


def main(argv):
    for path in argv:
        for k in parse_file(path, default_include_dirs() + [os.path.dirname(os.path.abspath(path))]):
            sig = ", ".join(f"{p.type} {p.name} [[{p.attr}{'' if p.index is None else f'({p.index})'}]]"
                            for p in k.params)
            print(f"{k.where()}: {k.name}{' (synchronising)' if k.synchronising else ''}"
                  f"\n    {k.call}({sig})")
            for msg in check_kernel(k):
                print("    !! " + msg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
