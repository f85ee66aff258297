"""What the Worker's etcd adapters and the client's registry view both use (the
endpoint syntax, the prefix watch): below both, so a client install needs
neither the Worker's adapters nor their dependencies."""
