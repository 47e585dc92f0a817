"""The shell scripts of background jobs (Docker and SSH backends): launcher, runner, poll, cancel.

All POSIX sh with coreutils; the parts that must work while a fork bomb holds the pids limit
use shell builtins only (dash exits on a failed fork).
"""

from __future__ import annotations

import math
import re

from hosts.backends.base import BackendError, JobStatus

KILL_AFTER = 2  # seconds between SIGTERM and SIGKILL, for timeouts and cancels alike
# The end-of-job sweep, as the exec wrapper's (execscripts.py): young running holders of the
# output are spared for up to _SPARE_CS centiseconds while under _SPARE_CPU_MS of CPU; the
# sweep gives up after _LIMIT_CS; the output keeper is waited for up to _KEEPER_CS.
_SPARE_CPU_MS = 100
_SPARE_CS = 100
_LIMIT_CS = 300
_KEEPER_CS = 1000
_TOOLS = "PATH=/usr/local/bin:/usr/bin:/bin"  # whatever PATH the job's environment sets

# Signal $sig (empty: only look) to the job's processes, except this shell ($me), zombies
# (dead already; their parent, tini at worst, reaps them) and the job's output keeper ($cap,
# set in the runner only: it outlives the kill rounds after a timeout, so that the end of the
# output is kept); `found` is set if there were any. sweep_session takes the job's session
# ($sid) and uses shell builtins only: dash exits on a failed fork, and a fork bomb in the job
# keeps the pids limit used up. sweep_marked takes processes carrying the marker (those that
# left the session) and forks a grep: it runs once the session is empty, when forks succeed.
_SWEEP = r"""
keeper() {  # $1 pid, $2 its parent: split, or the filter it runs
    [ -n "$cap" ] && { [ "$1" = "$cap" ] || [ "$2" = "$cap" ]; }
}
sweep_session() {
    found=
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [ "$p" = "$me" ] && continue
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        # Fields after the command name, which may itself hold ") ": state ppid pgrp session.
        set -f; set -- ${line##*) }; set +f
        [ "$1" != Z ] && [ "$4" = "$sid" ] || continue
        keeper "$p" "$2" && continue
        found=1; [ -z "$sig" ] || kill "-$sig" "$p" 2>/dev/null
    done
}
term_groups() {  # SIGTERM to each process group of the session at once (see _CANCEL)
    groups=
    for d in /proc/[0-9]*; do
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        set -f; set -- ${line##*) }; set +f
        [ "$1" != Z ] && [ "$4" = "$sid" ] || continue
        case " $groups " in *" $3 "*) continue ;; esac
        groups="$groups $3"; kill -s TERM -- "-$3" 2>/dev/null
    done
}
sweep_marked() {
    found=
    for f in $(grep -lzxF "SANDHUB_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = "$me" ] && continue
        # Gone by now (grep itself, the subshell around it) or a zombie: nothing to kill.
        { read -r line < "/proc/$p/stat"; } 2>/dev/null || continue
        set -f; set -- ${line##*) }; set +f
        [ "$1" != Z ] || continue
        keeper "$p" "$2" && continue
        found=1; [ -z "$sig" ] || kill "-$sig" "$p" 2>/dev/null
    done
}
kill_rounds() {  # SIGKILL in rounds until one finds nobody (a fork bomb keeps making more)
    sig=KILL; round=0
    while [ $round -lt 500 ]; do
        round=$((round + 1)); sweep_session
        [ -n "$found" ] || break
    done
    [ -z "$found" ] || return 1
    round=0
    while [ $round -lt 50 ]; do
        round=$((round + 1)); sweep_marked
        [ -n "$found" ] || return 0
    done
    return 1
}
"""

