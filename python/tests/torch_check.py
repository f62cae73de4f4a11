"""The PyTorch wrapper, with Debian's python3-torch:
- a DataLoader over TorchDataset yields the rank's window-order batches in
  order for num_workers 0, 1 and 2 (with streams fixed), every sample once;
- set_epoch changes the order as DistributedSampler's does;
- rank and world from torch.distributed (gloo, two processes on one host)
  split the epoch as the contract says;
- bfloat16 tensors come out as torch.bfloat16; pin_memory=True works;
- a logistic regression trains on packed shards, query features expanded
  to their items on the fly (repeat_interleave over query.item_offsets).
Needs RELAYOUT_TORCH_OUTPUT (a flat output) and RELAYOUT_TORCH_PACKED (a
packed output with a bfloat16 tensor); the Go test that runs this file
(go test ./loader -run TestTorchDataLoader) makes both."""
import os
import tempfile
import unittest

import numpy as np

import relayout_loader as rl

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader
except ImportError:  # pragma: no cover
    torch = None

OUT = os.environ.get("RELAYOUT_TORCH_OUTPUT")
PACKED = os.environ.get("RELAYOUT_TORCH_PACKED")


def _rank_indices(rank, world, init, out, q):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    ds = rl.TorchDataset(out, 64, seed=5, epoch=1, index=True)  # rank and world from torch.distributed
    got = []
    for b in DataLoader(ds, batch_size=None, num_workers=1):
        got.append(b["_index"].tolist())
    # Every rank holds the same number of batches to within one.
    n = torch.tensor([len(got)])
    all_n = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(all_n, n)
    q.put((rank, got, [int(x) for x in all_n]))
    dist.destroy_process_group()


def _same(x, a):
    """Whether tensor x holds array a's values (bfloat16 as the bits NumPy
    holds; uint16 widened to int32)."""
    if x.dtype == torch.bfloat16:
        x, a = x.view(torch.int16), a.view(np.int16)
    return tuple(x.shape) == a.shape and np.array_equal(x.numpy(), a)


def _storage(x):
    return x.untyped_storage() if hasattr(x, "untyped_storage") else x.storage()


def _inode(x):
    """The inode of the shared-memory file behind a worker batch's tensor x:
    the pooled buffer the main process keeps mapped for it (the batch's
    own storage is a view of that buffer's memory), else x's storage."""
    st = _storage(x)
    for base, _ in list(rl._anchors.values()):
        if base.data_ptr() == st.data_ptr():
            st = _storage(base)
            break
    r = st._share_fd_cpu_()
    return os.fstat(r[0] if isinstance(r, tuple) else r).st_ino


