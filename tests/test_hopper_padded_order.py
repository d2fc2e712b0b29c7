"""The order the padded Hopper GEMM's scheduler walks its output tiles
(csrc/hopper/hopper_padded_order.h, work_tile), compiled here with the host's C++ compiler (the
header includes no CUDA or CUTLASS): every used tile's every N tile exactly once, in windows of
M tiles with M fastest inside a window, so that the M tiles reading one weight tile are
neighbouring works; windows of kOrderWindow only where the experts have that many tiles each
(order_window)."""
import os
import shutil
import subprocess

import pytest

from torch_argon._shapes import plan_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include "hopper/hopper_padded_order.h"
int main(int argc, char** argv) {
  if (argv[1][0] == 'w') {  // order_window(max_tiles_m, n_experts)
    std::printf("%d\n", argon_hopper_padded::order_window(std::atoi(argv[2]), std::atoi(argv[3])));
    return 0;
  }
  const int used = std::atoi(argv[1]), tiles_n = std::atoi(argv[2]), window = std::atoi(argv[3]);
  std::printf("%d\n", argon_hopper_padded::kOrderWindow);
  for (unsigned long w = 0; w < (unsigned long)used * tiles_n; ++w) {
    const argon_hopper_padded::TileMN t = argon_hopper_padded::work_tile(w, used, tiles_n, window);
    std::printf("%d %d\n", t.m, t.n);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def order(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler (CXX, c++ or g++)")
    work = tmp_path_factory.mktemp("order")
    (work / "driver.cpp").write_text(DRIVER)
    exe = str(work / "driver")
    subprocess.run([CXX, "-std=c++17", f"-I{ROOT}/torch_argon/csrc", str(work / "driver.cpp"),
                    "-o", exe], check=True)

    def run(*args):
        lines = subprocess.run([exe, *map(str, args)], check=True, capture_output=True,
                               text=True).stdout.split("\n")
        return int(lines[0]), [tuple(map(int, x.split())) for x in lines[1:] if x]
    return run


@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("used", [1, 2, 3, 4, 5, 7, 8, 13, 640])
@pytest.mark.parametrize("tiles_n", [1, 3, 8, 16])
def test_every_tile_once(order, used, tiles_n, window):
    _, tiles = order(used, tiles_n, window)
    assert sorted(tiles) == [(m, n) for m in range(used) for n in range(tiles_n)]


def test_a_window_of_one_is_n_fastest(order):
    _, tiles = order(5, 3, 1)
    assert tiles == [(m, n) for m in range(5) for n in range(3)]


def test_windows_of_m_tiles_m_fastest(order):
    window, tiles = order(6, 3, 4)
    assert window == 4
    assert tiles == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1),
                     (0, 2), (1, 2), (2, 2), (3, 2),
                     (4, 0), (5, 0), (4, 1), (5, 1), (4, 2), (5, 2)]  # the last window: 2 tiles


@pytest.mark.parametrize("T,K,E,window", [
    (8192, 8, 128, 4),    # 512 rows per expert: 4-5 tiles each (windows measured faster)
    (2048, 8, 128, 1),    # 128 rows: 1-2 tiles
    (4096, 8, 128, 1),    # 256 rows: 2-3 tiles
    (8192, 10, 512, 1),   # 160 rows: 1-2 tiles (windows of 4 measured slower)
    (16384, 10, 512, 1),  # 320 rows: 2-3 tiles
    (65536, 8, 128, 4),
])
def test_the_window_follows_the_tiles_per_expert(order, T, K, E, window):
    """order_window takes the plan's tile bound (_shapes.plan_rows / 128): windows of 4
    only where that bound gives every expert 4 tiles or more."""
    tiles = plan_rows(T, K, E, 128) // 128
    assert order("w", tiles, E)[0] == window
