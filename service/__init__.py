"""The gRPC allocation service, its inventory, metrics and the dra-solver CLI."""
