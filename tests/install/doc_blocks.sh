#!/usr/bin/env bash
# Prints, in page order, the code blocks of a markdown page that follow a
# "<!-- getting-started:<kind> ... -->" marker line (blank lines may sit between), fences
# excluded: the pieces of one file that test_getting_started builds (docs/getting-started.md).
#   doc_blocks.sh <page.md> <kind> <fence language>
#   e.g. doc_blocks.sh docs/getting-started.md program c > walkthrough.c
# Fails (exit 1, a line naming the page line) on a marker not followed by a block of that
# language, an unclosed block, no block at all, or a block of that language without a marker:
# every block of the language on the page belongs to the file, so none goes untested.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 <page.md> <kind> <fence language>" >&2; exit 2; }
page=$1 kind=$2 lang=$3
[ -f "$page" ] || { echo "doc_blocks: no page $page" >&2; exit 1; }
awk -v kind="$kind" -v lang="$lang" -v page="$page" '
  function bad(msg) { printf "doc_blocks: %s:%d: %s\n", page, NR, msg > "/dev/stderr"; failed = 1 }
  BEGIN { marker = "^<!-- getting-started:" kind "( .*)?-->$"; fence = "^```" lang "$" }
  inblock && /^```$/ { inblock = 0; next }
  inblock { print; next }
  $0 ~ marker { if (want) bad("marker follows a marker"); want = 1; next }
  want && /^[[:space:]]*$/ { next }
  want && $0 ~ fence { want = 0; inblock = 1; blocks++; next }
  want { bad("the getting-started:" kind " marker is not followed by a ```" lang " block"); want = 0; next }
  $0 ~ fence { bad("a ```" lang " block without a getting-started:" kind " marker") }
  END {
    if (inblock) bad("unclosed ```" lang " block")
    if (want) bad("a marker at the end of the page")
    if (!blocks) bad("no block after a getting-started:" kind " marker")
    exit failed
  }' "$page"
