#!/usr/bin/env bash
# Installs the headless browser tests/test_report.py opens the run report in: Chromium from the OS packages
# (Debian/Ubuntu `chromium`), idempotent: when a working Chromium is already there it only says which.
#
#   tests/browser/install.sh            # install if missing, print the browser's path and version
#   CHROMIUM=/path/to/chrome tests/browser/install.sh   # use that binary instead (checked, not installed)
#
# apt needs root: run as root, or with passwordless sudo. Anything else fails here with what to do, and
# tests/test_report.py fails with the same message (the report test is never skipped).
set -euo pipefail

find_browser() {
    local c
    for c in "${CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome chrome; do
        [[ -n "$c" ]] || continue
        if command -v "$c" >/dev/null 2>&1 && "$c" --headless --version >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if path=$(find_browser); then
    echo "browser: $path ($("$path" --headless --version 2>/dev/null | head -1))"
    exit 0
fi
if [[ -n "${CHROMIUM:-}" ]]; then
    echo "tests/browser/install.sh: CHROMIUM=$CHROMIUM is not a working browser (\`$CHROMIUM --version\` fails)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "tests/browser/install.sh: no Chromium on PATH and no apt-get to install it: install Chromium (or" \
         "Chrome) yourself and put it on PATH, or set CHROMIUM=/path/to/it" >&2
    exit 1
fi
if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "tests/browser/install.sh: no Chromium on PATH, and installing it needs root: run" \
         "\`sudo apt-get install -y --no-install-recommends chromium\` (Debian; Ubuntu: chromium-browser)," \
         "or set CHROMIUM=/path/to/chrome" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package lists may be empty (slim images): update only when apt does not know a candidate.
policy=$(apt-cache policy chromium 2>/dev/null || true)
if [[ ! "$policy" =~ Candidate:\ [0-9] ]]; then
    "${SUDO[@]}" apt-get update -q
fi
echo "installing chromium from the OS packages (apt-get install chromium)"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
path=$(find_browser) || { echo "tests/browser/install.sh: apt installed chromium but it does not run" >&2; exit 1; }
echo "browser: $path ($("$path" --headless --version 2>/dev/null | head -1))"
