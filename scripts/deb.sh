#!/usr/bin/env bash
# Builds kiln_<version>_<arch>.deb from the committed and working-tree
# files (not build outputs) in a scratch copy, so the source tree stays
# clean; the package and its build log land in OUT (default build-deb).
# OUT/source.sha256 records the digest of those files (names, modes and
# contents): when they have not changed since the package in OUT was
# built, it is kept and nothing is built again.
# Needs the packages of `scripts/install-deps.sh deb`.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(realpath -m "${1:-build-deb}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$out" "$work/kiln"
# Tracked and new files that git does not ignore: what a release holds.
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf "$work/source.tar" --sort=name --mtime=@0 \
    --owner=0 --group=0 --numeric-owner
digest=$(sha256sum < "$work/source.tar" | cut -d' ' -f1)
built=("$out"/kiln_*.deb)
if [ "${#built[@]}" -eq 1 ] && [ -f "${built[0]}" ] &&
   [ "$(cat "$out/source.sha256" 2>/dev/null)" = "$digest" ]; then
  echo "deb: ${built[0]} is up to date"
  exit 0
fi
rm -f "$out/source.sha256"
tar -xf "$work/source.tar" -C "$work/kiln"

start=$(date +%s)
(cd "$work/kiln" && dpkg-buildpackage -us -uc -b -j"$(nproc)") \
  > "$out/build.log" 2>&1 || { tail -40 "$out/build.log" >&2; exit 1; }
rm -f "$out"/kiln_*.deb "$out"/kiln-dbgsym_*.deb
mv "$work"/kiln_*.deb "$out"/
mv "$work"/kiln-dbgsym_*.deb "$out"/ 2>/dev/null || true
echo "$digest" > "$out/source.sha256"
echo "deb: $(ls "$out"/kiln_*.deb) in $(( $(date +%s) - start ))s"
