"""Companion controllers: ResourceClaim lifecycle, scheduler, taint eviction."""
