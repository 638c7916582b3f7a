"""The numerics: stage functions, the stage table, the fast and traced paths (NumPy only)."""