# split's filter, once per part of the output after its head (FILE=<dir>/log.<12 digits>):
# part n (n >= 2) removes part n - 2, so the log's last one to two parts are kept. Builtins
# only, apart from rm and cat.
_KEEP_FILTER = r"""
n=${FILE##*.}; n=${n#"${n%%[!0]*}"}; n=${n:-0}
if [ "$n" -ge 2 ]; then
    o=$((n - 2)); while [ ${#o} -lt 12 ]; do o=0$o; done
    rm -f "${FILE%.*}.$o"
fi
exec cat >"$FILE"
"""

# The end-of-job sweep: kill what still holds the job's output ($1) as its stdout or stderr,
# in rounds until one is quiet: nothing held it, nothing that is new since the last listing
# had gone unseen (it may have passed the output on to a child no round listed yet), and
# every process killed is gone (a zombie still counts against the pids limit). A holder that
# is young and running is spared for $2 centiseconds (`cmd >log &` holds the output from
# the fork to its redirection). Time from /proc/uptime; no sleep, as sleep would fork.
_SWEEP_OUTPUT = r"""
clock() { read -r now _ < /proc/uptime; now=${now%.*}${now#*.}; }
sweep_output() {
    clock; spare=$((now + $2)) end=$((now + LIMIT_CS))
    listed= killed= spared=
    while :; do
        busy=$spared spared= cur= dead=
        for d in /proc/[0-9]*; do
            p=${d#/proc/}
            [ "$p" = "$me" ] && continue
            cur="$cur $p "
            case $killed in *" $p "*) dead="$dead $p "; busy=1; continue ;; esac
            if [ "$d/fd/1" -ef "$1" ] || [ "$d/fd/2" -ef "$1" ]; then
                busy=1
                if [ "$now" -lt "$spare" ]; then
                    { read -r line < "$d/stat"; } 2>/dev/null || continue
                    ran=0; { read -r ran _ < "$d/schedstat"; } 2>/dev/null
                    case ${line##*) } in
                    [RD]*) [ "$ran" -ge CPU_NS ] || { spared=1; continue; } ;;
                    esac
                fi
                kill -KILL "$p" 2>/dev/null; dead="$dead $p "
            elif [ ! -r "$d/fd" ]; then
                case $listed in *" $p "*) ;; *) busy=1 ;; esac
            fi
        done
        [ -n "$busy" ] || return 0
        clock; [ "$now" -lt "$end" ] || return 1
        listed=$cur killed=$dead
    done
}
keeper_done() {  # the keeper ends at the output's end of file; one that does not is killed
    clock; end=$((now + KEEPER_CS))
    while { read -r line < "/proc/$cap/stat"; } 2>/dev/null; do
        case ${line##*) } in Z*) break ;; esac
        clock; [ "$now" -lt "$end" ] || { kill -KILL "$cap" 2>/dev/null; break; }
    done
    wait "$cap" 2>/dev/null
}
"""

# The sandbox's OOM kill count into $oom ("" where unknown), as the agent reads it (inside/
# oom.py): the memory cgroup of /proc/self/cgroup at its own path, or the isolated SSH
# sandbox's (sandhub/<id>) where a cgroup namespace hides the path, or the root of a
# container's private view. Builtins only: it runs after a kill, maybe with the pids limit full.
_OOM_COUNT = r"""
oom_count() {
    oom=
    while IFS=: read -r h c p; do
        case "$h:$c" in
        0:) set -- /sys/fs/cgroup memory.events ;;
        *:*memory*) set -- /sys/fs/cgroup/memory memory.oom_control ;;
        *) continue ;;
        esac
        for d in "${p%/}" "${SANDHUB_SANDBOX_ID:+/sandhub/$SANDHUB_SANDBOX_ID}" /; do
            [ -n "$d" ] && [ -r "$1${d%/}/$2" ] || continue
            while read -r k v; do [ "$k" = oom_kill ] && oom=$v; done < "$1${d%/}/$2"
            [ -z "$oom" ] || return 0
        done
    done < /proc/self/cgroup
}
"""
# Said after the output of a job the OOM killer took (137 alone does not say why).
OOM_JOB_NOTE = (
    "sandhub: the command was killed because the sandbox ran out of memory; "
    "use a bigger sandbox or less memory"
)

