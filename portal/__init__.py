"""Portal: REST API and web UI to register and run subscriptions."""
