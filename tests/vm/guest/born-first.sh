#!/bin/sh
# The unit's later process, as the born-in-place check starts it (ExecReload=): its very
# first act, in shell builtins only (no fork, no exec, well before pinnerd could have
# reacted to its start), notes the CPUs it may run on into DIR/first; then it becomes
# born.py's child, the same process, which touches 64 MiB and reports (see born.py).
#   born-first.sh DIR
while read -r key value; do
    [ "$key" = Cpus_allowed_list: ] && echo "$value" >"$1/first"
done </proc/self/status
exec /usr/local/bin/vmborn /usr/local/lib/pinnerd-vm/born.py "$1" child reload
