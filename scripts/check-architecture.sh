#!/usr/bin/env bash
# ARCHITECTURE.md's module tables against the tree: fails when a module named there no longer
# exists, or when a crate's module is in no table (so a new module gets its row).
#
# The convention it reads: a crate's section starts with a heading `### `crates/NAME` — …`;
# the first column of every table row in that section holds one or more module paths in
# backticks, relative to the crate's `src/` and without `.rs` (`http`, `coordinator/queue`,
# `bin/fleeting-plugin-local`). A path exists as `src/PATH.rs`, `src/PATH/mod.rs` or `src/PATH/`.
# Every top-level module of `src/` must be listed — itself, or through its submodules, and then
# all of them (recursively: listing `coordinator/queue` asks for every module of `coordinator/`).
# The page stays at most 250 lines.
# Not modules: `lib.rs`, `main.rs`, `mod.rs`, `tests.rs` (a module's unit tests) and
# `snapshots/` (insta's). Every crate under `crates/` needs its section.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=ARCHITECTURE.md
errors=0
error() {
  echo "scripts/check-architecture.sh: $*" >&2
  errors=$((errors + 1))
}

declare -A listed=() sections=()
while IFS=$'\t' read -r crate path; do
  [ -n "$crate" ] || continue
  if [ -z "$path" ]; then
    sections[$crate]=1
    continue
  fi
  listed["$crate/$path"]=1
  src="crates/$crate/src/$path"
  if [ ! -f "$src.rs" ] && [ ! -d "$src" ]; then
    error "$doc names \`$path\` in crates/$crate, but neither $src.rs nor $src/ exists
  (remove or rename its row)"
  fi
done < <(awk '
  /^#/ {
    crate = ""
    if (match($0, /^### `crates\/[A-Za-z0-9_-]+`/)) {
      crate = substr($0, RSTART + 12, RLENGTH - 13)
      print crate "\t"
    }
    next
  }
  crate != "" && /^\|/ {
    n = split($0, cells, "|")
    first = cells[2]
    while (match(first, /`[^`]+`/)) {
      print crate "\t" substr(first, RSTART + 1, RLENGTH - 2)
      first = substr(first, RSTART + RLENGTH)
    }
  }
' "$doc")

# The modules of a directory, one per line: `x.rs` and `x/` are one module `x`.
modules_of() {
  local dir=$1 entry name
  for entry in "$dir"/*; do
    name=${entry##*/}
    if [ -d "$entry" ]; then
      [ "$name" = snapshots ] && continue
      # A directory with no Rust file in it is not a module (data, fixtures).
      compgen -G "$entry/*.rs" >/dev/null || [ -f "$entry.rs" ] || continue
      echo "$name"
    elif [[ $name == *.rs ]]; then
      case $name in lib.rs | main.rs | mod.rs | tests.rs) continue ;; esac
      echo "${name%.rs}"
    fi
  done | sort -u
}

# `crate/path` is listed, or all its submodules are (and at least one).
check_covered() {
  local crate=$1 path=$2 child any=0
  [ -n "${listed["$crate/$path"]:-}" ] && return 0
  for key in "${!listed[@]}"; do
    if [[ $key == "$crate/$path/"* ]]; then any=1; break; fi
  done
  if [ $any = 0 ] || [ ! -d "crates/$crate/src/$path" ]; then
    error "crates/$crate/src/$path is a module in no table of $doc
  (add a row \`$path\` under \`crates/$crate\`: what it owns, what it may call)"
    return 0
  fi
  while read -r child; do
    check_covered "$crate" "$path/$child"
  done < <(modules_of "crates/$crate/src/$path")
}

for dir in crates/*/; do
  crate=${dir%/}
  crate=${crate#crates/}
  if [ -z "${sections[$crate]:-}" ]; then
    error "crates/$crate has no section \`### \`crates/$crate\` — …\` in $doc"
    continue
  fi
  while read -r module; do
    check_covered "$crate" "$module"
  done < <(modules_of "crates/$crate/src")
done

# A map a newcomer reads in ten minutes: mechanism belongs in the module docs.
max_lines=250
lines=$(wc -l <"$doc")
if [ "$lines" -gt "$max_lines" ]; then
  error "$doc has $lines lines, more than $max_lines: move mechanism detail into the module docs it describes"
fi

if [ $errors -gt 0 ]; then
  echo "scripts/check-architecture.sh: $errors problem(s); $doc's module tables must match the tree" >&2
  exit 1
fi
