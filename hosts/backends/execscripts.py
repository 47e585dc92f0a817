"""The shell scripts every command of the per-command paths runs inside (Docker exec, plain
SSH channels where the host has no python3): the exec wrapper and the kill sweep, and the
reader of the wrapper's own failure line (Notice).

Both are POSIX sh, run as `sh -c SCRIPT NAME ARGS...`, so nothing has to be on the machine
but a shell and coreutils (timeout, base64).
"""

from __future__ import annotations

import re

# How the wrapper reports its own failures (the command could not start, or what it left
# behind could not be stopped): this exit status, and on stderr one line
# `\nsandhub-exec <marker> <kind>: <reason>\n`, written in one write() (under PIPE_BUF, so no
# other writer's bytes land inside it). Neither alone tells the wrapper from a command that
# exits 125, or prints such a line; the marker makes an accident impossible, and a command
# that forges the line on purpose only turns its own result into an error.
WRAPPER_FAILED = 125
NOTICE_PREFIX = "sandhub-exec"
NOTICE_START = "start"  # the command never ran
NOTICE_SWEEP = "sweep"  # it ran; processes it left behind are still alive

# The sweep, shared by the wrapper and KILL_MARKED: `sweep WHAT SPARE_CS` finds the
# processes WHAT names, stops each one (SIGSTOP), and once a round finds none that is not
# stopped yet, kills them all (SIGKILL) and waits until they are reaped. WHAT is
# - output: what holds this shell's stdout or stderr pipe (the engine keeps the exec's stream
#   open while anything does, for up to 2 s after this shell exits);
# - all: those, everything in this shell's session, and every process carrying the marker
#   $mark in its environment (that catches what left the session, e.g. with setsid);
# - marked: only the processes carrying the marker.
# It forks nothing (glob, `test`, read, builtin kill; dash exits on a failed fork), so it
# works when a fork bomb has used up the pids limit, and it never sleeps (sleep would fork):
# time comes from /proc/uptime. It returns 0 once a round is quiet, 1 if processes of ours
# are still alive after _SWEEP_LIMIT_CS centiseconds; killed ones that are zombies by then
# are left to their reaper (an image whose init does not reap would keep them forever).
#
# Why stop first: killed processes free their pids, and a fork bomb's other members (bash
# retries a failed fork every 1-16 s) fill them again at once. Killing in rounds was a race
# that the bomb won on a loaded host or in a sandbox with little CPU (the bomb and the sweep
# share the sandbox's CPU): rounds took seconds, the sweep gave up with the bomb alive, the
# engine ended the stream 2 s after the wrapper exited, and the exec came back with the
# command's own status (0) while the bomb kept every pid, so that the next command could not
# fork and came back empty. A stopped process forks nothing and frees nothing, and uses no
# CPU; once all of them are stopped, killing them ends the bomb.
#
# A round is quiet only if it found no process of ours that was not stopped yet, no process
# that is new since the previous listing had gone (or become a zombie) before it could be
# looked at, and every process killed, and every zombie child of one, has been reaped. Each
# condition closes a race:
# - a listed process may fork and exit before it is tested; its child is in no listing yet.
#   A process that was already listed in the previous round was tested there and stopped,
#   if it was ours, so only a new one that is gone when tested can have passed the pipes on
#   unseen. A spared process (below) is not stopped, so it is left out of the listing: if it
#   is gone in the next round, that round is not quiet either;
# - killed processes and their zombie children stay charged to the pids limit until reaped
#   (tini, or their parent): the next exec could not fork if we returned earlier;
# - `cmd >log &` holds the pipes from the fork until its redirection, a millisecond of CPU
#   that under load may come late: in output mode, a holder that is running or runnable (R)
#   or in uninterruptible sleep (D) and has had less than _SWEEP_SPARE_CPU_MS of CPU in all
#   is spared, for up to SPARE_CS centiseconds. Counting its CPU rather than the time that
#   passed keeps a starved child safe on a loaded host, and still stops soon a child that
#   computes on with the pipes. A holder that is sleeping (S) or stopped is waiting on
#   something else and is stopped at once. More than _SWEEP_SPARE_MAX holders in one round
#   are no `cmd >log &` but a flood, which must not keep the CPU: sparing ends there.
# Cost: dash's read takes one byte per system call, so a round reads no file of a process
# unless it must (a holder is found by `test -ef`, a zombie by its missing /proc/PID/exe);
# reading every /proc/PID/stat made a round over 256 processes cost ~180 ms of CPU.
# The session is only used if this shell leads one (the engine makes each exec a session
# leader); the fields of /proc/PID/stat are read after the command name's last ") ".
_SWEEP_SPARE_CPU_MS = 100
_SWEEP_SPARE_CS = 100
_SWEEP_SPARE_MAX = 8
_SWEEP_LIMIT_CS = 1000
SWEEP_LIMIT = _SWEEP_LIMIT_CS / 100  # seconds; the caller's own deadline leaves room
_SWEEP = r"""
clock() { read -r now _ < /proc/uptime; now=${now%.*}${now#*.}; }
marked() {  # $1: /proc/PID. dash's read drops the NULs between variables, hence *...*
    [ -n "$mark" ] || return 1
    while read -r env || [ -n "$env" ]; do
        case $env in *"SANDHUB_EXEC_ID=$mark"*) return 0 ;; esac
    done 2>/dev/null < "$1/environ"
    return 1
}
fields() {  # $1: /proc/PID -> state ppid session, from after the command name's last ") "
    { read -r line < "$1/stat"; } 2>/dev/null || return 1
    set -f; set -- ${line##*) }; set +f
    state=$1 ppid=$2 session=$4
}
ours() {  # $1: /proc/PID of a process that still runs a program
    case $what in
    marked) marked "$1" ;;
    *)
        [ "$1/fd/1" -ef "/proc/$me/fd/1" ] || [ "$1/fd/2" -ef "/proc/$me/fd/2" ] || {
            [ "$what" = all ] && { { fields "$1" && [ "$session" = "$sid" ]; } || marked "$1"; }
        } ;;
    esac
}
young() {  # $1: /proc/PID running or runnable (R) or in disk sleep (D), with little CPU yet
    state=
    while read -r key state _; do [ "$key" != State: ] || break; done 2>/dev/null < "$1/status"
    case $state in R|D) ;; *) return 1 ;; esac
    ran=0; { read -r ran _ < "$1/schedstat"; } 2>/dev/null
    [ "$ran" -lt CPU_NS ]
}
sweep() {
    what=$1; clock; spare=$((now + $2)) end=$((now + LIMIT_CS))
    sid=; ! fields "/proc/$me" || [ "$session" != "$me" ] || sid=$me
    listed= stopped= killed=
    while :; do
        cur= held= dying= grew= alive= found=0
        for d in /proc/[0-9]*; do
            p=${d#/proc/}
            [ "$p" = "$me" ] && continue
            case $killed in *" $p "*)
                cur="$cur $p " dying="$dying $p "; [ ! -e "$d/exe" ] || alive=1; continue ;;
            esac
            case $stopped in *" $p "*) cur="$cur $p " held="$held $p " alive=1; continue ;; esac
            if [ ! -e "$d/exe" ]; then
                # Gone, exiting or a zombie. Ours if its parent is (reaped once that dies), or
                # after a timeout if it is in our session (`timeout` killed it).
                if ! fields "$d"; then
                    case $listed in *" $p "*) ;; *) grew=1 ;; esac
                    continue
                fi
                cur="$cur $p "
                if case " $stopped$killed " in *" $ppid "*) ;; *) false ;; esac ||
                    { [ "$what" = all ] && [ "$session" = "$sid" ]; }; then
                    dying="$dying $p "; [ "$state" = Z ] || alive=1
                else
                    case $listed in *" $p "*) ;; *) grew=1 ;; esac
                fi
                continue
            fi
            ours "$d" || { cur="$cur $p "; continue; }
            grew=1 alive=1 found=$((found + 1))
            if [ "$now" -lt "$spare" ]; then
                # A flood of them is no `cmd >log &`, and must not keep the CPU: spare no more.
                if [ "$found" -gt SPARE_MAX ]; then spare=0
                # Spared, and left out of the listing: it may fork and be gone next round.
                elif young "$d"; then continue
                fi
            fi
            kill -STOP "$p" 2>/dev/null; cur="$cur $p " held="$held $p "
        done
        stopped=$held killed=$dying
        if [ -z "$grew" ]; then
            # Nothing of ours can fork any more: kill what is stopped, then wait for the reaping.
            [ -n "$stopped$killed" ] || return 0
            for p in $stopped; do kill -KILL "$p" 2>/dev/null; done
            killed="$killed$stopped" stopped=
        fi
        clock; [ "$now" -lt "$end" ] || { [ -z "$alive" ]; return; }
        listed=$cur
    done
}
notice() {  # $1 kind, $2 reason: the wrapper's own failure, for Notice
    printf '\nNOTICE %s %s: %s\n' "$mark" "$1" "$2" >&2
    exit FAILED
}
"""

