#!/usr/bin/env bash
# Installs Debian's Chromium for the report page test (headless screenshot
# and DOM of `relayout report --html`) and tmux for the progress bar test
# (a real terminal). Quick when they are already there.
set -euo pipefail
if command -v chromium >/dev/null && command -v tmux >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "deps: chromium and tmux are needed for the page and terminal tests (apt-get install chromium tmux)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core tmux >/dev/null
chromium --version
