# timed TITLE CMD...: run CMD, then print how long it took; a failing step says so and stops the script.
timed() {
  local title="$1"; shift
  local start rc ms
  echo "==> $title"
  start=$(date +%s%N)
  set +e; "$@"; rc=$?; set -e
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '==> %s: %s in %d.%01d s\n' "$title" "$([ $rc -eq 0 ] && echo done || echo "FAILED (exit $rc)")" \
    $((ms / 1000)) $(((ms % 1000) / 100))
  return $rc
}
