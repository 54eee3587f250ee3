# Sourced by bench/gpu/call_prelude.sh (so by every device-call script):
# `pack_outputs NAME` moves everything under $O into $O/NAME.tgz (a device
# call returns at most eight files; session 44's call 1 lost eleven). A call
# runs it last; with nothing under $O it does nothing. Archives already
# under $O (*.tgz) are left out, so a call of several parts returns one
# archive a part.
pack_outputs() {
  local files
  # Other parts' archives stay beside this one (a call running several
  # parts, e.g. serving-s46/next/call.sh).
  files=$(cd "$O" && ls -A | grep -v '\.tgz$')
  [ -n "$files" ] || return 0
  # shellcheck disable=SC2086 # the names are the call's own, without spaces
  (cd "$O" && tar -czf "$1.tgz" --remove-files $files)
}
