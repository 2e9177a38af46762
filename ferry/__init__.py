"""Ferry's shared contracts: settings, the subscription document, the offset record, ZooKeeper paths.

This package is imported by every service (``coordinator``, ``worker``, ``portal``, ``replay``)
and imports none of them (``ferry.cli`` and ``ferry.devstack.dev`` excepted: they launch services).
"""

__version__ = "0.1.0"
