"""The partition worker: the engine-neutral exactly-once protocol, and the bulk loop it uses."""
