#!/usr/bin/env bash
# Installs the Python packages the loader tests need into Debian's
# /usr/bin/python3: python3-numpy (the NumPy loader and the independent
# checks) and python3-xxhash (the loader's optional checksum check). Quick
# when they are already there.
set -euo pipefail
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import numpy, xxhash' 2>/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "deps: $py with numpy and xxhash is needed (apt-get install python3-numpy python3-xxhash)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-numpy python3-xxhash >/dev/null
"$py" -c 'import numpy, xxhash; print("deps: numpy", numpy.__version__)'
