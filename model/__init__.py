"""The pure core of dra-solver: objects, CEL, pools, allocators, validator. No I/O."""
