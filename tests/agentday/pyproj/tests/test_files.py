import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import daytools  # noqa: E402


class Files(unittest.TestCase):
    def test_copytree_copy2_and_utime_in_a_temporary_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(os.path.join(src, "sub"))
            for name in ("a.txt", "sub/b.txt"):
                with open(os.path.join(src, name), "w") as f:
                    f.write(name)
            os.chmod(os.path.join(src, "a.txt"), 0o640)
            os.utime(os.path.join(src, "a.txt"), (1_600_000_000, 1_600_000_000))
            names = daytools.snapshot(src, os.path.join(tmp, "dst"))
            self.assertEqual(names, ["STAMP", "a.txt", "sub"])
            copied = os.stat(os.path.join(tmp, "dst", "a.txt"))
            self.assertEqual(int(copied.st_mtime), 1_600_000_000)
            self.assertEqual(copied.st_mode & 0o777, 0o640)
            stamp = os.stat(os.path.join(tmp, "dst", "STAMP"))
            self.assertEqual(int(stamp.st_mtime), 1_700_000_000)

    def test_named_temporary_file_and_mkdtemp(self):
        with tempfile.NamedTemporaryFile("w+", suffix=".json") as f:
            f.write("{}")
            f.flush()
            self.assertTrue(os.path.exists(f.name))
        d = tempfile.mkdtemp()
        try:
            self.assertTrue(os.path.isdir(d))
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