# The job itself: sh -c RUNNER sandhub-job DIR CWD LIMIT KEEP ARGV..., as session leader.
# With KEEP > 0 its output goes through a fifo to the output keeper: `head` writes the first
# KEEP bytes to `log` (unbuffered, so the log grows as the job prints), then
# `split` writes the rest in parts of KEEP bytes, of which only the last two are kept (see
# _KEEP_FILTER): a job's log takes at most 3 * KEEP bytes of disk, however much it prints.
_RUN = r"""
dir=$1 cwd=$2 limit=$3 keep=$4; shift 4
me=$$ sid=$$ job=$SANDHUB_JOB_ID cap= out=$dir/log
printf '%s %s\n' "$$" "$(date +%s.%N)" > "$dir/pid.tmp" && mv -f "$dir/pid.tmp" "$dir/pid"
# A SIGTERM from cancel must not end this shell before the command: with a trap set, sh runs
# it only once the foreground command has ended, so the exit code is still written.
trap : TERM
# The fifo is opened read-write first (that never blocks), so neither open below waits for
# the other side, and a keeper that failed to start cannot hang the job.
if [ "$keep" -gt 0 ] && TOOLS mkfifo "$dir/out" 2>/dev/null && exec 9<>"$dir/out"; then
    {
        export TOOLS SHELL=/bin/sh
        # GNU head writes through stdio: to a file, only when its buffer fills or it ends,
        # so a running job's log would stay empty. stdbuf makes it write as it reads.
        if command -v stdbuf >/dev/null; then
            stdbuf -o0 head -c "$keep" >>"$dir/log"
        else
            head -c "$keep" >>"$dir/log"
        fi
        exec split -a 12 -d -b "$keep" --filter='KEEP_FILTER' - "$dir/log."
    } <"$dir/out" >/dev/null 2>&1 9>&- &
    cap=$! out=$dir/out
    exec >"$out" 2>&1 9>&-
fi
oom_count; oom0=$oom
if cd "$cwd"; then
    # The command's stderr is the log; this shell's own is /dev/null while it waits, or it
    # would add "Terminated" to the log of a cancelled job (racing the cancel's kill of the
    # keeper: sometimes there, sometimes not). The log goes to the command in a subshell that
    # execs it: a redirection on the command itself would be the waiting shell's stderr too.
    exec 8>&2 2>/dev/null
    if [ "$limit" = 0 ]; then (exec 2>&8 8>&-; exec "$@")
    else (exec 2>&8 8>&-; exec timeout -k "$KILL_AFTER" "$limit" "$@"); fi
    rc=$?
    exec 2>&8 8>&-
else
    rc=126
fi
# What escaped timeout's process group dies too; then, as for a foreground command, what the
# command left running with the job's output as its own (a finished job's log would keep
# growing, a fork bomb would live on). What redirected its output elsewhere (a server started
# with nohup ... >file &) stays.
if [ "$rc" = 137 ] && [ -n "$oom0" ]; then
    oom_count
    case $oom0:$oom in
    *[!0-9:]*|:*|*:) ;;
    *) [ "$oom" -le "$oom0" ] || printf '\n%s\n' "OOM_NOTE" >&2 ;;
    esac
fi
case $rc in
124|137) kill_rounds; sweep_output "$out" 0 ;;
*) sweep_output "$out" SPARE_CS ;;
esac
if [ -n "$cap" ]; then exec >/dev/null 2>&1; keeper_done; fi
printf '%s %s\n' "$rc" "$(date +%s.%N)" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
"""
# One script, so every placeholder is replaced in the sweeps as well.
RUNNER = (
    (_SWEEP + _SWEEP_OUTPUT + _OOM_COUNT + _RUN)
    .replace("OOM_NOTE", OOM_JOB_NOTE)
    .replace("$KILL_AFTER", str(KILL_AFTER))
    .replace("KEEP_FILTER", _KEEP_FILTER.strip())
    .replace("TOOLS", _TOOLS)
    .replace("LIMIT_CS", str(_LIMIT_CS))
    .replace("KEEPER_CS", str(_KEEPER_CS))
    .replace("SPARE_CS", str(_SPARE_CS))
    .replace("CPU_NS", str(_SPARE_CPU_MS * 1_000_000))
)

