"""Django-free metric scorers. See `base` for the contract and `registry` for the names."""
