#!/usr/bin/env bash
# Make sure Debian's Chromium is at /usr/bin/chromium for the browser test (tests/e2e/test_backfill_ui.py),
# which drives it headless with Playwright's Python package (never a browser Playwright downloads).
# Quick when it is there; installs Debian's `chromium` package when root with apt-get; otherwise exits
# non-zero with the reason, so `make test` fails loudly instead of skipping the browser test.
# COPYCAT_TEST_CHROMIUM names another Chromium binary: then it only has to be executable.
set -euo pipefail

CHROMIUM=${COPYCAT_TEST_CHROMIUM:-/usr/bin/chromium}

say() { echo "ensure_browser: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

works() { "$CHROMIUM" --headless --no-sandbox --version >/dev/null 2>&1; }

if [ -x "$CHROMIUM" ] && works; then
    exit 0
fi
[ -z "${COPYCAT_TEST_CHROMIUM:-}" ] \
    || die "COPYCAT_TEST_CHROMIUM=$CHROMIUM is not a working Chromium binary"
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || die "$CHROMIUM is missing, and this user cannot install it (needs root and apt-get). Install Debian's chromium package, or set COPYCAT_TEST_CHROMIUM to a Chromium binary."
say "apt-get update"
DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
say "installing chromium from Debian's packages"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-liberation >&2 \
    || die "apt-get install chromium failed"
works || die "$CHROMIUM does not start after installing chromium"
say "chromium ready: $("$CHROMIUM" --version 2>/dev/null)"
