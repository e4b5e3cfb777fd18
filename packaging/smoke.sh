#!/usr/bin/env bash
# Smoke test of a built binary: version, schema on a temp file, a headless digest.
set -euo pipefail
bin=${1:-dist/flowdesk}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --version
"$bin" --db "$tmp/f.db" db apply
mkdir -p "$tmp/docs"
printf '# Hello\n\nA small note. It has two sentences.\n' > "$tmp/docs/note.md"
printf 'print("hi")\n' > "$tmp/docs/hi.py"
"$bin" --db "$tmp/f.db" run digest --folder "$tmp/docs" --out "$tmp/out" --quiet
grep -q "## note.md" "$tmp/out/digest.md"
"$bin" --db "$tmp/f.db" runs
echo "smoke test passed"
