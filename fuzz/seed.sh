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

# ---- corpus/http: what clients send on one connection (see fuzz_targets/http.rs for
# the placeholders @R@ @G@ @P@ @J@ @T@), and corpus/wire: a reader's number, then its input.
out=corpus/http
mkdir -p "$out"
crlf() { printf '%s' "$1" | sed -z 's/\n/\r\n/g'; }
# A request with a body: method, path, extra headers (one per line, may be empty), content
# type, body (a printf format: `\r\n`, `\000`); Content-Length computed.
req() {
  printf -- "$5" > "$out/.body"
  local head="$1 $2 HTTP/1.1"$'\n'"Host: gantry"$'\n'
  [ -n "$3" ] && head+="$3"$'\n'
  [ -n "$4" ] && head+="Content-Type: $4"$'\n'
  head+="Content-Length: $(wc -c < "$out/.body")"$'\n'
  crlf "$head"
  printf '\r\n'
  cat "$out/.body"
  rm "$out/.body"
}
# Named by content hash (each runs in a pipeline's subshell).
seed() { cat > "$out/.new"; mv "$out/.new" "$out/$(sha1sum < "$out/.new" | cut -c1-40)"; }
json=application/json
form=application/x-www-form-urlencoded
mp='multipart/form-data; boundary=XX'
# A multipart part, as a printf format for req.
part() { printf -- '--XX\\r\\nContent-Disposition: form-data; name="%s"%s\\r\\n\\r\\n%s\\r\\n' "$1" "$2" "$3"; }
# An empty zip archive (its end-of-central-directory record).
zip='PK\005\006\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000'
crlf $'GET /api/v4/version HTTP/1.1\nHost: gantry\n\n' | seed
req POST /api/v4/runners/verify "" $json '{"token": "@R@", "system_id": "s_0123456789ab"}' | seed
req POST /api/v4/runners "" $json '{"token": "@G@", "description": "r", "tag_list": "a,b", "run_untagged": true, "locked": false, "maximum_timeout": 600, "info": {"name": "gitlab-runner", "version": "17.0.0", "features": {"refspecs": true}}}' | seed
req POST /api/v4/runners "" $form 'token=@G@&tag_list[]=a&tag_list[]=b&run_untagged=false&info[name]=x&info[features][shared]=1' | seed
req POST /api/v4/runners/verify "" "$mp" "$(part token '' '@R@')--XX--" | seed
req DELETE /api/v4/runners/managers "" $json '{"token": "@R@", "system_id": "s_0123456789ab"}' | seed
req POST /api/v4/jobs/request "" $json '{"token": "@R@", "system_id": "s_0123456789ab", "last_update": "x", "info": {"name": "gitlab-runner", "version": "17.0.0", "executor": "shell", "shell": "bash", "platform": "linux", "architecture": "amd64", "features": {"variables": true, "artifacts": true, "cache": true, "refspecs": true, "trace_checksum": true, "trace_size": true}, "config": {"gpus": ""}, "labels": {"a": "b"}}, "session": {"url": "https://x", "certificate": "c", "authorization": "a"}}' | seed
req PUT /api/v4/jobs/@J@ "" $json '{"token": "@T@", "info": {"features": {"trace_checksum": true}}}' | seed
req PUT /api/v4/jobs/@J@ "" $json '{"token": "@T@", "state": "running", "checksum": "crc32:8f4e8a5d", "output": {"checksum": "crc32:8f4e8a5d", "bytesize": 5}, "exit_code": 0}' | seed
req PUT /api/v4/jobs/@J@ "" $json '{"token": "@T@", "state": "failed", "failure_reason": "script_failure", "exit_code": 1}' | seed
req PUT /api/v4/jobs/@J@ "" $form 'token=@T@&state=running&exit_code=0' | seed
req PATCH /api/v4/jobs/@J@/trace $'JOB-TOKEN: @T@\nContent-Range: 0-4' text/plain 'hello' | seed
req PATCH '/api/v4/jobs/@J@/trace?token=@T@&debug_trace=false' 'Content-Range: 5-10' text/plain ' world' | seed
req POST '/api/v4/jobs/@J@/artifacts?artifact_type=archive&artifact_format=zip&expire_in=1+day' 'JOB-TOKEN: @T@' "$mp" \
  "$(part file '; filename="artifacts.zip"' "$zip")$(part expire_in '' '7d')--XX--" | seed
