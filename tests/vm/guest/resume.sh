# Which checks a boot runs, and how: sourced by checks.sh in the VM, and by
# tests/it/vm_runner.rs on the host, which tests it against checks.sh's own list.
#
# A boot after the emulated kernel oopsed on an int3 (tests/vm/run.sh) is told on the
# kernel command line which checks earlier boots finished: pinnerd_vm.done=a,b,c. It
# runs every other check as usual, and runs a finished check again only when a check
# still to run stands on what it leaves behind (NEEDS below), reported as SETUP, not
# counted again. Every boot starts from a clean image, so a resumed boot always makes the
# daemon active, ready and its matrix complete first (BASE), as the first boot did.

# The checks every later check stands on, in their order.
BASE=(service-active state-ready sparse-then-complete)

# NEEDS[check]="earlier checks": what each check takes over from earlier ones (a
# workload they started and pinned, a rule they left in place, the daemon they crashed).
# A check that uses anything an earlier check leaves behind must be named here, or a
# resumed boot runs it without it.
declare -A NEEDS=(
    [rule-explicit-new-thread]=rule-explicit-pins
    [rule-removal-reload]="rule-explicit-pins rule-explicit-new-thread"
    [bad-rule-keeps-old]=rule-compact-smt-avoid
    [restart-keeps-pinned]=rule-compact-smt-avoid
    [kill9-keeps-pinned]="rule-compact-smt-avoid restart-keeps-pinned"
    [restore-after-crash]="rule-compact-smt-avoid kill9-keeps-pinned"
    [isolate-survives-restart]=isolate-keeps-others-off
    [irqbalance-knows-isolated]=isolate-keeps-others-off
    [isolate-crash-then-stop]=isolate-keeps-others-off
    [hotplug-compact]=hotplug-explicit
    [package-purge-restores]="hotplug-explicit isolate-keeps-others-off"
)

# in_list NAME LIST: NAME is an item of the comma-separated LIST.
in_list() { [[ ",$2," == *",$1,"* ]]; }

# check_role NAME DONE SELECTED: prints what this boot does with check NAME, given the
# checks earlier boots finished (DONE) and the checks asked for (SELECTED; empty: all):
#   check  run it and count its result;
#   setup  run it again for a check still to run, reported as SETUP;
#   skip   not asked for (SELECTED leaves it out);
#   done   finished in an earlier boot and needed by nothing still to run.
check_role() {
    local name=$1 done=$2 selected=$3 k
    if [ -n "$selected" ] && ! in_list "$name" "$selected"; then
        echo skip
        return
    fi
    if ! in_list "$name" "$done"; then
        echo check
        return
    fi
    for k in "${BASE[@]}"; do
        [ "$k" = "$name" ] && {
            echo setup
            return
        }
    done
    # Needed when a check still to run (not done, and asked for) needs it, directly or
    # through another finished check that is run again.
    local -A want=()
    local todo=() n
    for k in "${!NEEDS[@]}"; do
        in_list "$k" "$done" && continue
        [ -n "$selected" ] && ! in_list "$k" "$selected" && continue
        todo+=("$k")
    done
    while [ ${#todo[@]} -gt 0 ]; do
        k=${todo[0]}
        todo=("${todo[@]:1}")
        for n in ${NEEDS[$k]:-}; do
            [ -n "${want[$n]:-}" ] && continue
            want[$n]=1
            todo+=("$n")
        done
    done
    if [ -n "${want[$name]:-}" ]; then echo setup; else echo done; fi
}
