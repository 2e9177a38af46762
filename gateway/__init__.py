"""The produce side: an HTTP service that writes records to Kafka for clients without a Kafka client
(`ferry gateway`, docs/gateway.md). It shares only the `ferry` modules; it never imports the worker or
the portal."""