# Runs every command: sh -c WRAPPER sandhub-exec CWD TIMEOUT KILL_AFTER ARGV...
# - cd in here so a bad cwd is an ordinary failed command with a message, like in a shell;
# - `timeout` puts the command in its own process group and signals the whole group, so
#   children backgrounded with `&` die with it;
# - in every case, whatever still holds our stdout/stderr pipes is killed: it would keep the
#   stream open (and the caller waiting) although the command is done. This needs no marker,
#   so `env -i` does not escape it. Processes that redirected their output
#   (`nohup server >log 2>&1 &`) keep running;
# - after a timeout, everything else of the command is killed too: its session, and what
#   carries this exec's marker (that catches what left the session, e.g. with setsid);
# - the wrapper returns only once what it killed is reaped; if it cannot stop it, or cannot
#   start the command at all (dash exits on a failed fork, running the EXIT trap), it says
#   so with WRAPPER_FAILED and a notice rather than passing for the command's own status.
WRAPPER = (
    _SWEEP
    + r"""
cd "$1" || exit 126
t=$2; k=$3; shift 3
s=${SANDHUB_STDIN-}; unset SANDHUB_STDIN
me=$$ mark=${SANDHUB_EXEC_ID-}
why="the command could not start: no new process could be created in the sandbox"
trap 'notice START "$why (its process or memory limit is used up)"' EXIT
if [ -n "$s" ]; then
    printf %s "$s" | base64 -d | timeout -k "$k" "$t" "$@"
else
    timeout -k "$k" "$t" "$@"
fi
rc=$?
trap - EXIT
case $rc in
124|137) sweep all 0 ;;
*) sweep output SPARE_CS ;;
esac || notice SWEEP "the command ended (status $rc), but processes it left behind could \
not be stopped within LIMIT_S s"
exit $rc
"""
)

