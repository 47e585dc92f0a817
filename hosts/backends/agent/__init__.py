"""The sandbox agent: a small stdlib-only program run inside each sandbox, and its client.

- protocol.py:   the frames and operations both sides speak;
- sandbox/:      the agent itself (runs inside the sandbox; source.py bundles it into one
                 program sent over the transport's stdin);
- client.py:     AgentClient, the platform's side, over any Transport (calls.py: the calls
                 in flight and their errors);
- transports.py: a transport over a local child process (tests, tools).

Backend kinds start the agent through their own transport (Docker: docker/agent_link.py);
this package never imports them.
"""
