"""The per-command path: where the sandbox agent cannot run (no usable python3 in the image or
on the host), every command, job operation and listing is one exec of a POSIX sh script.

Written once for every kind, on the one primitive a kind provides (primitive.PlainExec: run
an argv as the sandbox user, output as it comes, an exit code; Docker: an engine exec, SSH: an
exec channel) and the kind's SandboxPlace (place.py) for paths:

- commands.py: commands through execscripts.WRAPPER (timeout inside, the sweeps after),
  the platform's own scripts, listings, and the sync scripts' runner;
- jobs.py: background jobs through jobscripts (START, POLL, CANCEL): the same files the agent
  path uses, so either path polls and cancels a job the other started.

A command costs a process start more than through the agent, which is why the agent stays the
first choice (agentfirst.py).
"""
