#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the report viewer's browser test
# (tests/report/test_browser.py). Idempotent: a fast no-op when /usr/bin/chromium exists.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-chromium: not root and no sudo; cannot install chromium" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
/usr/bin/chromium --version
