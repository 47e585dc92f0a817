"""The shell scripts every command runs inside: the exec wrapper and the kill sweep.

Both are POSIX sh, run as `sh -c SCRIPT NAME ARGS...`, so nothing has to be in the image but
a shell, coreutils and grep.
"""

from __future__ import annotations

# Runs every command: sh -c WRAPPER sandhub-exec CWD TIMEOUT KILL_AFTER ARGV...
# - cd in here so a bad cwd is an ordinary failed command with a message, like in a shell;
# - `timeout` puts the command in its own process group and signals the whole group, so
#   children backgrounded with `&` die with it;
# - in every case, whatever still holds our stdout/stderr pipes is killed: it would keep the
#   stream open (and the caller waiting) although the command is done. This needs no marker,
#   so `env -i` does not escape it. Processes that redirected their output
#   (`nohup server >log 2>&1 &`) keep running;
# - after a timeout, every other process carrying this exec's marker is killed too (that
#   catches what left the group, e.g. with setsid).
#
# The pipe sweep forks nothing (glob, `test -ef`, builtins only; dash exits on a failed fork),
# so it works when a fork bomb has used up the pids limit. It lists /proc, tests each process,
# and goes round again until a round is quiet: nothing held the pipes, every process that is
# new since the previous listing could be looked at, no process was spared in the previous
# round, and every process it killed has been reaped. Each condition closes a race seen under
# load:
# - a listed process may fork and exit before it is tested; its child is in no listing yet.
#   A fork bomb's processes do just that, so "found nobody" alone ended the sweep while the
#   bomb carried on in processes no round had listed. A process that was already listed in
#   the previous round was tested there (and killed, if it held the pipes), so only a new
#   one that is gone or exiting when tested can have passed the pipes on unseen;
# - killed processes stay zombies, charged to the pids limit, until tini reaps them: exiting
#   before that leaves the next exec unable to fork;
# - `cmd >log &` holds the pipes from the fork until its redirection, a millisecond of CPU
#   that under load may come late: a holder that is running or runnable (R) or in
#   uninterruptible sleep (D) and has had less than _SWEEP_SPARE_CPU_MS of CPU in all is
#   spared, for up to _SWEEP_SPARE_CS centiseconds after the command ended (not at all after
#   a timeout). Counting its CPU rather than the time that passed keeps a starved child safe
#   on a loaded host, and still kills soon a child that computes on with the pipes. A holder
#   that is sleeping (S) or stopped is waiting on something else and is killed at once.
# The sweep gives up after _SWEEP_LIMIT_CS centiseconds, within the caller's _CLIENT_GRACE
# (exec.py).
# Time comes from /proc/uptime (read, no fork); rounds do not sleep, as sleep would fork.
_SWEEP_SPARE_CPU_MS = 100
_SWEEP_SPARE_CS = 100
_SWEEP_LIMIT_CS = 300
WRAPPER = r"""
cd "$1" || exit 126
t=$2; k=$3; shift 3
s=${SANDHUB_STDIN-}; unset SANDHUB_STDIN
if [ -n "$s" ]; then
    printf %s "$s" | base64 -d | timeout -k "$k" "$t" "$@"
else
    timeout -k "$k" "$t" "$@"
fi
rc=$?
me=$$
clock() { read -r now _ < /proc/uptime; now=${now%.*}${now#*.}; }
sweep_pipes() {  # $1: centiseconds during which young running holders are spared
    clock; spare=$((now + $1)) end=$((now + LIMIT))
    listed= killed= spared=
    while :; do
        busy=$spared spared= cur= dead=
        for d in /proc/[0-9]*; do
            p=${d#/proc/}
            [ "$p" = "$me" ] && continue
            cur="$cur $p "
            case $killed in *" $p "*) dead="$dead $p "; busy=1; continue ;; esac
            if [ "$d/fd/1" -ef "/proc/$me/fd/1" ] || [ "$d/fd/2" -ef "/proc/$me/fd/2" ]; then
                busy=1
                if [ "$now" -lt "$spare" ]; then
                    { read -r line < "$d/stat"; } 2>/dev/null || continue
                    ran=0; { read -r ran _ < "$d/schedstat"; } 2>/dev/null
                    state=${line##*) }
                    case $state in
                    [RD]*) [ "$ran" -ge CPU_NS ] || { spared=1; continue; } ;;
                    esac
                fi
                kill -KILL "$p" 2>/dev/null; dead="$dead $p "
            elif [ ! -r "$d/fd" ]; then
                # Gone, exiting or a zombie by now: if it is new since the last listing, it
                # may have been a holder that forked and exited between the listing and here.
                case $listed in *" $p "*) ;; *) busy=1 ;; esac
            fi
        done
        [ -n "$busy" ] || return 0
        clock; [ "$now" -lt "$end" ] || return 1
        listed=$cur killed=$dead
    done
}
case $rc in
124|137)
    sweep_pipes 0
    for f in $(grep -lzxF "SANDHUB_EXEC_ID=$SANDHUB_EXEC_ID" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = "$me" ] || kill -KILL "$p" 2>/dev/null
    done ;;
*)
    sweep_pipes SPARE ;;
esac
exit $rc
"""
WRAPPER = (
    WRAPPER.replace("SPARE", str(_SWEEP_SPARE_CS))
    .replace("LIMIT", str(_SWEEP_LIMIT_CS))
    .replace("CPU_NS", str(_SWEEP_SPARE_CPU_MS * 1_000_000))
)

# Kills every process whose environment carries the marker given as $1, in rounds until none
# is left (a fork bomb keeps making more).
KILL_MARKED = r"""
round=0
while [ $round -lt 50 ]; do
    round=$((round + 1))
    pids=$(grep -lzxF "SANDHUB_EXEC_ID=$1" /proc/[0-9]*/environ 2>/dev/null) || break
    for f in $pids; do
        p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null
    done
done
exit 0
"""
