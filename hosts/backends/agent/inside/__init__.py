"""The agent program that runs inside each sandbox, serving one platform process.

Standard library only, Python 3.8 and later: it runs on the sandbox image's python3. The
modules here are sent into the sandbox as ONE source (hosts.backends.agent.source bundles
them in the order of PARTS, dropping their relative imports of each other), so a module may
only use names of the modules before it, and no two define the same top-level name
(tests/agent/test_protocol.py checks both). They are also importable on the platform, for
tests; nothing there runs at import.

- constants: the protocol's constants, the one copy both ends use (protocol.py documents them);
- guard: the agent's streams and memory are its own (non-dumpable; children open up safely);
- oom:   every child the agent starts goes before it when memory runs out (oom_score_adj);
- wire:  frames out, requests in flight, the worker pool and the reaper of children;
- procs: the fork-free /proc sweep, output kept head and tail;
- command: one command: spawn in a session of its own, stream its output, timeout, cancel;
- files: read, write (atomic), list, background job start, kill by marker;
- sync:  a tree's manifest (sorted, paged, walked lazily) and deletions under a root;
- ports: port streams: a TCP connection to the sandbox's own listener, both ways (previews);
- terminals: terminals and shell sessions: their holders (holder.py, shellholder.py, not
  parts: the agent carries their text as HOLDER_PROGRAM and starts them as programs of
  their own) started, attached to, closed and listed;
- main:  the agent itself: reads frames, dispatches requests, shuts down at end of input.
"""

PARTS = (
    "constants",
    "guard",
    "oom",
    "wire",
    "procs",
    "command",
    "files",
    "sync",
    "ports",
    "terminals",
    "main",
)
# The holder of a terminal or shell session: one program of its own, carried by the agent.
HOLDER_PARTS = ("holder", "ptyholder", "shellholder", "holdermain")
