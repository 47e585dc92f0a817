"""SSH hosts: the connection layer the SSH backend is built on.

- `connection`: `SshTarget` (where and how to log in), `SshConnection` (one authenticated,
  thread-safe connection; `run`, `open_channel`), `RunResult`.
- `pool`: `ConnectionPool` / `pool`, one connection per target per process.
- `hostkeys`: `fingerprint`, `fetch_host_key`, `HostKey` (pinning; never trust on first use).
- `keys`: `load_private_key` (Ed25519, RSA, ECDSA; optional passphrase).
- `errors`: everything raised derives from `SshError` (a `BackendError`).
- `handshake`, `commands`, `ordering`, `watchdog`: internals of the above (TCP_NODELAY socket
  and key exchange; bounded command output; paramiko's send-after-CLOSE race; deadlines).
"""