class TorchTest(unittest.TestCase):
    def setUp(self):
        if OUT is None or PACKED is None:
            self.fail("set RELAYOUT_TORCH_OUTPUT and RELAYOUT_TORCH_PACKED (go test ./loader -run TestTorchDataLoader does)")
        if torch is None:
            if os.environ.get("RELAYOUT_REQUIRE_PEERS") == "1":
                self.fail("python3-torch missing: run make deps")
            self.skipTest("python3-torch not installed")

    def indices(self, epoch, num_workers=2, **kw):
        ds = rl.TorchDataset(OUT, 64, seed=3, epoch=epoch, rank=0, world=1, index=True, **kw)
        ds.set_epoch(epoch)
        got = []
        for b in DataLoader(ds, batch_size=None, num_workers=num_workers):
            self.assertIsInstance(b["_index"], torch.Tensor)
            got.extend(b["_index"].tolist())
        return got

    def test_workers_restore_the_order(self):
        want = []
        for b in rl.Dataset(OUT, seed=3, epoch=0, streams=2, index=True).batches(64):
            want.extend(b["_index"].tolist())
        for nw in (0, 1, 2):
            with self.subTest(num_workers=nw):
                got = self.indices(0, num_workers=nw, streams=2)
                self.assertEqual(got, want)
                self.assertEqual(sorted(got), list(range(len(got))))

    def test_workers_yield_the_same_tensors(self):
        # Every tensor of every batch from DataLoader workers equals the
        # NumPy reader's, and a batch arrives as views of one storage (one
        # shared buffer per batch crosses from the worker, not one a tensor).
        for out in (OUT, PACKED):
            want = list(rl.Dataset(out, seed=2, streams=2).batches(48))
            ds = rl.TorchDataset(out, 48, seed=2, rank=0, world=1, streams=2)
            got = list(DataLoader(ds, batch_size=None, num_workers=2))
            self.assertEqual(len(got), len(want))
            for i, (b, ref) in enumerate(zip(got, want)):
                self.assertEqual(list(b), list(ref))
                for name, a in ref.items():
                    self.assertTrue(_same(b[name], a), f"{out} batch {i} {name}")
                ptrs = {(v.untyped_storage() if hasattr(v, "untyped_storage") else v.storage()).data_ptr() for v in b.values()}
                self.assertEqual(len(ptrs), 1, f"{out} batch {i}: {len(ptrs)} storages")

    def test_worker_buffers_reused_only_when_released(self):
        # Workers copy batches into pooled shared buffers and reuse one only
        # once the main process holds nothing of it: an epoch whose batches
        # are dropped as they come needs a few buffers, not one a batch; and
        # views held from one epoch (a slice of a tensor, its batch dropped)
        # keep their values through the next.
        for out in (OUT, PACKED):
            want = list(rl.Dataset(out, seed=6, streams=2).batches(16))
            ds = rl.TorchDataset(out, 16, seed=6, rank=0, world=1, streams=2)
            dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
            inodes, n = set(), 0
            for i, b in enumerate(dl):
                inodes.add(_inode(next(iter(b.values()))))
                n += 1
            self.assertEqual(n, len(want))
            self.assertLessEqual(len(inodes), 16, f"{out}: {len(inodes)} shared buffers for {n} batches")
            held = []
            for i, b in enumerate(dl):
                if i % 3 == 0:
                    name = list(b)[i % len(b)]
                    held.append((i, name, b[name][:2]))
            for _ in dl:
                pass
            for i, name, v in held:
                self.assertTrue(_same(v, want[i][name][:2]), f"{out} batch {i} {name}: a held view changed")

    def test_epochs_reuse_window_arrays(self):
        # One TorchDataset in the process keeps its window arrays from one
        # epoch to the next; every epoch's batches still equal a fresh NumPy
        # reader's for that epoch, and a reused dict serves Datasets of
        # other epochs and outputs.
        for out in (OUT, PACKED):
            ds = rl.TorchDataset(out, 40, seed=4, rank=0, world=1)
            for epoch in (0, 1, 0):
                ds.set_epoch(epoch)
                got = list(DataLoader(ds, batch_size=None, num_workers=0))
                want = list(rl.Dataset(out, seed=4, epoch=epoch).batches(40))
                self.assertEqual(len(got), len(want))
                for b, ref in zip(got, want):
                    for name, a in ref.items():
                        self.assertTrue(_same(b[name], a), f"{out} epoch {epoch} {name}")
                self.assertTrue(ds._buffers, "no window arrays kept after an epoch")
        shared = {}
        for out, epoch in ((OUT, 2), (PACKED, 3), (OUT, 2)):
            got = list(rl.Dataset(out, seed=1, epoch=epoch).batches(33, buffers=shared))
            want = list(rl.Dataset(out, seed=1, epoch=epoch).batches(33))
            for b, ref in zip(got, want):
                for name in ref:
                    self.assertTrue(np.array_equal(b[name], ref[name]), f"{out} epoch {epoch} {name}")

    def test_set_epoch(self):
        self.assertNotEqual(self.indices(0), self.indices(1))
        self.assertEqual(self.indices(1), self.indices(1))

    def test_block_order_and_weights(self):
        self.assertEqual(sorted(self.indices(0, shuffle="block")), sorted(self.indices(0)))
        got = self.indices(0, weights={0: 0.0})
        first = rl.Dataset(OUT).manifest["slices"][0]
        lo, hi = first["first_row"], first["first_row"] + first["rows"]
        self.assertFalse([s for s in got if lo <= s < hi])

    def test_distributed_gloo(self):
        world = 2
        with tempfile.TemporaryDirectory() as d:
            init = "file://" + os.path.join(d, "rendezvous")
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            procs = [ctx.Process(target=_rank_indices, args=(r, world, init, OUT, q)) for r in range(world)]
            for p in procs:
                p.start()
            res = {}
            for _ in procs:
                rank, got, counts = q.get(timeout=300)
                res[rank] = (got, counts)
            for p in procs:
                p.join(60)
                self.assertEqual(p.exitcode, 0)
        seen = []
        for r in range(world):
            want = [b["_index"].tolist() for b in rl.Dataset(OUT, rank=r, world=world, seed=5, epoch=1, index=True).batches(64)]
            self.assertEqual(res[r][0], want, f"rank {r}")
            self.assertLessEqual(max(res[r][1]) - min(res[r][1]), 1)
            seen.extend(i for b in res[r][0] for i in b)
        self.assertEqual(sorted(seen), list(range(len(rl.Dataset(OUT)))))

    def test_bfloat16_and_pin_memory(self):
        ds = rl.TorchDataset(PACKED, 32, seed=1, rank=0, world=1)
        np_ds = rl.Dataset(PACKED, seed=1)
        bf = [t["name"] for t in np_ds.schema if t["dtype"] == "BF16"]
        self.assertTrue(bf, "the packed output has no bfloat16 tensor")
        n = 0
        for b, ref in zip(DataLoader(ds, batch_size=None, num_workers=1, pin_memory=True), np_ds.batches(32)):
            for name in bf:
                x = b[name]
                self.assertEqual(x.dtype, torch.bfloat16)
                # The same bits NumPy reads, as values.
                self.assertTrue(torch.equal(x.view(torch.int16), torch.from_numpy(ref[name].view(np.int16))))
            n += 1
        self.assertGreater(n, 0)

    def test_logistic_regression_on_packed(self):
        torch.manual_seed(0)
        ds = rl.TorchDataset(PACKED, 64, seed=2, rank=0, world=1)
        model, opt = None, None
        losses = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            for b in DataLoader(ds, batch_size=None, num_workers=0):
                offs = b["query.item_offsets"]
                per_query = offs[1:] - offs[:-1]
                q = b["query.user_dense"].float()           # [Q, Fq], bfloat16 on disk
                x = torch.cat([q.repeat_interleave(per_query, dim=0),  # to items, on the fly
                               b["item.item_dense"].float()], dim=1)
                y = b["item.click"].float()
                if model is None:
                    model = torch.nn.Linear(x.shape[1], 1)
                    opt = torch.optim.SGD(model.parameters(), lr=0.5)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss))
        self.assertGreater(len(losses), 20)
        first, last = np.mean(losses[:5]), np.mean(losses[-5:])
        self.assertLess(last, first, f"the loss did not fall: {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    unittest.main()
