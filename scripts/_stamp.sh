# shellcheck shell=bash
# Sourced by the scripts that install into a virtualenv: the install is redone when the files it
# was made from differ from what its stamp recorded (their hash). A file's time says nothing
# after a checkout or a merge, which may give an old pyproject.toml a new time or the reverse.

# files_hash FILE...: one hash of the FILEs' contents.
files_hash() {
    sha256sum "$@" | sha256sum | cut -c1-64
}

# stamp_stale STAMP FILE...: true when STAMP does not hold the FILEs' hash.
stamp_stale() {
    local stamp=$1
    shift
    [ "$(cat "$stamp" 2>/dev/null)" != "$(files_hash "$@")" ]
}

# stamp_write STAMP FILE...: records the FILEs' hash in STAMP, once the install succeeded.
stamp_write() {
    local stamp=$1
    shift
    files_hash "$@" >"$stamp"
}
