#!/bin/sh
# Writes a corpus of real English text from what every Debian system ships: the manual pages of sections 1, 5, 7
# and 8 under /usr/share/man (regular files, not the links between names), in byte order of their paths, each
# rendered by groff for a UTF-8 terminal 100 columns wide with hyphenation off and overstrikes removed, concatenated
# and cut at MB million bytes. The tokenizer experiment of docs/experiments.md trains on it; which pages there are
# depends on the packages installed, so the script prints how many it read and the file's size and checksum.
#   sh tools/debian_corpus.sh OUT.txt [MB]      (default 6)
set -eu
out=${1:?usage: sh tools/debian_corpus.sh OUT.txt [MB]}
mb=${2:-6}
command -v groff >/dev/null && command -v col >/dev/null && command -v preconv >/dev/null ||
  { echo "debian_corpus: needs groff-base and bsdextrautils (apt-get install -y groff-base bsdextrautils)" >&2; exit 1; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
find /usr/share/man/man1 /usr/share/man/man5 /usr/share/man/man7 /usr/share/man/man8 -type f -name '*.gz' |
  LC_ALL=C sort >"$list"
while read -r page; do
  zcat "$page" | preconv -e UTF-8 | groff -Tutf8 -man -rLL=100n -rHY=0 -P-c 2>/dev/null | col -bx || true
done <"$list" | head -c $((mb * 1000000)) >"$out"
echo "debian_corpus: $(wc -l <"$list") pages listed, $(wc -c <"$out") bytes in $out, sha256 $(sha256sum "$out" | cut -c1-16)"
