"""The kernel signatures of the .metal files are the one source of each kernel's buffer order:
setup.py generates the host adapters and the recipe's binding table from them
(build_tools/metal_codegen.py), and the recipe binds by parameter name (csrc/metal/bind.h). These tests
check the parser (plain and template kernels, what synchronises, the signature rules), that the
table built into the extension is the one the sources give today, and that a binding the
signature does not allow is an error when the recipe is recorded.
"""
import glob
import os
import re
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from build_tools import metal_codegen  # noqa: E402
from build_tools import metal_kernels as mk  # noqa: E402

from torch_argon.testing import backends  # noqa: E402

HOST = backends.get("metal_host")
needs_host = pytest.mark.skipif(not HOST.available, reason=f"metal_host: {HOST.reason}")

PARAMS_H = """
#pragma once
struct P { uint n; };
"""


def parse(tmp_path, source, name="k.metal"):
    (tmp_path / "p.h").write_text(PARAMS_H)
    path = tmp_path / name
    path.write_text(source)
    return mk.parse_file(str(path), [str(tmp_path)])


def test_plain_kernel(tmp_path):
    (k,) = parse(tmp_path, """
#include <metal_stdlib>
#include "p.h"
kernel void copy(device const float* src [[buffer(1)]], device float* dst [[buffer(0)]],
                 constant P& p [[buffer(2)]], uint2 tg [[threadgroup_position_in_grid]],
                 uint lane [[thread_index_in_threadgroup]]) {
  dst[tg.x] = src[lane];
}
""")
    assert k.name == k.call == "copy" and not k.synchronising
    assert [(p.name, p.index, p.is_bytes) for p in k.buffers()] == \
        [("src", 1, False), ("dst", 0, False), ("p", 2, True)]
    assert [p.attr for p in k.params[3:]] == ["threadgroup_position_in_grid",
                                              "thread_index_in_threadgroup"]
    assert mk.check_kernel(k) == []


def test_template_kernels_instantiated_by_a_macro(tmp_path):
    kernels = parse(tmp_path, """
#include <metal_stdlib>
#include "p.h"
inline void dq_a(device const uchar* b, thread float* v) { v[0] = b[0]; }
inline void dq_b(device const uchar* b, thread float* v) { v[0] = simd_sum(float(b[0])); }
template <typename Block, uint N, void (*DQ)(device const uchar*, thread float*)>
kernel void deq(device const uchar* w [[buffer(0)]], device float* out [[buffer(1)]],
                constant P& p [[buffer(2)]], uint tg [[threadgroup_position_in_grid]]) {
  float v[1];
  DQ(w, v);
  out[tg] = v[0];
}
typedef decltype(deq<uchar, 32, dq_a>) deq_t;
#define FORMATS(X) X(a, 32) X(b, 256)
#define INST(f, n) template [[host_name("deq_" #f)]] kernel deq_t deq<uchar, n, dq_##f>;
FORMATS(INST)
""")
    assert [(k.name, k.call) for k in kernels] == [("deq_a", "deq<uchar, 32, dq_a>"),
                                                   ("deq_b", "deq<uchar, 256, dq_b>")]
    # dq_b synchronises (a simd collective), and reaches deq_b only through a template argument
    assert [k.synchronising for k in kernels] == [False, True]
    assert kernels[0].template_params == ["Block", "N", "DQ"]
    assert [p.name for p in kernels[1].buffers()] == ["w", "out", "p"]


def test_synchronising_through_a_helper(tmp_path):
    k1, k2 = parse(tmp_path, """
#include <metal_stdlib>
inline void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }
inline int twice(int x) { return 2 * x; }
inline void outer() { sync_all(); }
kernel void a(device int* o [[buffer(0)]], uint i [[thread_position_in_threadgroup]]) {
  o[i] = twice(1);
  outer();
}
kernel void b(device int* o [[buffer(0)]], uint i [[thread_position_in_threadgroup]]) {
  threadgroup int t[32];
  t[i] = 1;
  o[i] = twice(t[0]);
}
""")
    assert k1.synchronising and k2.synchronising


@pytest.mark.parametrize("params,match", [
    ("device int* a [[buffer(0)]], device int* b [[buffer(0)]]", r"\[\[buffer\(0\)\]\] already used"),
    ("device int* a [[buffer(31)]]", r"buffer index must be 0..30"),
    ("device int* a", r"exactly one \[\[attribute\]\], found 0"),
    ("device int* a [[buffer(0)]] [[buffer(1)]]", r"exactly one \[\[attribute\]\], found 2"),
    ("int* a [[buffer(0)]]", r"device or constant address space"),
    ("device int a [[buffer(0)]]", r"non-pointer"),
    ("device int& a [[buffer(0)]]", r"must be `constant T&`"),
    ("device int* a [[buffer(0)]], uint2 g [[threadgroup_position_in_grid]], "
     "uint3 t [[thread_position_in_threadgroup]]", r"different widths"),
    ("device int* a [[buffer(0)]], float t [[thread_position_in_threadgroup]]", r"must be uint/ushort"),
    ("device int* a [[buffer(0)]], uint2 t [[thread_index_in_threadgroup]]", r"must be uint or ushort"),
    ("device int* a [[buffer(0)]], uint t [[thread_id_somewhere]]", r"unknown kernel input"),
])
def test_signature_rules(tmp_path, params, match):
    (k,) = parse(tmp_path, f"#include <metal_stdlib>\nkernel void k({params}) {{}}\n")
    problems = mk.check_kernel(k)
    assert any(re.search(match, m) for m in problems), problems