# sh -c START sandhub-start JOB DIR CWD LIMIT KEEP RUNNER ARGV...; prints the runner's pid. It
# waits for the runner's pid file without forking (the job may be a fork bomb that has used
# up the pids limit by then); $! is the runner's pid too (a child of a shell without job
# control is no group leader, so setsid need not fork), for when the file is slow to come.
START = r"""
job=$1 dir=$2 cwd=$3 limit=$4 keep=$5 runner=$6; shift 6
mkdir -p "${dir%/*}" && mkdir "$dir" || { echo "cannot create $dir" >&2; exit 1; }
unset SANDHUB_EXEC_ID
SANDHUB_JOB_ID=$job; export SANDHUB_JOB_ID
setsid nohup sh -c "$runner" sandhub-job "$dir" "$cwd" "$limit" "$keep" "$@" \
    </dev/null >"$dir/log" 2>&1 &
pid=$! i=0
while [ ! -s "$dir/pid" ] && [ $i -lt 50000 ]; do i=$((i + 1)); done
[ -s "$dir/pid" ] && read -r pid _ < "$dir/pid"
echo "$pid"
"""

# sh -c POLL sandhub-poll DIR JOB PID TAIL_BYTES KEEP: a status line on stderr, the log's tail
# on stdout. Alive is read before the exit file: the runner writes that file before it exits,
# so "not alive and no exit file" really means it vanished. The job's files are the sandbox
# user's, who may write anything into them: at most a line of each is read, and fields
# that are not numbers are passed on as "bad" (the exit code) or "-".
POLL = r"""
dir=$1 job=$2 pid=$3 n=$4 keep=${5:-0}
alive=0 code=- end=- start=- cancelled=0 size=0 files=$dir/log last= prev=
grep -qzxF "SANDHUB_JOB_ID=$job" "/proc/$pid/environ" 2>/dev/null && alive=1
# Before the runner has written its pid file it may not have exec'd yet (its environ is still
# the launcher's): the process being there is enough then.
[ -e "$dir/pid" ] || [ ! -d "/proc/$pid" ] || alive=1
if [ -f "$dir/exit" ]; then
    line=$(head -c 64 "$dir/exit"); set -f; set -- $line; set +f
    code=${1:-bad} end=${2:--}
    case $code in *[!0-9]*|????*) code=bad ;; esac
fi
if [ -f "$dir/pid" ]; then
    line=$(head -c 64 "$dir/pid"); set -f; set -- $line; set +f; start=${2:--}
fi
case $start in *[!0-9.]*|'') start=- ;; esac
case $end in *[!0-9.]*|'') end=- ;; esac
[ -e "$dir/cancelled" ] && cancelled=1
if [ "$keep" -gt 0 ]; then
    for f in "$dir"/log.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do
        [ -f "$f" ] && prev=$last last=$f
    done
fi
if [ -n "$last" ]; then  # part k: the log had (k + 1) * KEEP bytes before it
    k=${last##*.}; k=${k#"${k%%[!0]*}"}; k=${k:-0}
    s=$(stat -c %s -- "$last" 2>/dev/null); case $s in ''|*[!0-9]*) s=0 ;; esac
    size=$(((k + 1) * keep + s))
    [ "$k" -le 1 ] || files=  # parts were dropped: the tail is not the head's continuation
    files="$files $prev $last"
elif [ -f "$dir/log" ]; then
    size=$(stat -c %s -- "$dir/log" 2>/dev/null); case $size in ''|*[!0-9]*) size=0 ;; esac
fi
printf 'sandhub-job %s %s %s %s %s %s\n' \
    "$alive" "$code" "$size" "$start" "$end" "$cancelled" >&2
if [ "$n" -gt 0 ]; then
    for f in $files; do [ -f "$f" ] && tail -c "$n" -- "$f"; done 2>/dev/null | tail -c "$n"
fi
exit 0
"""

