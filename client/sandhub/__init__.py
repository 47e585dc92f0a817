"""sandhub: the command line and local MCP server for a Sandhub platform.

`sandhub.api.Platform` talks to the platform (REST and MCP), `sandhub.sync.push` / `pull`
sync a local directory with one in a sandbox, `sandhub.cli` is the `sandhub` command.
"""

__version__ = "0.1.0"