req POST '/api/v4/jobs/@J@/artifacts?artifact_type=dotenv&artifact_format=gzip' 'JOB-TOKEN: @T@' "$mp" \
  "$(part file '; filename="d.env.gz"' 'KEY=value')--XX--" | seed
crlf $'GET /api/v4/jobs/@J@/artifacts HTTP/1.1\nHost: gantry\nJOB-TOKEN: @T@\n\n' | seed
crlf $'GET /api/v4/job HTTP/1.1\nHost: gantry\nJOB-TOKEN: @T@\n\n' | seed
crlf $'GET /api/v4/projects/@P@/pipelines?ref=main&per_page=2 HTTP/1.1\nHost: gantry\nPRIVATE-TOKEN: glpat-x\n\n' | seed
req POST /api/v4/projects/@P@/trigger/pipeline "" $form 'token=glptt-x&ref=main&variables[A]=b' | seed
req POST /-/login "" $form 'token=glpat-x' | seed
crlf $'GET /demo.git/info/refs?service=git-upload-pack HTTP/1.1\nHost: gantry\n\n' | seed
# Two requests on one connection, a chunked body, Expect: 100-continue.
{ crlf $'GET /api/v4/version HTTP/1.1\nHost: gantry\n\n'; req POST /api/v4/runners/verify "" $json '{"token": "@R@"}'; } | seed
crlf $'POST /api/v4/jobs/request HTTP/1.1\nHost: gantry\nContent-Type: application/json\nTransfer-Encoding: chunked\n\ne\n{"token": "x"}\n0\n\n' | seed
crlf $'PUT /api/v4/jobs/@J@ HTTP/1.1\nHost: gantry\nExpect: 100-continue\nContent-Type: application/json\nContent-Length: 16\n\n{"token": "@T@"}' | seed
# What the HTTP layer refuses.
crlf $'POST /api/v4/projects HTTP/1.1\nHost: gantry\nContent-Length: ten\n\n' | seed
crlf $'GET /api/v4/version HTTP/2.0\nHost: gantry\n\n' | seed
crlf $'PRI * HTTP/2.0\n\nSM\n\n' | seed
crlf $'GET /api/v4/version\nHost gantry\n\n' | seed
echo "fuzz/$out holds $(ls "$out" | wc -l) requests"

out=corpus/wire
mkdir -p "$out"
w=0
wire() { { printf "\\x$(printf %02x "$1")"; printf '%s' "$2"; } > "$out/seed-$w"; w=$((w + 1)); }
wire 0 '{"token": "glrt-x", "description": "d", "tag_list": "a, b", "run_untagged": "true", "info": {"features": {"shared": true}}}'
wire 0 'token=x&tag_list[]=a&info[name]=n&maintenance_note=m&paused=1&maximum_timeout=3600'
wire 1 '{"token": "glrt-x", "system_id": "s_0123456789ab"}'
wire 2 '{"token": "glrt-x"}'
wire 3 'token=glrt-x&system_id=r_0123456789ab'
wire 4 '{"token": "glrt-x", "last_update": "1", "info": {"features": {"refspecs": true}, "labels": {"k": "v"}}, "session": {"url": "u"}}'
wire 4 'token=x&info[features][refspecs]=true&info[config][gpus]=all'
wire 5 '{"token": "glcbt-x", "state": "success", "exit_code": 0, "checksum": "crc32:00000000", "output": {"bytesize": 3}}'
wire 5 'token=x&state=failed&failure_reason=script_failure&exit_code=2'
wire 6 '0-1023'
wire 6 ' 18446744073709551615-18446744073709551615 '
wire 7 '{"id": 1, "token": "t", "allow_git_fetch": true, "job_info": {"name": "j", "stage": "s", "project_id": 1}, "git_info": {"repo_url": "http://x", "ref": "main", "sha": "0", "before_sha": "0", "ref_type": "branch", "refspecs": [], "depth": 20}, "runner_info": {"timeout": 3600}, "variables": [{"key": "A", "value": "b", "public": true}], "steps": [{"name": "script", "script": ["make"], "timeout": 3600, "when": "on_success", "allow_failure": false}], "image": {"name": "alpine"}, "services": [], "artifacts": [], "cache": [], "credentials": [], "dependencies": [], "features": {"trace_sections": true}}'
echo "seeded $w inputs into fuzz/$out"
