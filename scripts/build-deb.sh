#!/usr/bin/env bash
# build-deb.sh: packs a built redlock.so into a Debian binary package with
# dpkg-deb; `make deb` calls it as
#   build-deb.sh SO VERSION MULTIARCH OUTDIR
# and it prints the path of the .deb it wrote. The package puts the stripped
# object in /usr/lib/MULTIARCH (where a bare `.load redlock` finds it) and
# README.md, the licence (copyright) and the changelog in /usr/share/doc.
# Depends follows the object's real linkage: dpkg-shlibdeps (dpkg-dev) works
# it out when it is installed; otherwise each library ldd lists maps to the
# package that owns it (dpkg -S), at least at the version installed here.
# REDLOCK_DEB_SHLIBDEPS=0 takes the second way even with dpkg-dev present.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
umask 022

if [ $# -ne 4 ]; then
  echo "usage: build-deb.sh SO VERSION MULTIARCH OUTDIR" >&2
  exit 2
fi
so=$1 version=$2 multiarch=$3 outdir=$4
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=libsqlite3-mod-redlock
maintainer=${DEB_MAINTAINER:-the redlock authors <redlock@invalid>}

die() { echo "redlock: $*" >&2; exit 1; }
[ -f "$so" ] || die "$so is not built; run make first"
[[ $version =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || die "version '$version' is not a Debian version (check REDLOCK_VERSION in ext/redlock_version.h)"
arch=$(dpkg --print-architecture) || die "dpkg --print-architecture failed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/debian/$pkg
libdir=$tree/usr/lib/$multiarch
docdir=$tree/usr/share/doc/$pkg
install -d -m 0755 "$tree/DEBIAN" "$libdir" "$docdir"

# The shared object, without debugging symbols (as dh_strip would).
strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$libdir/redlock.so" "$so" \
  || die "strip failed on $so"
chmod 0644 "$libdir/redlock.so"

install -m 0644 "$root/README.md" "$docdir/README.md"
gzip -9n < "$root/CHANGELOG.md" > "$docdir/changelog.gz"
chmod 0644 "$docdir/changelog.gz"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: redlock"
  echo
  echo "Files: *"
  echo "Copyright: 2026 the redlock authors"
  echo "License: BSD-3-Clause"
  sed -e 's/^$/./' -e 's/^/ /' "$root/LICENSE"
} > "$docdir/copyright"
chmod 0644 "$docdir/copyright"

# dpkg-shlibdeps reads debian/control and expects the object inside
# debian/<package>/, hence the layout of $work.
depends_shlibdeps() {
  printf 'Source: redlock\n\nPackage: %s\nArchitecture: any\n' "$pkg" > "$work/debian/control"
  (cd "$work" && dpkg-shlibdeps -O "debian/$pkg/usr/lib/$multiarch/redlock.so") \
    | sed -n 's/^shlibs:Depends=//p'
}

# The package owning a library path; dpkg may have it registered under /lib
# or /usr/lib (usrmerge), so both spellings are tried.
owner_of() {
  local p=$1 c
  for c in "$p" "$(readlink -f "$p")" "/usr$p" "${p#/usr}"; do
    dpkg-query -S "$c" 2>/dev/null | head -n1 | cut -d: -f1 && return 0
  done
  return 1
}

depends_ldd() {
  local lib path owner list=()
  while read -r lib path; do
    [ -n "$path" ] || continue
    owner=$(owner_of "$path") || die "no Debian package owns $path (linked by $so)"
    list+=("$owner (>= $(dpkg-query -W -f='${Version}' "$owner"))")
  done < <(ldd "$so" | sed -n 's/^[[:space:]]*\([^ ]*\) => \(\/[^ ]*\) .*/\1 \2/p')
  [ ${#list[@]} -gt 0 ] || die "ldd found no libraries in $so"
  printf '%s\n' "${list[@]}" | sort -u | paste -sd, - | sed 's/,/, /g'
}

if [ "${REDLOCK_DEB_SHLIBDEPS:-1}" != 0 ] && command -v dpkg-shlibdeps >/dev/null 2>&1; then
  depends=$(depends_shlibdeps) || die "dpkg-shlibdeps failed on $so"
else
  depends=$(depends_ldd)
fi
[ -n "$depends" ] || die "could not work out the package's Depends"

(cd "$tree" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$tree/DEBIAN/md5sums"
chmod 0644 "$tree/DEBIAN/md5sums"
cat > "$tree/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Multi-Arch: same
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$tree" | cut -f1)
Depends: $depends
Section: database
Priority: optional
Description: distributed locks for SQLite over Redis (Redlock)
 redlock is a SQLite loadable extension that lets SQL programs take and
 give back distributed locks with the Redlock algorithm over independent
 Redis servers: redlock_acquire, redlock_release, redlock_extend and more.
 .
 Once installed, the sqlite3 shell loads it with ".load redlock" and any
 program with SELECT load_extension('redlock').
EOF

mkdir -p "$outdir"
deb=$outdir/${pkg}_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$tree" "$deb" >/dev/null || die "dpkg-deb --build failed"
echo "$deb"
