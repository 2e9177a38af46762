"""What only `ferry dev` needs: the embedded services (ZooKeeper, a Kafka-protocol broker), the
launcher that starts the whole stack on one machine, and the demo producer and echo endpoint.

Nothing in the services imports this package; production installs may leave out its extra
(`pip install ferry` without `[embedded]`)."""
