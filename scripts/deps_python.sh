#!/usr/bin/env bash
# Installs the Python packages the loader tests need into Debian's
# /usr/bin/python3: python3-numpy (the NumPy loader and the independent
# checks), python3-xxhash (the loader's optional checksum check),
# python3-torch (the PyTorch wrapper's tests), python3-boto3,
# python3-azure-storage (Microsoft's azure-storage-blob, for azblob://),
# python3-google-auth (Google's auth library, for gs://) and
# python3-fsspec (the package's remote-read extras), and python3-venv with
# python3-pip (the `pip install ./python` test), python3-pyflakes (make
# py-check). Quick when they are already
# there.
set -euo pipefail
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import numpy, xxhash, torch, boto3, azure.storage.blob, google.auth, requests, fsspec, venv, ensurepip, pip, pyflakes' 2>/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "deps: $py with numpy, xxhash, torch, boto3, azure-storage-blob, google-auth, requests, fsspec, venv, pip and pyflakes is needed (apt-get install python3-numpy python3-xxhash python3-torch python3-boto3 python3-azure-storage python3-google-auth python3-requests python3-fsspec python3-venv python3-pip python3-pyflakes)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3 python3-numpy python3-xxhash python3-torch python3-boto3 python3-azure-storage python3-google-auth python3-requests python3-fsspec python3-venv python3-pip python3-pyflakes >/dev/null
"$py" -c 'import numpy, xxhash, torch, boto3, azure.storage.blob, google.auth, requests, fsspec, venv, ensurepip, pip, pyflakes; print("deps: numpy", numpy.__version__, "torch", torch.__version__, "boto3", boto3.__version__, "azure-storage-blob", azure.storage.blob.VERSION)'
