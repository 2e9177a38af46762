"""``ferry`` client commands for operators: the portal's and the gateway's HTTP APIs from a
terminal (docs/cli.md). Imports no service: only the shared modules and httpx."""
