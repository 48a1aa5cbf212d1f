#!/usr/bin/env bash
# Make sure the `age` and `age-keygen` commands (https://age-encryption.org) are on PATH for the Distcp
# interoperability tests (tests/distcp/test_age.py): files the encrypt converter writes must decrypt with
# `age -d`, and files `age -e` writes must decrypt with the decrypt converter.
# Quick when they are there; installs Debian's `age` package when root with apt-get; otherwise exits
# non-zero with the reason, so `make test` fails loudly instead of skipping those tests.
set -euo pipefail

say() { echo "ensure_age: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

works() { command -v age >/dev/null && command -v age-keygen >/dev/null && age --version >/dev/null 2>&1; }

if works; then
    exit 0
fi
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || die "age is missing, and this user cannot install it (needs root and apt-get). Install Debian's age package (or age from https://github.com/FiloSottile/age) so that age and age-keygen are on PATH."
say "apt-get update"
DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
say "installing age from Debian's packages"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends age >&2 \
    || die "apt-get install age failed"
works || die "age does not run after installing Debian's age package"
say "age ready: $(age --version 2>/dev/null)"
