# The VM test's boots and what ends them: sourced by tests/vm/run.sh, and by
# tests/it/vm_runner.rs, which runs it on canned consoles (tests/vm/consoles/) with a
# fake boot.
#
# Under multi-threaded TCG a vCPU can run into the int3 that the kernel's text_poke_bp
# puts in a static branch while it patches its own code (a static key flipped by a
# cgroup change, a CPU going offline, …): "Oops: int3" at any point of a run, a fault of
# the emulator's cross-modifying code that hardware does not have. That oops, and only
# it, ends a boot without failing the run: the next boot (from the same clean image)
# runs the checks not yet finished (guest/resume.sh) — at most VM_MAX_REBOOTS times, each
# reboot and its reason listed. Anything else the kernel reports (another oops, a kernel
# BUG, list corruption, a soft lockup, a WARNING, a panic) fails the run, naming the
# check in flight, and is never booted past.

# vm_marker LINE: whether LINE (a console line) reports a kernel failure; sets MARKER to
# "int3" for the emulator's oops, "panic-after-oops" for the panic an oops ends in, or
# "kernel" for anything else, MARKER_AT to its time stamp and MARKER_TEXT to the message.
# Only kernel lines count: they carry printk's time stamp ([    184.307152]), found
# anywhere in the line, since systemd's status line (escapes, carriage returns) can
# come before it.
vm_marker() {
    local line=${1//$'\r'/} head
    local ts='\[ *([0-9]+\.[0-9]{6})\] (.*)$'
    # The oops header (arch/x86/kernel/dumpstack.c __die_header): "Oops: STR: ERR [#N]"
    # since 6.9 (6.12: "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"), "STR: ERR [#N]"
    # before it (6.1: "int3: 0000 [#1] PREEMPT SMP NOPTI").
    local die='^(Oops: )?(.+): [0-9a-f]{4} \[#[0-9]+\]'
    # The panic an oops ends in (oops=panic; "in interrupt" from an interrupt).
    local oops_panic='^Kernel panic - not syncing: Fatal exception( in interrupt)?$'
    # kernel BUG at FILE:LINE!; BUG: … (a NULL dereference; a soft lockup, as
    # "watchdog: BUG: soft lockup - CPU#N stuck for Ns!"); list corruption
    # (lib/list_debug.c); WARNING: CPU: N PID: N at FILE:LINE; any other panic.
    local other='^(kernel BUG at |([a-z_]+: )?BUG: |list_(add|del) corruption|WARNING: CPU: [0-9]+ PID: [0-9]+ at |Kernel panic - not syncing)'
    MARKER='' MARKER_AT='' MARKER_TEXT=''
    [[ $line =~ $ts ]] || return 1
    MARKER_AT=${BASH_REMATCH[1]}
    MARKER_TEXT=${BASH_REMATCH[2]}
    if [[ $MARKER_TEXT =~ $die ]]; then
        head=${BASH_REMATCH[2]#Oops: }
        if [ "$head" = int3 ]; then MARKER=int3; else MARKER=kernel; fi
    elif [[ $MARKER_TEXT =~ $oops_panic ]]; then
        MARKER=panic-after-oops
    elif [[ $MARKER_TEXT =~ $other ]]; then
        MARKER=kernel
    else
        return 1
    fi
}

# vm_console_verdict FILE: what ended a boot, from its serial console; prints one line:
#   clean                  no kernel failure
#   int3 WHERE             the emulator's oops (WHERE: time, RIP, task)
#   kernel LINE            the first line of a kernel failure (without its time stamp)
# An int3 oops is the emulator's only when it is the first failure the kernel reports
# (#1), nothing but the panic it ends in follows — or more int3 oopses of other vCPUs
# that ran into a stale int3 at the same moment — and the int3 is no longer in the
# kernel's code: in each oops's first "Code:" bytes the one before the trapping address
# (<..>) is not cc, so the kernel had finished its patch when the vCPU ran the stale
# int3. A stray int3 really in the code (cc <..>), in any of them, is a kernel failure.
vm_console_verdict() {
    local file=$1 line kind first='' first_kind='' rip='' comm='' at='' want_code=0
    local codes=()
    local re_rip='\] RIP: [0-9a-f]{4}:([^ ]+)' re_comm=' PID: ([0-9]+) Comm: ([^ ]+)'
    local re_code='\] Code: .*([0-9a-f]{2}) <[0-9a-f]{2}>'
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line//$'\r'/}
        if [ "$first_kind" = int3 ]; then
            [ -z "$rip" ] && [[ $line =~ $re_rip ]] && rip=${BASH_REMATCH[1]}
            [ -z "$comm" ] && [[ $line =~ $re_comm ]] && comm="${BASH_REMATCH[2]}[${BASH_REMATCH[1]}]"
            # The first Code: line after each int3 oops is the kernel's, where it trapped.
            if [ "$want_code" = 1 ] && [[ $line =~ $re_code ]]; then
                codes+=("${BASH_REMATCH[1]}")
                want_code=0
            fi
        fi
        vm_marker "$line" || continue
        kind=$MARKER
        if [ -z "$first_kind" ]; then
            first_kind=$kind
            first=$MARKER_TEXT
            at=$MARKER_AT
            # An int3 oops that is not the kernel's first (#1) follows another failure.
            [ "$kind" = int3 ] && [[ $first != *"[#1]"* ]] && first_kind=kernel
            [ "$kind" = panic-after-oops ] && first_kind=kernel
            [ "$first_kind" = kernel ] && break
            want_code=1
        elif [ "$kind" = int3 ]; then
            # Another vCPU ran into a stale int3 before the panic: judged by its code too.
            want_code=1
        elif [ "$kind" != panic-after-oops ]; then
            # Anything after the int3 oops but its panic is a failure of its own.
            first_kind=kernel
            first=$MARKER_TEXT
            break
        fi
    done <"$file"
    if [ "$first_kind" = int3 ]; then
        if [ ${#codes[@]} -eq 0 ] || [ "$want_code" = 1 ]; then
            first_kind=kernel first="$first (no Code: line to tell a stale int3 from one in the kernel's code)"
        elif [[ " ${codes[*]} " == *" cc "* ]]; then
            first_kind=kernel first="$first (the int3 is in the kernel's code: Code: … cc <..>)"
        fi
    fi
    case $first_kind in
    '') echo clean ;;
    int3) echo "int3 at ${at} s in ${rip:-?} (task ${comm:-?})" ;;
    *) echo "kernel $first" ;;
    esac
}

# vm_in_flight RESULTS: the check a boot was running when it ended (a BEGIN line with no
# result after it), or nothing.
vm_in_flight() {
    awk '$1 == "PINNERD-VM" && $2 == "BEGIN" { n = $3 }
         $1 == "PINNERD-VM" && ($2 == "CHECK" || $2 == "SETUP") && $3 == n { n = "" }
         END { if (n != "") print n }' "$1"
}

# vm_timing RESULTS: where a run's time in the VM went, from the BEGIN and END lines
# (seconds since boot) of RESULTS, all boots together; prints one line:
#   "time in the VM: 46 checks, 402 s; slowest: a 64 s, b 48 s, …" (the eight slowest),
# followed, for a check begun and never ended in a boot (cut off, or still running when
# the boot's time ran out), by "cut off: NAME, begun at T s in boot N".
vm_timing() {
    awk '$1 == "PINNERD-VM" && $2 == "START" { boot++ }
         $1 == "PINNERD-VM" && $2 == "BEGIN" { key = boot " " $3; start[key] = $4; order[++m] = key }
         $1 == "PINNERD-VM" && $2 == "END" && (boot " " $3) in start {
             key = boot " " $3; took = $4 - start[key]; delete start[key]
             n++; names[n] = $3; secs[n] = took; total += took
         }
         END {
             # The slowest first (a selection sort: a few dozen checks).
             for (i = 1; i <= n; i++)
                 for (j = i + 1; j <= n; j++)
                     if (secs[j] > secs[i]) { t = secs[i]; secs[i] = secs[j]; secs[j] = t; t = names[i]; names[i] = names[j]; names[j] = t }
             line = sprintf("time in the VM: %d checks, %d s", n, total + 0.5)
             for (i = 1; i <= n && i <= 8; i++) line = line sprintf("%s %s %d s", i == 1 ? "; slowest:" : ",", names[i], secs[i] + 0.5)
             print line
             for (i = 1; i <= m; i++)
                 if (order[i] in start) {
                     split(order[i], k, " ")
                     printf "cut off: %s, begun at %s s in boot %s\n", k[2], start[order[i]], k[1]
                     delete start[order[i]]
                 }
         }' "$1"
}

# vm_finished RESULTS: the checks with a result (CHECK lines) in RESULTS, comma-separated,
# in order, each once.
vm_finished() {
    awk '$1 == "PINNERD-VM" && $2 == "CHECK" && !seen[$3]++ { printf "%s%s", sep, $3; sep = "," }' "$1"
}

# vm_boots: boots (vm_boot EXTRA_KERNEL_ARGS, the caller's: it writes $run/console.log and
# $run/results.log and returns qemu's status) until a boot is not ended by the emulator's
# int3 oops or VM_MAX_REBOOTS reboots are spent. Keeps each boot's console and results
# ($run/console-N.log, $run/results-N.txt), all results in $run/results.txt (\r removed),
# the last console as $run/console.log, and one line per boot that ended early in
# $run/boots.txt. VM_DONE (optional) names checks to take as finished before the first
# boot. Sets:
#   VM_RC         qemu's status in the last boot
#   VM_BOOTS      how many boots ran
#   VM_KERNEL     the kernel's failure (vm_console_verdict's line after "kernel "), or empty
#   VM_IN_FLIGHT  the check that failure cut off, or empty
#   VM_EMULATOR   set when the last boot too was ended by the int3 oops (reboots spent)
vm_boots() {
    local boot=0 verdict finished flight
    : >"$run/results.txt"
    : >"$run/boots.txt"
    VM_KERNEL='' VM_IN_FLIGHT='' VM_EMULATOR='' VM_RC=0
    while :; do
        boot=$((boot + 1))
        finished=$(vm_finished "$run/results.txt")
        # VM_DONE: checks taken as finished before the first boot (PINNERD_VM_DONE).
        [ -n "${VM_DONE:-}" ] && finished=$VM_DONE${finished:+,$finished}
        : >"$run/console.log"
        : >"$run/results.log"
        VM_RC=0
        vm_boot "${finished:+pinnerd_vm.done=$finished}" || VM_RC=$?
        VM_BOOTS=$boot
        tr -d '\r' <"$run/results.log" >"$run/results-$boot.txt"
        cp "$run/console.log" "$run/console-$boot.log"
        cat "$run/results-$boot.txt" >>"$run/results.txt"
        verdict=$(vm_console_verdict "$run/console-$boot.log")
        flight=$(vm_in_flight "$run/results-$boot.txt")
        case $verdict in
        clean) return 0 ;;
        kernel\ *)
            VM_KERNEL=${verdict#kernel }
            VM_IN_FLIGHT=$flight
            echo "boot $boot: the guest kernel failed${flight:+ during $flight}: $VM_KERNEL" >>"$run/boots.txt"
            return 0
            ;;
        esac
        # The emulator's int3 oops.
        verdict=${verdict#int3 }
        if grep -q '^PINNERD-VM DONE ' "$run/results-$boot.txt"; then
            echo "boot $boot: the emulated kernel oopsed on an int3 $verdict after the checks finished; nothing to run again" >>"$run/boots.txt"
            return 0
        fi
        if [ "$boot" -gt "${VM_MAX_REBOOTS:-3}" ]; then
            VM_EMULATOR=1
            echo "boot $boot: the emulated kernel oopsed on an int3 $verdict${flight:+ during $flight}; no reboot left (${VM_MAX_REBOOTS:-3} spent)" >>"$run/boots.txt"
            return 0
        fi
        echo "boot $boot: the emulated kernel oopsed on an int3 $verdict${flight:+ during $flight}, $(grep -c '^PINNERD-VM CHECK ' "$run/results-$boot.txt") checks finished in this boot; booting again for the rest" >>"$run/boots.txt"
    done
}

# vm_summary: prints every check once, in the order they finished, with its verdict
# (a check run again as SETUP in a resumed boot counts only when it failed there; the
# check a kernel failure cut off fails with it), then each boot that ended early. Sets
# VM_PASS, VM_FAIL, VM_SKIP and the arrays VM_FAILED and VM_SKIPPED.
vm_summary() {
    local _p kind name verdict detail
    local -A seen=() seen_setup=()
    VM_PASS=0 VM_FAIL=0 VM_SKIP=0 VM_FAILED=() VM_SKIPPED=()
    while read -r _p kind name verdict detail; do
        if [ "$kind" = SETUP ]; then
            [ "$verdict" = FAIL ] && [ -z "${seen_setup[$name]:-}" ] || continue
            seen_setup[$name]=1
            detail="run again for a later check after a reboot, it failed: $detail"
        elif [ -n "${seen[$name]:-}" ]; then
            continue
        else
            seen[$name]=1
        fi
        printf '%-28s %s  %s\n' "$name" "$verdict" "$detail"
        case $verdict in
        PASS) VM_PASS=$((VM_PASS + 1)) ;;
        SKIP)
            VM_SKIP=$((VM_SKIP + 1))
            VM_SKIPPED+=("$name")
            ;;
        *)
            VM_FAIL=$((VM_FAIL + 1))
            VM_FAILED+=("$name")
            ;;
        esac
    done < <(grep -E '^PINNERD-VM (CHECK|SETUP) ' "$run/results.txt")
    if [ -n "$VM_KERNEL" ] && [ -n "$VM_IN_FLIGHT" ]; then
        printf '%-28s %s  %s\n' "$VM_IN_FLIGHT" FAIL "the guest kernel failed during it: $VM_KERNEL"
        VM_FAIL=$((VM_FAIL + 1))
        VM_FAILED+=("$VM_IN_FLIGHT")
    fi
    if [ -s "$run/boots.txt" ]; then
        echo "boots: $VM_BOOTS"
        sed 's/^/  /' "$run/boots.txt"
    fi
}
