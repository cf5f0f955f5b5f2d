"""dra-solver subcommands, one module each."""
