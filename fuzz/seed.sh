#!/usr/bin/env bash
# Seed fuzz/corpus/compile with every YAML file of the conformance corpus
# (../shared/conformance beside the repository, or $CONFORMANCE), plus a few hand-written
# pairs that exercise `include: local` through the target's separator.
set -euo pipefail
cd "$(dirname "$0")"
src="${CONFORMANCE:-../../shared/conformance}"
out=corpus/compile
mkdir -p "$out"
n=0
while IFS= read -r -d '' f; do
  # Name by content hash: identical files collapse, re-running is idempotent.
  h=$(sha1sum "$f" | cut -c1-40)
  cp "$f" "$out/$h"
  n=$((n + 1))
done < <(find "$src" -type f \( -name '*.yml' -o -name '*.yaml' \) -print0)
sep=$'\n#--inc--\n'
i=0
for pair in \
  "include: inc.yml${sep}job: {script: [x]}" \
  "include:
  - local: '*.yml'${sep}a: {script: b}" \
  "include: {local: inc.yml, inputs: {x: 1}}${sep}spec: {inputs: {x: {type: number}}}
---
j: {script: \"\$[[ inputs.x ]]\"}" \
  "include: [inc.yml]
j: {extends: .t, script: [y]}${sep}.t: {image: i, rules: [{if: '\$CI_COMMIT_BRANCH == \"main\"'}]}" \
  "include: [inc.yml, inc.yml]${sep}include: .gitlab-ci.yml
x: {script: [a]}" \
  "j: {script: !reference [.t, s]}${sep}.t: {s: [a]}" \
  ; do
  printf '%s' "$pair" > "$out/include-$i"
  i=$((i + 1))
done
echo "seeded $n conformance files and $i include pairs into fuzz/$out"
