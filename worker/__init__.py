"""Workers: stateless; each pushes the records of the partitions it owns to HTTP endpoints."""
