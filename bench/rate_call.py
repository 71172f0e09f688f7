"""One ``Rate.record_and_throttle`` call, warm, in-process: through the C method the gateway's connection core calls
(a Cython loop built against each tree's ``rate.pxd``) and through Python; this tree against ``--gateway-src``
trees, each in a process of its own.

    PYTHONPATH=$PWD/src .venv/bin/python bench/rate_call.py [--gateway-src DIR ...] [--calls 2000000] [--repeat 7]

Each tree must be built in place (``make setup``). The Rate has Kafka's default quota window (11 samples of 1 s) and
a bound it never reaches; four calls per ms, so samples roll and all 12 are in use, as on a busy quota-id. Best of
``--repeat`` runs, ns per call; ``RateSensor`` is the Python subclass the gateway holds. It is a warm-cache figure:
what a cold request pays for the Rate shows in bench/gateway_footprint.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

DRIVER = '''
# cython: language_level=3
from quotaflow.engine.rate cimport Rate

def drive(Rate rate, long long calls, long long start_ms, int per_ms):
    """``calls`` checks through the C method, as the connection core makes them."""
    cdef long long i, total = 0
    for i in range(calls):
        total += rate.record_and_throttle(100.0, start_ms + i // per_ms)
    return total
'''


def build_driver(src: Path, into: Path) -> None:
    """Compile the driver against ``src``'s ``rate.pxd`` into ``into``."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    pyx = into / "rate_call_driver.pyx"
    pyx.write_text(DRIVER)
    modules = cythonize([Extension("rate_call_driver", [str(pyx)])], include_path=[str(src)], quiet=True)
    command = build_ext(Distribution({"name": "rate_call_driver", "ext_modules": modules}))
    command.build_lib = command.build_temp = str(into)
    command.ensure_finalized()
    command.run()


def child(calls: int, repeat: int) -> None:
    """Inside the tree's process: the figures for its Rate, one line."""
    from quotaflow.engine import rate as rate_module
    from quotaflow.engine.sensors import RateSensor

    assert rate_module.COMPILED, f"{rate_module.__file__}: not compiled (make setup)"
    src = Path(rate_module.__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        build_driver(src, Path(tmp))
        sys.path.insert(0, tmp)
        from rate_call_driver import drive  # type: ignore[import-not-found]

        figures = []
        for cls in (rate_module.Rate, RateSensor):
            best = float("inf")
            for _ in range(repeat):
                rate = cls(11, 1000, 1e12, 0)
                start = time.perf_counter()
                drive(rate, calls, 1_000_000, 4)
                best = min(best, time.perf_counter() - start)
            figures.append(best / calls * 1e9)
        best = float("inf")
        for _ in range(repeat):
            rate = rate_module.Rate(11, 1000, 1e12, 0)
            check = rate.record_and_throttle
            start = time.perf_counter()
            for i in range(calls):
                check(100.0, 1_000_000 + (i >> 2))
            best = min(best, time.perf_counter() - start)
        figures.append(best / calls * 1e9)
    print(" ".join(f"{f:.1f}" for f in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway-src", action="append", default=[], help="another tree's src (built in place)")
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.calls, args.repeat)
        return
    trees = [("this tree", str(HERE.parent / "src"))] + [(src, src) for src in args.gateway_src]
    print(f"# bench/rate_call.py: one warm Rate.record_and_throttle, ns per call (best of {args.repeat} × "
          f"{args.calls:,} calls)\n")
    print("| tree | C method, `Rate` | C method, `RateSensor` | through Python (loop included) |")
    print("|---|---:|---:|---:|")
    for name, src in trees:
        env = dict(os.environ, PYTHONPATH=src)
        out = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls), "--repeat",
                              str(args.repeat)], env=env, check=True, capture_output=True, text=True).stdout
        c_rate, c_sensor, python = out.split()[-3:]
        print(f"| {name} | {c_rate} | {c_sensor} | {python} |")


if __name__ == "__main__":
    main()