def test_host_adapter_follows_a_reordered_signature(tmp_path):
    """The adapter passes slot i to the parameter declared [[buffer(i)]], wherever it sits."""
    (k,) = parse(tmp_path, """
#include <metal_stdlib>
#include "p.h"
kernel void k(constant P& p [[buffer(2)]], device float* out [[buffer(0)]],
              device const float* x [[buffer(1)]], uint t [[thread_index_in_threadgroup]],
              ushort2 g [[threadgroup_position_in_grid]]) {}
""")
    unit = metal_codegen.host_kernels_cpp(str(tmp_path / "k.metal"), [k], "k.metal")
    assert "k(\n      b.param<P>(2), b.buf(0), b.buf(1), l.flat, ushort2(l.tgid[0], l.tgid[1]));" in unit
    table = metal_codegen.signatures_inc([k])
    assert '{{"p", 2, sizeof(P)}, {"out", 0, 0}, {"x", 1, 0}}' in table


def test_no_shader_include_leaves_the_metal_and_shared_dirs():
    """A shader includes headers of torch_argon/metal/ or "shared/..." of csrc/shared/ only
    (the library must compile on its own); the shared headers include only each other."""
    shader_files = glob.glob(os.path.join(ROOT, "torch_argon", "metal", "*"))
    shared = glob.glob(os.path.join(ROOT, "torch_argon", "csrc", "shared", "*.h"))
    for path in shader_files + shared:
        for inc in re.findall(r'#include\s+"([^"]+)"', open(path).read()):
            found = metal_codegen.shader_include(inc)
            assert found is not None, f"{path}: #include \"{inc}\""
            if path in shared:
                assert inc.startswith("shared/"), f"{path}: #include \"{inc}\""
    assert "kernel void" in metal_codegen.flattened_library()
    with pytest.raises(mk.MetalParseError, match="reach out"):
        metal_codegen.flatten_text('#include "checks.h"\n', "x.metal")


def library_kernels():
    return mk.parse_files(metal_codegen.library_files(), list(metal_codegen.INCLUDE_DIRS))


@needs_host
def test_built_table_matches_the_sources():
    """The binding table in the extension is today's signatures (a stale build fails here)."""
    for k in library_kernels():
        names, indices, sizes = torch.ops.argon_host.kernel_params(k.name)
        assert names == [p.name for p in k.buffers()], k.name
        assert indices == [p.index for p in k.buffers()], k.name
        assert [s > 0 for s in sizes] == [p.is_bytes for p in k.buffers()], k.name


@needs_host
def test_launch_binds_by_name_at_the_signature_index():
    # plan_scan declares p first: bound last here, it still goes to [[buffer(0)]]
    bufs = ["block_counts", "counts", "offsets", "sorted_token", "sorted_weight", "tile_expert", "meta"]
    _, _, sizes = torch.ops.argon_host.kernel_params("plan_scan")
    got = torch.ops.argon_host.launch_indices("plan_scan", bufs[::-1], ["p"], sizes[0])
    assert got == list(range(8))


@needs_host
@pytest.mark.parametrize("kernel,buffers,params,size,match", [
    ("no_such_kernel", [], [], 0, r"kernel no_such_kernel: no such kernel"),
    ("plan_hist", ["ids", "block_counts", "idz"], ["p"], 44, r"no parameter named 'idz' \(it has: ids, p, block_counts\)"),
    ("plan_hist", ["ids"], ["p"], 44, r"'block_counts' \(\[\[buffer\(2\)\]\]\) left unbound"),
    ("plan_hist", ["ids", "ids", "block_counts"], ["p"], 44, r"'ids' bound twice"),
    ("plan_hist", ["ids", "block_counts", "p"], [], 0, r"'p' is a constant params struct; given a buffer"),
    ("plan_hist", ["block_counts"], ["p", "ids"], 44, r"'ids' is a buffer; given a params struct"),
    ("plan_hist", ["ids", "block_counts"], ["p"], 40, r"'p' takes 44 bytes; given 40"),
])
def test_launch_rejects_what_the_signature_does_not_allow(kernel, buffers, params, size, match):
    with pytest.raises(RuntimeError, match=match):
        torch.ops.argon_host.launch_indices(kernel, buffers, params, size)
