#!/usr/bin/env bash
# The exporter's and the alert rules' end-to-end tests scrape with a real Prometheus, and promtool
# checks the exposition and unit-tests the rules (Debian package `prometheus`). Installs the package
# when it is missing and this machine allows (root and apt-get); otherwise says so, and those tests are
# skipped with the same reason.
# Never fails: a machine without it still runs every other test. GPUFLEET_NO_APT=1 keeps it from
# running apt-get at all (the test is then skipped where prometheus is missing).
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ -n "${GPUFLEET_NO_APT:-}" ]; then
  echo "prometheus is not installed and GPUFLEET_NO_APT is set, so it is not installed;" \
       "the Prometheus tests will be skipped"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "prometheus is not installed and this machine cannot install it (needs root and apt-get);" \
       "the Prometheus tests will be skipped"
  exit 0
fi
echo "installing prometheus (Debian package) for the tests that scrape with a real Prometheus"
log=$(mktemp)
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } \
    >"$log" 2>&1; then
  echo "could not install prometheus (see below); the Prometheus tests will be skipped"
  tail -n 5 "$log"
fi
rm -f "$log"
exit 0