# sh -c CANCEL sandhub-cancel DIR JOB SID MODE: with MODE "term", SIGTERM and up to
# KILL_AFTER s to exit first; "kill" goes straight to the fork-free SIGKILL rounds (what the
# caller asks for when a "term" run died on a failed fork). Everything of the job goes,
# its output keeper too.
_CANCEL = r"""
dir=$1 job=$2 sid=$3 mode=$4 me=$$ cap=
[ -d "$dir" ] && [ ! -e "$dir/exit" ] && : > "$dir/cancelled"
if [ "$mode" = term ]; then
    # Each group at once first: a shell of the job then dies with the command it waits for,
    # instead of seeing it killed (sweeps go in /proc order) and writing "Terminated".
    term_groups
    sig=TERM; sweep_session; sweep_marked
    sig= i=0
    while [ $i -lt $((KILL_AFTER * 50)) ]; do
        i=$((i + 1)); sleep 0.02
        sweep_session; left=$found; sweep_marked
        [ -n "$left$found" ] || break
    done
fi
kill_rounds || { echo "processes of job $job survive SIGKILL" >&2; exit 1; }
"""
CANCEL = (_SWEEP + _CANCEL).replace("KILL_AFTER", str(KILL_AFTER))


# --- a job request, checked the same way by every path that starts one -----------------------
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the job's directory name and marker value


def check_job(argv: list[str], job_id: str, timeout: float | None) -> None:
    """BackendError for what no start path may be given: it goes into paths and scripts."""
    if not argv:
        raise BackendError("empty command")
    if not JOB_ID_RE.match(job_id):
        raise BackendError(f"malformed job id {job_id!r}")
    if timeout is not None and timeout <= 0:
        raise BackendError("timeout must be positive")


# --- reading POLL's answer (both backends) ------------------------------------------------------
_STATUS = re.compile(r"sandhub-job ([01]) (\S+) (\d{1,19}) (\S+) (\S+) ([01])")
_MAX_OUTPUT_BYTES = 2**62  # what a poll may claim the log holds (the column is a bigint)
_MAX_ELAPSED = 10 * 365 * 24 * 3600.0


def parse_status(stderr: str, output: bytes) -> JobStatus:
    """The poll's status line, checked field by field: whatever the sandbox wrote into the
    job's files, the answer is a status (with `problem` set), never an exception."""
    for line in reversed(stderr.splitlines()):
        found = _STATUS.fullmatch(line.strip())
        if found:
            break
    else:
        raise BackendError(f"unreadable job status: {stderr[-300:]!r}")
    alive, code, size, start, end, cancelled = found.groups()
    exit_code, problem = None, ""
    if code.isdigit() and int(code) <= 255:
        exit_code = int(code)
    elif code != "-":
        problem = (
            "the job's exit file holds no exit code (it was overwritten from "
            "inside the sandbox?); the command's exit code is unknown"
        )
    started, ended = _seconds(start), _seconds(end)
    elapsed = ended - started if started is not None and ended is not None else None
    return JobStatus(
        # A runner still alive writes the real exit file when the command ends.
        running=alive == "1" and exit_code is None,
        exit_code=exit_code,
        output=output,
        output_bytes=min(int(size), _MAX_OUTPUT_BYTES),
        cancelled=cancelled == "1",
        elapsed_seconds=elapsed if elapsed is not None and 0 <= elapsed <= _MAX_ELAPSED else None,
        problem=problem,
    )


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
