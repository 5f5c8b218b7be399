"""A shell prefix that makes a command its own process group, for platforms
that start commands in a group they share (see :data:`OWN_GROUP_PREFIX`)."""

#: Put in front of a ``bash -c`` command: the command becomes a process group
#: of its own whose id is the shell's pid, so a timeout or an interruption can
#: kill the group whole where the platform would kill the shell alone and
#: leave what it started running. The shell re-executes its own ``-c`` string
#: under ``setsid``, which then makes a session without forking, so the pid
#: stays. ``setsid`` forks when its caller already leads a group, and the
#: group would get a pid we never learn: so the shell reads its group from
#: /proc first, and a shell that leads its group already runs as it is.
OWN_GROUP_PREFIX = (
    'if [ -z "${SBX_OWN_GROUP-}" ]; then read -r _ _ _ _ SBX_GROUP _ </proc/$$/stat 2>/dev/null;'
    ' if [ "${SBX_GROUP-}" != "$$" ] && command -v setsid >/dev/null 2>&1; then'
    ' SBX_OWN_GROUP=1 exec setsid bash -l -c "$BASH_EXECUTION_STRING"; fi; fi\n'
    "unset SBX_OWN_GROUP SBX_GROUP\n"
)
