#!/usr/bin/env bash
# The web console's browser test drives a real Chromium through chromedriver (Debian packages
# `chromium` and `chromium-driver`). Installs them when missing and this machine allows (root and
# apt-get); otherwise says so, and that test is skipped with the same reason. Never fails: a machine
# without them still runs every other test. GPUFLEET_NO_APT=1 keeps it from running apt-get at all
# (the test is then skipped where Chromium is missing).
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ -n "${GPUFLEET_NO_APT:-}" ]; then
  echo "chromium is not installed and GPUFLEET_NO_APT is set, so it is not installed;" \
       "the web console's browser test will be skipped"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium is not installed and this machine cannot install it (needs root and apt-get);" \
       "the web console's browser test will be skipped"
  exit 0
fi
echo "installing chromium and chromium-driver (Debian packages) for the web console's browser test"
log=$(mktemp)
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver; } >"$log" 2>&1; then
  echo "could not install chromium (see below); the web console's browser test will be skipped"
  tail -n 5 "$log"
fi
rm -f "$log"
exit 0
