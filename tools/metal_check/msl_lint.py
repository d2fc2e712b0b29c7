"""Rules of the Metal Shading Language that a C++ compiler does not enforce, checked on .metal files
through libclang's AST (over the strict <metal_stdlib> of strict/), and on their kernel
signatures (build_tools/metal_kernels.py, the parser the generators use):

  no recursion (a cycle in the call graph), virtual functions, exceptions (throw / try),
  new / delete, goto, lambdas, function pointers (variables, parameters, fields: a template
  parameter is fine, it is resolved at compile time), static locals other than threadgroup or
  constant; every kernel parameter has exactly one [[...]] attribute; [[buffer(n)]] unique with
  n <= 30; buffers carry device or constant; built-in inputs have allowed types, and the position
  inputs of one kernel have one width (no uint2 threadgroup position with a scalar thread
  position: use [[thread_index_in_threadgroup]]); kernel-scope threadgroup memory <= 32 KiB.

It prints each kernel's kernel-scope threadgroup bytes. Exit status 1 on any problem.
Usage: python tools/metal_check/msl_lint.py [FILE.metal ...]   (no files: the library)
Needs the clang Python bindings with a libclang: the PyPI `libclang` wheel (bundles one).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the checkout: build_tools
sys.path.insert(0, HERE)
from build_tools import metal_codegen  # noqa: E402
from build_tools import metal_kernels as mk  # noqa: E402
from strict_compile import STRICT_DIR, without_host_names  # noqa: E402

THREADGROUP_LIMIT = 32768


def load_cindex():
    import clang.cindex as ci  # the PyPI `libclang` wheel finds its bundled library
    lib = os.environ.get("ARGON_LIBCLANG")
    if lib and not ci.Config.loaded:
        ci.Config.set_library_file(lib)
    return ci


def lint_ast(path, include_dirs, kernel_functions, report, info):
    ci = load_cindex()
    K = ci.CursorKind
    text = without_host_names(open(path).read())
    args = ["-x", "c++", "-std=c++17", "-Wno-unknown-attributes", "-I", STRICT_DIR]
    for d in include_dirs:
        args += ["-I", d]
    tu = ci.Index.create().parse(path, args=args, unsaved_files=[(path, text)])
    for d in tu.diagnostics:
        if d.severity >= ci.Diagnostic.Error:
            report(f"{d.location.file}:{d.location.line}: clang: {d.spelling}")

    def ours(c):
        return c.location.file is not None and not c.location.file.name.endswith("metal_stdlib")

    functions = {}  # usr -> (name, where, callees, is_kernel)
    tg_bytes = {}   # kernel usr -> bytes (None when a size depends on a template parameter)

    def kind(t):  # the bindings lack some kinds (_Float16): those are no pointer or function
        try:
            return t.kind
        except ValueError:
            return None

    def is_function_pointer(t):
        try:
            t = t.get_canonical()
            while kind(t) in (ci.TypeKind.POINTER, ci.TypeKind.LVALUEREFERENCE,
                              ci.TypeKind.RVALUEREFERENCE, ci.TypeKind.CONSTANTARRAY):
                t = t.element_type if kind(t) == ci.TypeKind.CONSTANTARRAY else t.get_pointee()
                if kind(t) in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
                    return True
        except ValueError:  # an element type of a kind the bindings lack
            pass
        return False

    def where(c):
        return f"{os.path.relpath(c.location.file.name)}:{c.location.line}"

    def visit(c, fn):
        if not ours(c):
            return
        k = c.kind
        if k in (K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE) and c.is_definition():
            usr = c.get_usr()
            is_kernel = c.spelling in kernel_functions
            functions.setdefault(usr, (c.spelling, where(c), set(), is_kernel))
            if k == K.CXX_METHOD and c.is_virtual_method():
                report(f"{where(c)}: virtual function {c.spelling}")
            for ch in c.get_children():
                visit(ch, usr)
            return
        if k == K.CXX_BASE_SPECIFIER:
            report(f"{where(c)}: derived class (not in MSL before 3.x; keep structs plain)")
        elif k == K.CALL_EXPR and c.referenced is not None and fn is not None:
            functions[fn][2].add(c.referenced.get_usr())
        elif k in (K.CXX_THROW_EXPR, K.CXX_TRY_STMT, K.CXX_CATCH_STMT):
            report(f"{where(c)}: exception handling")
        elif k in (K.CXX_NEW_EXPR, K.CXX_DELETE_EXPR):
            report(f"{where(c)}: new / delete")
        elif k in (K.GOTO_STMT, K.INDIRECT_GOTO_STMT):
            report(f"{where(c)}: goto")
        elif k == K.LAMBDA_EXPR:
            report(f"{where(c)}: lambda")
        elif k in (K.CXX_DYNAMIC_CAST_EXPR, K.CXX_TYPEID_EXPR):
            report(f"{where(c)}: RTTI (dynamic_cast / typeid)")
        if k in (K.VAR_DECL, K.PARM_DECL, K.FIELD_DECL):
            if is_function_pointer(c.type):
                report(f"{where(c)}: function pointer {c.spelling}")
            parent = c.semantic_parent
            if k == K.VAR_DECL and parent is not None and parent.kind in (
                    K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE):
                spelling = c.type.spelling
                if c.storage_class == ci.StorageClass.STATIC:
                    if "address_space(3)" in spelling:
                        size = c.type.get_canonical().get_size()
                        prev = tg_bytes.get(fn, 0)
                        tg_bytes[fn] = None if prev is None or size < 0 else prev + size
                    elif "address_space(2)" not in spelling:
                        report(f"{where(c)}: static local {c.spelling} (MSL allows only "
                               f"threadgroup or constant ones)")
                if any(t.spelling in ("thread_local", "register") for t in c.get_tokens()):
                    report(f"{where(c)}: thread_local / register storage")
        for ch in c.get_children():
            visit(ch, fn)

    for ch in tu.cursor.get_children():
        visit(ch, None)

    # recursion: a cycle among the file's own functions
    graph = {u: {v for v in cs if v in functions} for u, (_, _, cs, _) in functions.items()}
    state = {}

    def dfs(u, stack):
        state[u] = 1
        for v in graph[u]:
            if state.get(v) == 1:
                cycle = stack[stack.index(v):] + [v]
                report(f"{functions[v][1]}: recursion: " + " -> ".join(functions[x][0] for x in cycle))
            elif v not in state:
                dfs(v, stack + [v])
        state[u] = 2

    for u in graph:
        if u not in state:
            dfs(u, [u])

    for usr, (name, loc, _, is_kernel) in functions.items():
        if not is_kernel:
            continue
        b = tg_bytes.get(usr, 0)
        if b is None:
            info(f"{loc}: kernel {name}: threadgroup memory depends on template parameters")
        elif b > THREADGROUP_LIMIT:
            report(f"{loc}: kernel {name}: {b} bytes of threadgroup memory, over 32 KiB")
        else:
            info(f"{loc}: kernel {name}: {b} bytes of threadgroup memory")


def lint_file(path, include_dirs=()):
    """(problems, notes) of one .metal file."""
    problems, notes = [], []
    dirs = [os.path.dirname(os.path.abspath(path)), *metal_codegen.INCLUDE_DIRS, *include_dirs]
    kernel_functions = set()  # C++ names: a template's, for its instantiations
    try:
        for k in mk.parse_file(path, dirs):
            problems += mk.check_kernel(k)
            kernel_functions.add(k.call.split("<")[0])
    except mk.MetalParseError as e:
        problems.append(str(e))
    lint_ast(path, dirs, kernel_functions, problems.append, notes.append)
    return problems, notes


def main(argv):
    try:
        load_cindex().Index.create()
    except Exception as e:  # noqa: BLE001: any way the bindings fail to load
        print(f"msl_lint: SKIP: no usable libclang ({e}); pip install libclang")
        return 0
    files = argv or (metal_codegen.library_files() + list(metal_codegen.HOST_ONLY)
                     + list(metal_codegen.CUDA_ONLY))
    n = 0
    for path in files:
        problems, notes = lint_file(path)
        for m in notes:
            print(f"info: {m}")
        for m in problems:
            print(f"error: {m}")
        n += len(problems)
    print(f"msl_lint: {n} problem(s) in {len(files)} file(s)")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
