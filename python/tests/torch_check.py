"""The PyTorch wrapper, with Debian's python3-torch: a DataLoader over
TorchDataset with 2 workers yields the rank's window-order batches in order
(the DataLoader's round robin over workers restores it), every sample once;
set_epoch changes the order as DistributedSampler's does. Needs an output
with tensor shards in RELAYOUT_TORCH_OUTPUT (the Go test that runs this
file makes one)."""
import os
import unittest

import numpy as np

import relayout_loader as rl

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # pragma: no cover
    torch = None

OUT = os.environ.get("RELAYOUT_TORCH_OUTPUT")


class TorchTest(unittest.TestCase):
    def setUp(self):
        if OUT is None:
            self.fail("set RELAYOUT_TORCH_OUTPUT (go test ./loader -run TestTorchDataLoader does)")
        if torch is None:
            if os.environ.get("RELAYOUT_REQUIRE_PEERS") == "1":
                self.fail("python3-torch missing: run make deps")
            self.skipTest("python3-torch not installed")

    def indices(self, epoch, **kw):
        ds = rl.TorchDataset(OUT, 64, seed=3, epoch=epoch, rank=0, world=1, index=True, **kw)
        ds.set_epoch(epoch)
        got = []
        for b in DataLoader(ds, batch_size=None, num_workers=2):
            self.assertIsInstance(b["_index"], torch.Tensor)
            got.extend(b["_index"].tolist())
        return got

    def test_workers_restore_the_order(self):
        got = self.indices(0)
        want = []
        for b in rl.Dataset(OUT, seed=3, epoch=0, streams=2, index=True).batches(64):
            want.extend(b["_index"].tolist())
        self.assertEqual(got, want)
        self.assertEqual(sorted(got), list(range(len(got))))

    def test_set_epoch(self):
        self.assertNotEqual(self.indices(0), self.indices(1))
        self.assertEqual(self.indices(1), self.indices(1))

    def test_block_order_and_weights(self):
        self.assertEqual(sorted(self.indices(0, shuffle="block")), sorted(self.indices(0)))
        got = self.indices(0, weights={0: 0.0})
        first = rl.Dataset(OUT).manifest["slices"][0]
        lo, hi = first["first_row"], first["first_row"] + first["rows"]
        self.assertFalse([s for s in got if lo <= s < hi])


if __name__ == "__main__":
    unittest.main()
