"""One harness (torch_argon/testing): the bench scripts and the main job take their routings,
timers, layers and GGUF files from it, never from tests/, and keep no copies of their own."""
import ast
from pathlib import Path

import pytest
import torch

from torch_argon.testing import layers, routing, timing
from torch_argon.testing.routing import DISTRIBUTIONS, make_ids, make_weights

ROOT = Path(__file__).resolve().parents[1]
BENCH = sorted((ROOT / "bench").rglob("*.py"))
TEST_MODULES = {p.stem for p in (ROOT / "tests").glob("*.py")}


def imported_modules(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


@pytest.mark.parametrize("script", BENCH, ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_scripts_import_nothing_from_tests(script):
    text = script.read_text()
    tree = ast.parse(text)
    from_tests = {m for m in imported_modules(tree) if m.split(".")[0] in TEST_MODULES}
    assert not from_tests, f"{script.name} imports {from_tests} from tests/"
    for node in ast.walk(tree):  # no "tests" folder put on sys.path
        if isinstance(node, ast.Constant) and node.value in ("tests", "tests/"):
            raise AssertionError(f"{script.name}:{node.lineno} names the tests folder")


@pytest.mark.parametrize("script", BENCH, ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_scripts_keep_no_routing_or_graph_timer_of_their_own(script):
    """A routing generator or a CUDA graph capture in a bench script is a second copy of
    testing.routing / testing.timing."""
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            assert node.name not in ("routing", "graph_us", "make_ids"), (
                f"{script.name}:{node.lineno} defines {node.name}")
        if isinstance(node, ast.Attribute):
            assert node.attr not in ("CUDAGraph", "multinomial"), (
                f"{script.name}:{node.lineno} uses .{node.attr}: a graph timer or a routing "
                "of its own")
        if (isinstance(node, ast.Attribute) and node.attr == "indices"
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", None) == "topk"):
            raise AssertionError(f"{script.name}:{node.lineno}: a routing of its own "
                                 f"({ast.unparse(node)})")


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_routing_on_the_cpu_is_what_the_parity_tests_draw(dist):
    """The tests' routings moved here unchanged: the same seed gives the same ids, and the ids
    of each distribution have its shape."""
    ids = make_ids(64, 4, 16, dist, seed=3)
    assert torch.equal(ids, make_ids(64, 4, 16, dist, seed=3)) and ids.dtype == torch.int64
    assert ids.shape == (64, 4) and ((ids >= -1) & (ids < 16)).all()
    if dist == "neg_all":
        assert (ids == -1).all()
    elif dist == "neg_some":
        assert (ids == -1).any() and (ids >= 0).any()
    else:
        assert (ids >= 0).all()
    if dist in ("uniform", "zipf"):  # K distinct experts per token
        assert all(len(set(row)) == 4 for row in ids.tolist())
    assert make_ids(0, 4, 16, dist).shape == (0, 4)
    w = make_weights(64, 4, seed=3)
    assert w.dtype == torch.float32 and ((w >= 0) & (w < 1)).all()


def test_routing_refuses_an_unknown_distribution():
    with pytest.raises(ValueError, match="dist must be one of"):
        routing.make_ids(4, 2, 8, "gaussian")


def test_rounds_are_interleaved_and_one_list_per_call():
    order = []
    runs = timing.rounds_us({"a": lambda: None, "b": lambda: None}, 3,
                            lambda key, fn, r: order.append((r, key)) or 10.0 * (r + 1))
    assert order == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]
    assert runs == {"a": [10.0, 20.0, 30.0], "b": [10.0, 20.0, 30.0]}


def test_graph_timers_fall_back_to_the_wall_clock_off_cuda():
    calls = []
    us = timing.graph_us(lambda: calls.append(1), "cpu", samples=4)
    assert us >= 0 and len(calls) == 5  # one warm-up, four samples
    got = timing.interleaved_graphs_us({"a": lambda: None, "b": lambda: None}, "cpu")
    assert set(got) == {"a", "b"}


def test_layer_stages_add_up_to_the_layer_and_match_it():
    """Each stage of the ops path runs on the intermediates of one layer call: running them in
    order reproduces the layer's output bit for bit (CPU)."""
    from torch_argon.testing import backends
    layer = layers.make_layer(24, 8, 2, 64, 32, torch.float32, "cpu")
    ops = backends.get("cpu").ops
    path = layers.experts_path(layer.x, layer.experts, ops, top_k=2)
    assert (path.name, path.tile_m) == ("ops", 1)
    stages = layers.argon_stages(layer, ops, path.name, path.tile_m)
    assert list(stages) == ["route", "plan", "gather", "gate_up_mm", "swiglu", "down_mm",
                            "combine", "layer"]
    assert torch.equal(stages["combine"].call(), stages["layer"].call())
    assert layers.plan_matches_reference(layer, ops, path.tile_m)
    assert layers.float64_error(layer, stages["layer"].call()) < 1e-5
    torch_stages = layers.torch_layer_stages(layer)
    assert {"plan", "gather"} <= set(torch_stages)
    if "layer" in torch_stages:  # torch._grouped_mm for this device and dtype
        assert layers.relative_error(torch_stages["layer"](), stages["layer"].call()) < 1e-5
