"""Manifests: opening and checking them, selections, frames both ways, and the user SQL that filters them."""
