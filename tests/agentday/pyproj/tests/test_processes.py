import multiprocessing
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import daytools  # noqa: E402


def _put(queue, value):
    queue.put(value * 10)


class Processes(unittest.TestCase):
    def test_process_pool_executor(self):
        self.assertEqual(daytools.squares(range(6)), [0, 1, 4, 9, 16, 25])

    def test_pool_with_spawn(self):
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            self.assertEqual(pool.map(daytools.square, [3, 4]), [9, 16])

    def test_queue_lock_and_shared_value(self):
        queue = multiprocessing.Queue()
        lock = multiprocessing.Lock()
        counter = multiprocessing.Value("i", 0)
        procs = [multiprocessing.Process(target=_put, args=(queue, i)) for i in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            self.assertEqual(p.exitcode, 0)
        with lock:
            counter.value += 1
        self.assertEqual(sorted(queue.get(timeout=10) for _ in procs), [0, 10, 20])
        self.assertEqual(counter.value, 1)


if __name__ == "__main__":
    unittest.main()
