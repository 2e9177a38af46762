"""Coordinators: one elected leader assigns partitions to workers and fences handoffs."""
