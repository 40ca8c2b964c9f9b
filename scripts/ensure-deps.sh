#!/usr/bin/env bash
# Makes sure the Debian packages redlock builds and tests with are present.
# As root it installs what is missing with apt-get; otherwise it prints the
# exact command to run and fails.
# SPDX-License-Identifier: BSD-3-Clause
set -u
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for p in libhiredis-dev libsqlite3-dev sqlite3 redis-server redis-tools libssl-dev openssl gcc make "$@"; do
  have_pkg "$p" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "redlock: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || {
    echo "redlock: apt-get install ${need[*]} failed" >&2; exit 1; }
  # Installing redis-server starts a system redis on 6379; our tests start
  # their own. Only the one this run installed is stopped: a redis-server
  # that was there before is the host's, and left as it is.
  case " ${need[*]} " in
    *" redis-server "*)
      if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi ;;
  esac
  exit 0
fi
echo "redlock: missing packages; run: sudo apt-get install ${need[*]}" >&2
exit 1
