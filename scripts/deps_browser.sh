#!/usr/bin/env bash
# Installs Debian's Chromium for the report page test (headless screenshot
# and DOM of `relayout report --html`). Quick when it is already there.
set -euo pipefail
if command -v chromium >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "deps: chromium is needed for the report page test (apt-get install chromium)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
