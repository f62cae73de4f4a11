"""The NumPy loader's azblob:// credentials and errors, against the Go
test's Azurite (AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY set, as the CLI
takes them). One epoch is read with each way of authenticating the CLI
accepts, and must equal the local output's batches:
- the account key (ranged reads through a SAS token signed here);
- a SAS token alone (AZURE_STORAGE_SAS_TOKEN; reads through it);
- a connection string alone (AZURE_STORAGE_CONNECTION_STRING; the
  client's own reads, no SAS);
then a missing object and a bad query fail at once, naming the object or
the parameter. Prints a JSON summary.

    remote_azure.py LOCAL_OUTPUT AZBLOB_URL CACHE_DIR"""
import datetime
import json
import os
import sys
import tempfile
import urllib.parse

import xxhash
from azure.storage.blob import ContainerSasPermissions, generate_container_sas

import relayout_loader as rl

local, url, cache_dir = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlsplit(url)
q = dict(urllib.parse.parse_qsl(u.query))
account, key = os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_KEY"]
reads = {"signed": 0, "client": 0}
signed, client = rl._AzureBlobs._signed_get, rl._AzureBlobs._container


def count_signed(self, *a):
    reads["signed"] += 1
    return signed(self, *a)


rl._AzureBlobs._signed_get = count_signed


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=3, epoch=0, index=True, window_bytes=1 << 30, **kw)
    return [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)], ds


def with_env(**env):
    for k in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGEBLOB_CONNECTIONSTRING"):
        os.environ.pop(k, None)
    os.environ.update(env)


want, _ = epoch(local)
sas = generate_container_sas(account, u.netloc, account_key=key, permission=ContainerSasPermissions(read=True, list=True),
                             expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
conn = f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};BlobEndpoint=http://{q['domain']}/{account};"
res = {}
for name, env in (("key", {"AZURE_STORAGE_KEY": key}), ("sas", {"AZURE_STORAGE_SAS_TOKEN": "?" + sas}),
                  ("connection_string", {"AZURE_STORAGE_CONNECTION_STRING": conn})):
    with_env(**env)
    reads["signed"] = 0
    got, ds = epoch(url, cache_dir=tempfile.mkdtemp(dir=cache_dir), cache_bytes=1 << 30)
    if not got or got != want:
        sys.exit(f"{name}: {len(got)} batches from Azure differ from the {len(want)} local ones")
    res[name] = {"batches": len(got), "downloads": ds._remote.stats["downloads"], "signed_reads": reads["signed"]}
    if (reads["signed"] > 0) != (name != "connection_string"):
        sys.exit(f"{name}: {reads['signed']} reads through a SAS token")

with_env(AZURE_STORAGE_KEY=key)
store = rl._AzureBlobs(u.netloc, q, 4)
try:
    store.get(u.path.strip("/") + "/tensors/no-such-shard.safetensors", 0, 10)
    sys.exit("a missing object was read")
except rl._StoreRefused as e:
    if "no-such-shard" not in str(e) or "404" not in str(e):
        sys.exit(f"a missing object: {e}")
    res["missing"] = str(e)
try:
    rl._AzureBlobs(u.netloc, dict(q, endpoint="x"), 4)
    sys.exit("an unknown query parameter was accepted")
except ValueError as e:
    res["unknown_parameter"] = str(e)
print(json.dumps(res))
