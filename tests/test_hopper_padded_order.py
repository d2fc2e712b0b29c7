"""The order the padded Hopper GEMM's scheduler walks its output tiles
(csrc/hopper/hopper_padded_order.h, work_tile), compiled here with the host's C++ compiler (the
header includes no CUDA or CUTLASS): every used tile's every N tile exactly once, in windows of
kOrderWindow M tiles with M fastest inside a window, so that the M tiles reading one weight tile
are neighbouring works."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include "hopper/hopper_padded_order.h"
int main(int argc, char** argv) {
  const int used = std::atoi(argv[1]), tiles_n = std::atoi(argv[2]);
  std::printf("%d\n", argon_hopper_padded::kOrderWindow);
  for (unsigned long w = 0; w < (unsigned long)used * tiles_n; ++w) {
    const argon_hopper_padded::TileMN t = argon_hopper_padded::work_tile(w, used, tiles_n);
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

    def run(used, tiles_n):
        lines = subprocess.run([exe, str(used), str(tiles_n)], check=True, capture_output=True,
                               text=True).stdout.split("\n")
        return int(lines[0]), [tuple(map(int, x.split())) for x in lines[1:] if x]
    return run


@pytest.mark.parametrize("used", [1, 2, 3, 4, 5, 7, 8, 13, 640])
@pytest.mark.parametrize("tiles_n", [1, 3, 8, 16])
def test_every_tile_once(order, used, tiles_n):
    _, tiles = order(used, tiles_n)
    assert sorted(tiles) == [(m, n) for m in range(used) for n in range(tiles_n)]


def test_windows_of_m_tiles_m_fastest(order):
    window, tiles = order(6, 3)
    assert window == 4
    assert tiles == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1),
                     (0, 2), (1, 2), (2, 2), (3, 2),
                     (4, 0), (5, 0), (4, 1), (5, 1), (4, 2), (5, 2)]  # the last window: 2 tiles
