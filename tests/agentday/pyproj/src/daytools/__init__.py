"""A small library with what real projects' tests exercise: processes, a server, files."""

import os
import shutil


def square(n):
    return n * n


def squares(numbers, workers=2):
    """Squares in a pool of processes."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(square, numbers))


def snapshot(src, dst):
    """Copies a tree, keeping times and modes, and touches a stamp with a fixed time."""
    shutil.copytree(src, dst)
    stamp = os.path.join(dst, "STAMP")
    shutil.copy2(os.path.join(src, "a.txt"), stamp)
    os.utime(stamp, (1_700_000_000, 1_700_000_000))
    return sorted(os.listdir(dst))
