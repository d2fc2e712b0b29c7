"""The file lists of docs/adding-an-op.md and docs/quantized-formats.md name files that exist
(issue 41 item 7): every path they give in backticks, with `<op>` / `<family>` taken as the
model op's (moe_gather: gather), is a file of the checkout, and the op table's ops and the
format records are where the lists say they are declared."""
import os
import re

import pytest

import torch_argon
from torch_argon.quant.formats import FORMATS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("docs/adding-an-op.md", "docs/quantized-formats.md")
PREFIXES = ("", "tests/", "torch_argon/", "torch_argon/csrc/", "torch_argon/csrc/metal/",
            "torch_argon/csrc/shared/", "torch_argon/quant/")


def listed_paths(doc):
    text = open(os.path.join(ROOT, doc)).read()
    for token in re.findall(r"`([^`\s]+\.(?:h|cpp|cu|py|md|metal)|[^`\s]+\.\{h,cpp\})`", text):
        token = token.replace("<op>", "gather").replace("<family>", "gather")
        for expanded in ([token.replace("{h,cpp}", e) for e in ("h", "cpp")]
                         if "{h,cpp}" in token else [token]):
            yield expanded


def exists(path):
    return any(os.path.isfile(os.path.join(ROOT, p + path)) for p in PREFIXES)


@pytest.mark.parametrize("doc", DOCS)
def test_listed_files_exist(doc):
    paths = list(listed_paths(doc))
    assert len(paths) >= 8, paths
    missing = [p for p in paths if not exists(p) and not p.startswith("tests/test_")]
    assert not missing, f"{doc} lists files that do not exist: {missing}"


def test_the_op_table_and_format_rows_are_where_the_lists_say():
    table = open(os.path.join(ROOT, "torch_argon/csrc/op_table.h")).read()
    for name in torch_argon._C.op_names():
        assert re.search(rf"X\({name},", table), name
    rows = open(os.path.join(ROOT, "torch_argon/csrc/shared/quant_params.h")).read()
    for fmt in FORMATS.values():
        if not fmt.is_float:
            assert re.search(rf"X\(\w+, {fmt.name}, {fmt.type_id}, {fmt.block_elems}, "
                             rf"{fmt.block_bytes}\)", rows), fmt.name
