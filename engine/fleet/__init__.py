"""Fleet mode: events on NATS JetStream, partitions of the rules' key spaces owned by `gpuslo worker` processes,
state and ownership in PostgreSQL (docs/fleet.md)."""