_SWEPT_STATUS = re.compile(r"^the command ended \(status (\d+)\), but processes")


def status_before_the_sweep(reason: str) -> int | None:
    """The command's own exit status in a NOTICE_SWEEP reason (the wrapper above writes it)."""
    found = _SWEPT_STATUS.match(reason)
    return int(found.group(1)) if found else None


# Kills every process whose environment carries the marker given as $1, and waits until
# they are reaped (the caller's deadline passed with the command's stream still open).
KILL_MARKED = (
    _SWEEP
    + r"""
me=$$ mark=$1
[ -n "$mark" ] || exit 2
sweep marked 0
"""
)


def _fill(script: str) -> str:
    return (
        script.replace("SPARE_CS", str(_SWEEP_SPARE_CS))
        .replace("LIMIT_CS", str(_SWEEP_LIMIT_CS))
        .replace("LIMIT_S", f"{SWEEP_LIMIT:g}")
        .replace("CPU_NS", str(_SWEEP_SPARE_CPU_MS * 1_000_000))
        .replace("SPARE_MAX", str(_SWEEP_SPARE_MAX))
        .replace("NOTICE", NOTICE_PREFIX)
        .replace("FAILED", str(WRAPPER_FAILED))
        .replace("START", NOTICE_START)
        .replace("SWEEP", NOTICE_SWEEP)
    )


WRAPPER = _fill(WRAPPER)
KILL_MARKED = _fill(KILL_MARKED)


class Notice:
    """Finds the wrapper's own failure line in a command's stderr, as it streams past.

    The line (WRAPPER_FAILED) is `\\n<prefix> <marker> <kind>: <reason>\\n`, written
    at once; it is looked for in the stream rather than in the kept output, where a chatty
    leftover process could push it out of the tail.
    """

    _LINE = 4096  # the wrapper's line is a few hundred bytes; a longer one is not its

    def __init__(self, marker: str) -> None:
        self._start = f"\n{NOTICE_PREFIX} {marker} ".encode()
        self._pending = b""  # a possible start of the line, or the line so far
        self.kind: str | None = None
        self.reason: str | None = None

    def feed(self, chunk: bytes) -> None:
        if self.reason is not None:
            return
        data = self._pending + chunk
        at = data.find(self._start)
        if at < 0:
            self._pending = data[-(len(self._start) - 1) :]  # the line may start at the end
            return
        end = data.find(b"\n", at + len(self._start))
        if end < 0:
            self._pending = data[at : at + self._LINE]
            return
        line = data[at + len(self._start) : end].decode("utf-8", "replace")
        kind, _, reason = line.partition(": ")
        self.kind, self.reason = kind, reason
