"""Admin for the product: sandboxes and snapshots (delete through the service), the command
history, the warm pool, previews and links, the processes' liveness leases (read-only). A
module a topic; importing them registers them."""

from sandboxes.admin import (  # noqa: F401
    egress,
    history,
    leases,
    pool,
    previews,
    sandbox,
    snapshots,
    terminals,
    usage,
)
