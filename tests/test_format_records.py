"""One record per GGUF format (torch_argon/quant/formats.py), and everything that restates a
record's kernel traits agrees with it (issue 41 item 3): the C++/Metal format rows of
csrc/shared/quant_params.h (written from the records by tools/gen_quant_tables.py), the C++
format table (_C.quant_formats), the Triton constants (type ids, word-aligned formats), and the
lookup tables each record names."""
import dataclasses
import importlib.util
import os
import re

import pytest

from torch_argon import _C
from torch_argon.quant import tables
from torch_argon.quant.formats import FORMATS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_FORMATS = [f for f in FORMATS.values() if not f.is_float]


def generator():
    spec = importlib.util.spec_from_file_location(
        "gen_quant_tables", os.path.join(ROOT, "tools", "gen_quant_tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def params_header():
    return open(generator().PARAMS).read()


def test_quant_params_rows_are_the_records():
    text = params_header()
    assert generator().with_format_rows(text, list(FORMATS.values())) == text, (
        "csrc/shared/quant_params.h's ARGON_QUANT_FORMATS differs from the format records: run "
        "python tools/gen_quant_tables.py")
    rows = re.findall(r"X\((\w+), (\w+), (\d+), (\d+), (\d+)\)", text)
    assert rows == [(f.name.lower(), f.name, str(f.type_id), str(f.block_elems),
                     str(f.block_bytes)) for f in BLOCK_FORMATS]


@pytest.mark.parametrize("change", ["block_bytes", "type_id", "dropped"])
def test_a_disagreeing_row_is_found(change):
    records = list(FORMATS.values())
    if change == "dropped":
        records = [f for f in records if f.name != "Q6_K"]
    else:
        records = [dataclasses.replace(f, **{change: getattr(f, change) + 1})
                   if f.name == "Q6_K" else f for f in records]
    text = params_header()
    assert generator().with_format_rows(text, records) != text


def test_cpp_table_is_the_records():
    cpp = {name: (type_id, elems, nbytes, kernels)
           for name, type_id, elems, nbytes, kernels in _C.quant_formats()}
    assert cpp == {f.name: (f.type_id, f.block_elems, f.block_bytes, not f.is_float)
                   for f in FORMATS.values()}


def test_triton_constants_are_the_records():
    pytest.importorskip("triton", reason="the Triton kernels need triton")
    from torch_argon.triton_ops import quant_blocks
    for f in FORMATS.values():
        assert getattr(quant_blocks, f.name).value == f.type_id, f.name
    assert set(quant_blocks.WORD_FORMATS) == {f.name for f in FORMATS.values() if f.word_aligned}
    assert set(quant_blocks.WORD_FORMATS) == {"IQ4_XS", "Q4_K", "Q5_K", "Q2_K"}


def test_each_lookup_table_belongs_to_a_record():
    named = {t for f in FORMATS.values() for t in f.tables}
    in_tables_py = {n for n in vars(tables) if n.isupper()}
    assert named == in_tables_py
    header = generator().read_header()
    assert set(header) == named
    for f in FORMATS.values():
        for t in f.tables:
            assert tuple(getattr(tables, t)) == header[t], (f.name, t)
