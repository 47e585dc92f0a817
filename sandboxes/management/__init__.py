"""Management commands of the sandboxes app (an interface: they call services only)."""
