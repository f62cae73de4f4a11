"""Unit tests of relayout_loader that need no relayout output: the
safetensors header rules and the order contract's properties."""
import json
import os
import struct
import unittest

import numpy as np

import relayout_loader as rl


def file_of(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


class HeaderTest(unittest.TestCase):
    def test_valid(self):
        buf = file_of({"__metadata__": {"a": "b"}, "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "y": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]}}, bytes(11))
        meta, tensors, start = rl.read_header(buf)
        self.assertEqual(meta, {"a": "b"})
        self.assertEqual(tensors["y"], ("U8", (3,), 8, 11))
        self.assertEqual(start, len(buf) - 11)

    def test_rejects(self):
        bad = {
            "gap": ({"x": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3)),
            "overlap": ({"x": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                         "y": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3)),
            "size": ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)),
            "dtype": ({"x": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16)),
            "tail": ({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, bytes(2)),
            "metadata": ({"__metadata__": {"a": 1}}, b""),
        }
        for name, (h, data) in bad.items():
            with self.subTest(name), self.assertRaises(ValueError):
                rl.read_header(file_of(h, data))
        with self.assertRaises(ValueError):
            rl.read_header(struct.pack("<Q", 1 << 40) + b"{}")


class OrderTest(unittest.TestCase):
    def test_once_per_epoch_and_world_independent(self):
        seq = rl.sequence(10_007, 1000, None, 3, 1)
        ref = None
        for world, workers in [(1, 1), (2, 1), (4, 3)]:
            per = {(r, w): rl.batch_ranges(seq, 128, r, world, w, workers) for r in range(world) for w in range(workers)}
            order, nxt, k = [], {}, 0
            while True:
                key = (k % world, (k // world) % workers)
                i = nxt.get(key, 0)
                if i >= len(per[key]):
                    break
                nxt[key] = i + 1
                order.append(per[key][i])
                k += 1
            idx = np.concatenate([np.arange(s, e) for b in order for s, e in b])
            self.assertEqual(sorted(idx.tolist()), list(range(10_007)))
            if ref is None:
                ref = order
            self.assertEqual(order, ref)

    def test_resume(self):
        seq = rl.sequence(5000, 512, None, 9, 0)
        full = [x for b in rl.batch_ranges(seq, 100) for s, e in b for x in range(s, e)]
        rest = [x for b in rl.batch_ranges(seq, 100, samples_seen=1234) for s, e in b for x in range(s, e)]
        self.assertEqual(rest, full[1234:])

    def test_splitmix_reference(self):
        # SplitMix64 from state 0: the first output of the reference
        # generator (Vigna) is 0xe220a8397b1dcdaf.
        g = rl.SplitMix64(0, 0)
        g.state = 0
        self.assertEqual(g.next(), 0xE220A8397B1DCDAF)


def window_global(n, block, batch, window, streams, world, nw, seed=5, epoch=2, seen=0, sel=None, weights=None):
    """Interleave every reader's window-order batches into the global order."""
    ss, total = rl.streams_of(n, block, sel, weights, seed, epoch, streams, batch)
    per = {}
    for r in range(world):
        for w in range(nw):
            out = []
            wins = {}
            for k, s, wi, first, count in rl.window_batches(ss, total, batch, window, r, world, w, nw, seen):
                if s not in wins:
                    wins[s] = rl.stream_windows(ss[s], s, window, seed, epoch)
                pieces, perm = wins[s][wi]
                pos = np.concatenate([np.arange(a, e) for a, e in pieces])
                out.append(pos[perm.batch(first, count)].tolist())
            per[(r, w)] = out
    order, nxt, k = [], {}, seen // batch
    while True:
        key = (k % world, (k // world) % nw)
        i = nxt.get(key, 0)
        if i >= len(per[key]):
            break
        nxt[key] = i + 1
        order.extend(per[key][i])
        k += 1
    return order, per


class TuneMallocTest(unittest.TestCase):
    def test_glibc_accepts_the_thresholds(self):
        # In a process of its own: the thresholds are the whole process's.
        import platform
        import subprocess
        import sys
        code = "import relayout_loader as rl, sys; sys.exit(0 if rl.tune_malloc() else 1)"
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual(r.returncode == 0, platform.libc_ver()[0] == "glibc")


class ImportTest(unittest.TestCase):
    def test_import_leaves_torch_alone(self):
        # torch is imported when TorchDataset is first used, not with the
        # module: seconds and a few hundred MB a NumPy-only reader skips.
        import subprocess
        import sys
        code = "import sys, relayout_loader; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=os.path.dirname(rl.__file__)))
        self.assertEqual(out.stdout.strip(), "False", out.stderr)


class WindowOrderTest(unittest.TestCase):
    def test_window_perm_is_a_bijection(self):
        for n in list(range(1, 300)) + [4095, 4096, 4097, 65537]:
            p = rl.WindowPerm(n, rl.SplitMix64(n * 7 + 1, 2))
            q = np.arange(n)
            y = p.pos(q)
            self.assertEqual(sorted(y.tolist()), list(range(n)), f"n {n}")
            self.assertTrue((p.at(y) == q).all(), f"n {n}")
            order = p.order(64)
            lab = y[order] // 64  # batch after batch, ascending positions within each
            self.assertTrue((np.diff(lab) >= 0).all() and sorted(order.tolist()) == list(range(n)))
            for j in range(0, n, 64):
                self.assertEqual(order[j:j + 64].tolist(), p.batch(j, min(64, n - j)).tolist())
        # More than 65,536 batches in a window: the batch numbers do not fit
        # 16 bits, so the order comes from a stable sort of 64-bit ones.
        p = rl.WindowPerm(70_001, rl.SplitMix64(3, 0))
        self.assertEqual(p.order(1).tolist(), p.at(np.arange(70_001)).tolist())

    def test_window_perm_tables_match_the_rounds(self):
        # The tabulated rounds (halves up to TABLE_HALF_BITS) and the mixed
        # ones (wider halves) are the same function.
        for n in [2, 3, 1000, 70_001, 1 << 20]:
            p = rl.WindowPerm(n, rl.SplitMix64(n, 5))
            x = np.arange(min(n, 50_000), dtype=np.uint64)
            tabled = (p.pos(x), p.at(x))
            saved = rl.TABLE_HALF_BITS
            try:
                rl.TABLE_HALF_BITS = 0
                mixed = (p.pos(x), p.at(x))
            finally:
                rl.TABLE_HALF_BITS = saved
            self.assertTrue((tabled[0] == mixed[0]).all() and (tabled[1] == mixed[1]).all(), f"n {n}")

    def test_once_balanced_and_elastic(self):
        want, _ = window_global(5000, 100, 64, 512, 4, 1, 1)
        self.assertEqual(sorted(want), list(range(5000)))
        for world, nw in [(2, 1), (1, 2), (2, 2), (4, 1), (1, 4)]:
            got, per = window_global(5000, 100, 64, 512, 4, world, nw)
            self.assertEqual(got, want, f"world {world} x {nw}")
            counts = [sum(len(per[(r, w)]) for w in range(nw)) for r in range(world)]
            self.assertLessEqual(max(counts) - min(counts), 1)
        with self.assertRaises(ValueError):
            window_global(5000, 100, 64, 512, 4, 3, 1)

    def test_resume(self):
        full, _ = window_global(3000, 50, 100, 400, 2, 2, 1)
        for seen in (0, 100, 2900, 3000):
            got, _ = window_global(3000, 50, 100, 400, 2, 2, 1, seen=seen)
            self.assertEqual(got, full[seen:])
        with self.assertRaises(ValueError):
            window_global(3000, 50, 100, 400, 2, 2, 1, seen=150)

    def test_weights(self):
        w = [((0, 1000), 1.0), ((1000, 2000), 3.0), ((2000, 3000), 0.5)]
        got, _ = window_global(3000, 100, 32, 256, 1, 1, 1, weights=w)
        shares = [sum(1 for s in got if lo <= s < hi) / len(got) for (lo, hi), _ in w]
        for (_, x), f in zip(w, shares):
            self.assertAlmostEqual(f, x / 4.5, delta=0.02 * x / 4.5)

    def test_window_samples(self):
        self.assertEqual(rl.window_samples(1 << 20, 100 << 20, 1_000_000, 512), 9728)
        self.assertEqual(rl.window_samples(1, 100, 10, 4), 4)  # at least one batch


class LedgerTest(unittest.TestCase):
    def test_written_in_place(self):
        """The cache ledger is written over its last value at a fixed width
        (20 bytes, the Go loader's), never truncated, and an older reader's
        unpadded ledger reads the same."""
        import tempfile
        rc = rl._Remote.__new__(rl._Remote)
        rc.dir = tempfile.mkdtemp()
        with open(os.path.join(rc.dir, "cache.lock"), "w") as f:
            f.write("77")
        lk = rc._lock_ledger()
        try:
            self.assertEqual(rc._read_ledger(lk), 77)
            for v in (1 << 40, 5, 0, 123456789, (1 << 63) - 1, 3):
                rc._write_ledger(lk, v)
                self.assertEqual(rc._read_ledger(lk), v)
                self.assertEqual(os.path.getsize(os.path.join(rc.dir, "cache.lock")), 20)
        finally:
            lk.close()


class PrefetchTest(unittest.TestCase):
    def test_skips_what_the_reader_passed(self):
        """A prefetch fetches an object only while the reader will still open
        a window that needs it, evicting nothing needed before that window;
        the reader's own fetch is never skipped (the Go loader's
        TestLatePrefetch)."""
        import tempfile
        import xxhash
        store, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
        data = b"a shard's bytes, whole"
        with open(os.path.join(store, "s0.safetensors"), "wb") as f:
            f.write(data)
        rc = rl._Remote("file://" + store, cache, 1 << 20, 1)
        h = "%016x" % xxhash.xxh64_intdigest(data)
        o = {"name": f"{h}-{len(data)}.safetensors", "bytes": len(data), "hash": h, "key": "s0.safetensors",
             "what": "shard", "ranges": None}

        def step(what, pos, wait, present, downloads):
            self.assertTrue(rc.ensure(o, pos, wait), what)
            self.assertEqual((rc.present(o), rc.stats["downloads"]), (present, downloads), what)
        step("a prefetch of an object no window needs", 0, False, False, 0)
        rc.uses[o["name"]] = [3]
        step("a prefetch for window 3", 1, False, True, 1)
        rc.uses[o["name"]] = []  # window 3, its last use, opened
        os.remove(rc.path(o))  # and evicted after it
        step("a late prefetch for window 3, which the reader has passed", 2, False, False, 1)
        step("the reader's own fetch", 3, True, True, 2)

        # A late prefetch evicts nothing needed before what it fetches: the
        # cache holds o, needed at window 5; p, needed at window 7, is
        # fetched by a prefetch planned for window 2.
        rc.pinned.discard(o["name"])
        rc.uses[o["name"]] = [5]
        data2 = b"another shard's bytes"
        with open(os.path.join(store, "s1.safetensors"), "wb") as f:
            f.write(data2)
        h2 = "%016x" % xxhash.xxh64_intdigest(data2)
        p = {"name": f"{h2}-{len(data2)}.safetensors", "bytes": len(data2), "hash": h2, "key": "s1.safetensors",
             "what": "shard", "ranges": None}
        rc.uses[p["name"]] = [7]
        rc.limit = o["bytes"] + rl._LEDGER_SLACK + 4  # o (and the ledger), not both
        rc._last_scan = 0.0  # list the folder: its true usage
        self.assertFalse(rc.ensure(p, 2, False), "a late prefetch found room by evicting what is needed sooner")
        self.assertEqual((rc.present(o), rc.present(p)), (True, False))


class S3URLTest(unittest.TestCase):
    def test_booleans_as_the_cli_takes_them(self):
        """use_path_style, s3ForcePathStyle and disable_https are read as the
        CLI reads them (Go's strconv.ParseBool, any case): 1 and True
        address the bucket by path, as the CLI does (only the literal
        "true" did before); a value that is no boolean is an error naming
        it. Making the client opens no connection."""
        import importlib.util
        import tempfile
        if importlib.util.find_spec("boto3") is None:
            if os.environ.get("RELAYOUT_REQUIRE_PEERS"):
                self.fail("boto3 is missing (python3-boto3)")
            self.skipTest("needs boto3 (python3-boto3)")
        cache = tempfile.mkdtemp()

        def client(query):
            rc = rl._Remote("s3://bkt/out/?region=us-east-1&" + query, cache, 1 << 20, 1)
            return rc._s3_client()[0]

        for q, style, scheme in [
            ("endpoint=store.invalid:9000&use_path_style=true", "path", "https"),
            ("endpoint=store.invalid:9000&use_path_style=1&disable_https=True", "path", "http"),
            ("endpoint=store.invalid:9000&use_path_style=T&disable_https=1", "path", "http"),
            ("endpoint=store.invalid:9000&s3ForcePathStyle=TRUE", "path", "https"),
            ("endpoint=store.invalid:9000&use_path_style=true&s3ForcePathStyle=false", "auto", "https"),
            ("endpoint=store.invalid:9000&use_path_style=0&disable_https=false", "auto", "https"),
            ("endpoint=store.invalid:9000", "auto", "https"),
        ]:
            c = client(q)
            self.assertEqual(c.meta.config.s3["addressing_style"], style, q)
            self.assertTrue(c.meta.endpoint_url.startswith(scheme + "://store.invalid"), (q, c.meta.endpoint_url))
        for q, key in [("use_path_style=yes", "use_path_style"), ("disable_https=on&endpoint=h:1", "disable_https"),
                       ("s3ForcePathStyle=2", "s3ForcePathStyle")]:
            with self.assertRaisesRegex(ValueError, key):
                client(q)


class CheckTensorsTest(unittest.TestCase):
    """check_tensors refuses counts that do not add up before anything is
    sized by them (TestManifestEditSweep does the same for the Go loader
    over every field of real manifests)."""

    def manifest(self):
        sh = lambda first, rows, nbytes: {"path": "s", "first_row": first, "rows": rows, "bytes": nbytes,
                                          "slices": [{"slice": 0, "first_row": 0, "rows": rows}]}
        t = {"order": {"block_samples": 4}, "schema": [{"name": "x"}], "shards": [sh(0, 10, 100), sh(10, 5, 60)],
             "totals": {"shards": 2, "rows": 15, "bytes": 160}}
        t["shards"][1]["slices"][0]["slice"] = 1
        return t, [{"first_row": 0, "rows": 10}, {"first_row": 10, "rows": 5}]

    def test_accepts_and_refuses(self):
        t, sl = self.manifest()
        rl.check_tensors(t, sl, "m")
        edits = {
            "huge totals": lambda t, sl: t["totals"].__setitem__("rows", 1 << 40),
            "gap": lambda t, sl: t["shards"][1].__setitem__("first_row", 11),
            "negative rows": lambda t, sl: t["shards"][0].__setitem__("rows", -1),
            "no blocks": lambda t, sl: t["order"].__setitem__("block_samples", 0),
            "shard count": lambda t, sl: t["totals"].__setitem__("shards", 3),
            "slice index": lambda t, sl: t["shards"][0]["slices"][0].__setitem__("slice", 7),
            "slice past its shard": lambda t, sl: t["shards"][1]["slices"][0].__setitem__("rows", 6),
            "slice past the samples": lambda t, sl: sl[1].__setitem__("rows", 6),
            "not a number": lambda t, sl: t["shards"][0].__setitem__("rows", "10"),
            "missing": lambda t, sl: t.__delitem__("totals"),
        }
        for name, edit in edits.items():
            t, sl = self.manifest()
            edit(t, sl)
            with self.subTest(name), self.assertRaises(ValueError):
                rl.check_tensors(t, sl, "m")


if __name__ == "__main__":
    unittest.main()
