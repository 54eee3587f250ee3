# Sourced by bench/gpu/call_prelude.sh (so by every device-call script):
# `pack_outputs NAME` moves everything under $O into $O/NAME.tgz (a device
# call returns at most eight files; session 44's call 1 lost eleven). A call
# runs it last; with nothing under $O it does nothing.
pack_outputs() {
  local files
  files=$(cd "$O" && ls -A | grep -vx "$1.tgz")
  [ -n "$files" ] || return 0
  # shellcheck disable=SC2086 # the names are the call's own, without spaces
  (cd "$O" && tar -czf "$1.tgz" --remove-files $files)
}
