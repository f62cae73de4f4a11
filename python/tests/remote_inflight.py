"""The NumPy loader against a slow store (the Go test's loopback S3 server
answering every request after 20 ms): one epoch from S3 equals the local
one, batch for batch. Then two more epochs, each a new Dataset with an
empty cache folder (as TorchDataset makes a Dataset every epoch), which
download everything again on the first one's client and connections.
With --fork, instead: a Dataset made here, having read a batch, then
forked (a DataLoader worker or a multiprocessing child given it): two
children read whole epochs at once, each on its own connections and
without the parent's locks (two processes on one socket read each other's
responses; a lock file's copy in a child keeps its lock).
Prints a JSON summary with the first epoch's seconds; the Go test
(TestRemoteRequestsInFlight) counts the requests in flight and the
connections opened on the server.

    remote_inflight.py [--fork] LOCAL_OUTPUT S3_URL CACHE_DIR [MAX_REQUESTS]"""
import faulthandler
import json
import os
import sys
import time

import xxhash

import relayout_loader as rl

args = sys.argv[1:]
fork = args[:1] == ["--fork"]
if fork:
    args = args[1:]
local, url, cache_dir = args[0], args[1], args[2]
extra = {"max_requests": int(args[3])} if len(args) > 3 else {}


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=9, window_bytes=1 << 20, **kw)
    return [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)]


want = epoch(local)
if not fork:
    t0 = time.monotonic()
    got = epoch(url, cache_dir=cache_dir, **extra)
    seconds = time.monotonic() - t0
    if got != want or not got:
        sys.exit(f"{len(got)} batches from the slow store differ from the {len(want)} local ones")
    for i in (2, 3):
        again = os.path.join(cache_dir, f"epoch{i}")
        if epoch(url, cache_dir=again, **extra) != want:
            sys.exit(f"epoch {i}, a new Dataset: batches differ from the local ones")

    print(json.dumps({"batches": len(got), "seconds": round(seconds, 3)}))
    sys.exit(0)
# The fork: the parent's Dataset has read a batch, so its client holds open
# connections; two children read whole epochs at once from it.
ds = rl.Dataset(url, seed=9, window_bytes=1 << 20, cache_dir=os.path.join(cache_dir, "forked"), **extra)
next(iter(ds.batches(100)))
children = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        code = 1
        faulthandler.dump_traceback_later(100, exit=True)  # where a child waits, if it does
        try:
            mine = [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)]
            if mine == want:
                code = 0
            else:
                print(f"forked child {i}: {len(mine)} batches differ from the {len(want)} local ones", file=sys.stderr)
        except BaseException as e:
            print(f"forked child {i}: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(code)
    children.append(pid)
deadline, failed = time.monotonic() + 120, []
while children:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.remove(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                failed.append(pid)
    if children and time.monotonic() > deadline:
        for pid in children:
            os.kill(pid, 9)
        sys.exit(f"forked children {children} still reading after 120 s (a shared connection's response lost?)")
    time.sleep(0.05)
if failed:
    sys.exit(f"{len(failed)} of 2 forked children read wrong batches or failed")
print(json.dumps({"batches": len(want), "forked_children": 2}))
