#!/bin/sh
# Writes a corpus of real English text from Debian's own packages: the manual pages of sections 1, 5, 7 and 8 that
# installed packages own (dpkg's file lists under /var/lib/dpkg/info; regular files, not the links between names),
# except those of packages named in EXCLUDE (default: google-cloud-cli, which some machines carry from Google's own
# repository and whose 16,000 generated pages would swamp the rest). Pages in byte order of their paths, each
# rendered by groff for a UTF-8 terminal 100 columns wide with hyphenation off and overstrikes removed,
# concatenated and cut at MB million bytes. Which pages there are depends on the packages installed, so the script
# prints how many it read and the file's size and checksum. docs/experiments.md trains on it.
#   sh tools/debian_corpus.sh OUT.txt [MB]      (default 6)
set -eu
out=${1:?usage: sh tools/debian_corpus.sh OUT.txt [MB]}
mb=${2:-6}
exclude=${EXCLUDE:-google-cloud-cli}
command -v groff >/dev/null && command -v col >/dev/null && command -v preconv >/dev/null ||
  { echo "debian_corpus: needs groff-base and bsdextrautils (apt-get install -y groff-base bsdextrautils)" >&2; exit 1; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
for owned in /var/lib/dpkg/info/*.list; do
  pkg=$(basename "$owned" .list)
  case " $exclude " in *" ${pkg%%:*} "*) continue ;; esac
  grep -E '^/usr/share/man/man[1578]/[^/]+\.gz$' "$owned" || true
done | while read -r page; do [ -f "$page" ] && [ ! -L "$page" ] && echo "$page"; done | LC_ALL=C sort -u >"$list"
limit=$((mb * 1000000))
: >"$out"
while read -r page; do
  zcat "$page" | preconv -e UTF-8 | groff -Tutf8 -man -rLL=100n -rHY=0 -P-c 2>/dev/null | col -bx >>"$out" || true
  [ "$(wc -c <"$out")" -lt "$limit" ] || break
done <"$list"
[ "$(wc -c <"$out")" -le "$limit" ] || truncate -s "$limit" "$out"
echo "debian_corpus: $(wc -l <"$list") pages listed, $(wc -c <"$out") bytes in $out, sha256 $(sha256sum "$out" | cut -c1-16)"
