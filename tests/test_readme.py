"""README.md and bench/README.md: their tables are bench/make_tables.py's output from
bench/results (regenerating changes nothing), every table marker is filled, the README stays
under 12 KiB, and its relative links point at files (and headings) that exist. The README's
python snippets run at CPU sizes (the op-by-op one equals the layer call bit for bit), and its
claims about the formats come from the format records."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

from conftest import needs

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 12 * 1024


def make_tables():
    sys.path.insert(0, str(ROOT / "bench"))  # make_tables imports distributed_table beside it
    try:
        spec = importlib.util.spec_from_file_location("make_tables", ROOT / "bench" / "make_tables.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


MT = make_tables()


def test_readme_is_under_12_kib():
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move detail to bench/README.md or docs/"


@pytest.mark.parametrize("doc", MT.DOCS)
def test_regenerating_the_tables_changes_nothing(doc):
    text = (ROOT / doc).read_text()
    assert MT.render(doc, text) == text, (
        f"{doc} differs from its regenerated tables: run `python bench/make_tables.py`")


@pytest.mark.parametrize("doc", MT.DOCS)
def test_every_marker_is_filled(doc):
    blocks = dict(m.groups() for m in MT.MARKER.finditer((ROOT / doc).read_text()))
    ours = {n for n, (d, _, _) in MT.TABLES.items() if d == doc}
    assert set(blocks) == ours
    for name, body in blocks.items():
        assert body.strip(), f"{doc}: table {name} is empty"


def test_an_unknown_or_misplaced_marker_is_refused():
    text = (ROOT / "README.md").read_text()
    with pytest.raises(ValueError, match="no-such-table"):
        MT.render("README.md", text + "\n<!-- table:no-such-table -->\n<!-- /table:no-such-table -->\n")
    with pytest.raises(ValueError, match="'h200'"):  # bench/README.md's table
        MT.render("README.md", text + "\n<!-- table:h200 -->\n<!-- /table:h200 -->\n")
    with pytest.raises(ValueError, match="h200-layer"):
        MT.render("README.md", text.replace("<!-- table:h200-layer -->", ""))


def test_a_table_without_its_results_says_so(tmp_path):
    assert MT.make_table("gguf", results=tmp_path).startswith("_No results yet: ")


def test_a_filled_block_is_replaced_not_appended():
    text = (ROOT / "README.md").read_text()
    stale = MT.MARKER.sub(lambda m: f"<!-- table:{m.group(1)} -->\nstale\n<!-- /table:{m.group(1)} -->",
                          text)
    assert "stale" in stale and MT.render("README.md", stale) == text


def slug(heading):
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", ["README.md", "bench/README.md", "docs/testing.md"])
def test_relative_links_resolve(doc):
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{doc}: link to missing {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.M)
            assert anchor in {slug(h) for h in headings}, f"{doc}: no heading for #{anchor}"


# ---- the README's code runs, at CPU sizes, and says what it computes -----------------------

README = (ROOT / "README.md").read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.S)


def snippet(containing):
    found = [s for s in SNIPPETS if containing in s]
    assert len(found) == 1, f"README.md: {len(found)} python snippets contain {containing!r}"
    return found[0]


def cpu_sized(code, *substitutions):
    """The snippet with each (pattern, replacement) applied: each pattern must be there (so an
    edit of the README that the test no longer matches fails here, not silently)."""
    for pattern, replacement in substitutions:
        code, n = re.subn(pattern, replacement, code, flags=re.M)
        assert n, f"README.md snippet: no match for {pattern!r}"
    return code


def test_the_op_by_op_snippet_is_the_layer_call_bit_for_bit():
    from conftest import assert_bits_equal
    code = cpu_sized(snippet("torch_argon.moe_layer("),
                     (r"^T, H, E, I, K = .*$", "T, H, E, I, K = 64, 128, 16, 32, 4"),
                     (r'device="cuda"', 'device="cpu"'))
    layer_call, op_by_op = code.split("# or op by op:")
    scope = {}
    exec(layer_call, scope)
    layer_out = scope["out"]
    exec(op_by_op, scope)
    assert scope["out"] is not layer_out
    assert_bits_equal(scope["out"], layer_out, "op by op against moe_layer")


def test_the_patch_snippet_patches_every_moe_block():
    from test_transformers import tiny_model
    model = tiny_model("qwen3_moe")
    scope = {"model": model}
    exec(snippet("argon_hf.patch(model)"), scope)
    assert scope["report"] == ["model.layers.0.mlp", "model.layers.1.mlp"]


@needs("gguf", "writes the GGUF file the snippet loads")
def test_the_from_gguf_snippet_builds_the_model(tmp_path):
    pytest.importorskip("transformers")
    from gguf_files import write_model_file
    path = tmp_path / "tiny.gguf"
    write_model_file(path, "qwen3moe", n_blocks=1)
    scope = {"torch": torch}
    exec(cpu_sized(snippet("from_gguf("), (r'from_gguf\("[^"]*"', f"from_gguf({str(path)!r}"),
                   (r'device="cuda"', 'device="cpu"')), scope)
    with torch.no_grad():
        logits = scope["model"](torch.tensor([[3, 4, 5]])).logits
    assert logits.shape == (1, 3, 96) and torch.isfinite(logits).all()


def test_format_claims_come_from_the_format_records():
    """The formats line is make_tables' (from torch_argon/quant/formats.py); every other count of
    formats in the README is the number of quantized formats."""
    from torch_argon.quant.formats import FORMATS
    quantized = [f for f in FORMATS.values() if not f.is_float]
    assert MT.formats_line() in README
    assert f" {len(quantized)} GGUF block formats" in MT.formats_line()
    q8 = 16 / FORMATS["Q8_0"].bits_per_weight
    assert f"Q8_0 {q8:.1f}x" in MT.formats_line() and f"{q8:.1f}-" in MT.formats_line()
    for claim in re.findall(r"\ball (\d+)\b|\b(\d+) (?:in all|formats)\b", README):
        assert int(next(c for c in claim if c)) == len(quantized), claim
