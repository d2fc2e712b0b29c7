"""README.md and bench/README.md: their tables are bench/make_tables.py's output from
bench/results (regenerating changes nothing), every table marker is filled, the README stays
under 12 KiB, and its relative links point at files (and headings) that exist."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

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
