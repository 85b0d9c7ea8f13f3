#!/usr/bin/env bash
# The steps of conform's CI workflow as a plain script, for GitLab or any CI: the GitHub
# action (action.yml) runs the same commands. See docs/ci.md.
#
# usage: scripts/ci.sh shard K N [RUN ARGS...]     one job of the matrix: conform run --shard K/N
#        scripts/ci.sh merge DIR [COMMENT ARGS...]  join the shard folders under DIR (or DIR itself),
#                                                  publish summary.md, write the PR comment body
#        scripts/ci.sh all N [RUN ARGS...]          every shard here, one after the other, then merge
# env:   CONFORM            the conform binary (default: conform on PATH)
#        CONFORM_ROOT       the project (default: .); CONFORM_ALLOWLIST the allowlist file
#        CONFORM_OUT        where summary.md and comment.md go (default: conform-out)
#        CONFORM_EXPIRING   the comment's expiry window (default: 7d)
#        GITHUB_STEP_SUMMARY  when set (GitHub Actions), summary.md is appended to it
# Exit code: the shard's or the merge's (0 conformant, 1 not conformant, 2 configuration
# error, 3 inconclusive or refused); the summary and the comment are written either way.
set -euo pipefail

conform=${CONFORM:-conform}
root=${CONFORM_ROOT:-.}
allowlist=${CONFORM_ALLOWLIST:-$root/allowlist.json}
out=${CONFORM_OUT:-conform-out}
expiring=${CONFORM_EXPIRING:-7d}

shard() {
    local k=$1 n=$2
    shift 2
    "$conform" run --no-progress "$@" --shard "$k/$n"
}

merge() {
    local dir=$1
    shift
    mkdir -p "$out"
    # The allowlist as it was, for the comment to compare with (absent on a first run).
    if [ -f "$allowlist" ]; then
        cp "$allowlist" "$out/allowlist.before.json"
    else
        rm -f "$out/allowlist.before.json"
    fi
    local status=0
    "$conform" merge "$dir" | tee "$out/merge.log" || status=$?
    local run
    run=$(sed -n 's/^report: \(.*\)\/report\.json.*/\1/p' "$out/merge.log" | tail -n 1)
    if [ -n "$run" ] && [ -f "$run/summary.md" ]; then
        cp "$run/summary.md" "$out/summary.md"
        if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
            cat "$run/summary.md" >> "$GITHUB_STEP_SUMMARY"
        fi
    fi
    "$conform" ci comment --before "$out/allowlist.before.json" --after "$allowlist" \
        --expiring-within "$expiring" --out "$out/comment.md" "$@"
    return "$status"
}

case "${1:-}" in
    shard)
        [ $# -ge 3 ] || { echo "usage: $0 shard K N [RUN ARGS...]" >&2; exit 2; }
        shift
        shard "$@"
        ;;
    merge)
        [ $# -ge 2 ] || { echo "usage: $0 merge DIR [COMMENT ARGS...]" >&2; exit 2; }
        shift
        merge "$@"
        ;;
    all)
        [ $# -ge 2 ] || { echo "usage: $0 all N [RUN ARGS...]" >&2; exit 2; }
        n=$2
        shift 2
        for k in $(seq 1 "$n"); do
            shard "$k" "$n" "$@"
        done
        merge "$root/reports/shards"
        ;;
    *)
        sed -n '2,15p' "$0" >&2
        exit 2
        ;;
esac
